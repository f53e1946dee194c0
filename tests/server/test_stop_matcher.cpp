// StopMatcher over synthetic pieces: any way of cutting a text into pieces must emit exactly
// the text up to the earliest stop (or all of it), and never any byte of a stop.
#include <gtest/gtest.h>

#include <random>

#include "server/generation/stop_matcher.h"

namespace flashserve {
namespace {

// Runs `pieces` through a matcher; returns everything emitted (flush included when no match).
std::string run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                bool* matched = nullptr) {
  StopMatcher m(stops);
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  out += m.flush();
  if (matched) *matched = m.matched();
  return out;
}

// Reference: the text before the earliest occurrence of any stop.
std::string expected(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& s : stops) {
    if (!s.empty()) first = std::min(first, text.find(s));
  }
  return first == std::string::npos ? text : text.substr(0, first);
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.push(""), "");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcher, StopSpanningPiecesIsNeverEmitted) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("hello E"), "hello ");  // "E" held back
  EXPECT_EQ(m.push("N"), "");              // "EN" held back
  EXPECT_EQ(m.push("D and more"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.push("x"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HeldBackTailIsFlushedAtTheEnd) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("line\n"), "line");
  EXPECT_EQ(m.flush(), "\n");
  EXPECT_FALSE(m.matched());
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"abc"});
  EXPECT_EQ(m.push("xab"), "x");
  EXPECT_EQ(m.push("d"), "abd");
}

TEST(StopMatcher, EarliestStopWins) {
  EXPECT_EQ(run({"world", "lo w"}, {"hello world"}), "hel");
  EXPECT_EQ(run({"b", "abc"}, {"a", "bc"}), "");  // "abc" starts first
}

TEST(StopMatcher, MultiByteStops) {
  // "é" is C3 A9; "😀" is F0 9F 98 80: pieces may split a character's bytes (byte fallback).
  bool matched = false;
  EXPECT_EQ(run({"\xF0\x9F\x98\x80"}, {"hi ", "\xF0\x9F", "\x98", "\x80", " tail"}, &matched),
            "hi ");
  EXPECT_TRUE(matched);
  EXPECT_EQ(run({"caf\xC3\xA9!"}, {"un caf", "\xC3\xA9", " noir"}, &matched),
            "un caf\xC3\xA9 noir");
  EXPECT_FALSE(matched);
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  EXPECT_EQ(run({""}, {"abc"}), "abc");
}

TEST(StopMatcher, RandomChunkingsMatchReference) {
  std::mt19937 rng(1234);
  const std::vector<std::string> alphabet = {"a", "b", " ", "\n", "\xC3\xA9", "\xE2\x82\xAC",
                                             "\xF0\x9F\x98\x80"};
  for (int trial = 0; trial < 2000; ++trial) {
    auto random_text = [&](int max_len) {
      std::string s;
      int len = std::uniform_int_distribution<int>(0, max_len)(rng);
      for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
      return s;
    };
    std::string text = random_text(24);
    std::vector<std::string> stops;
    int num_stops = std::uniform_int_distribution<int>(0, 3)(rng);
    for (int i = 0; i < num_stops; ++i) {
      std::string s = random_text(3);
      if (!s.empty()) stops.push_back(s);
    }
    // Cut at random byte positions (not only character boundaries).
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::uniform_int_distribution<size_t>(0, 4)(rng);
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    ASSERT_EQ(run(stops, pieces), expected(text, stops)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace flashserve
