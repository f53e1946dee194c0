// ResponsesStore (label unit): get/put/erase, least-recently-used eviction by entries and by bytes,
// the lifetime measured from when an entry was stored, an entry too large to keep, and many
// threads at once (a sanitizer build checks the locking).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "server/endpoints/responses_store.h"

namespace flashserve {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

StoredResponse entry(const std::string& text) {
  return StoredResponse{json{{"output", text}}, json::array({json{{"content", text}}})};
}

TEST(ResponsesStore, PutGetErase) {
  ResponsesStore s;
  EXPECT_FALSE(s.get("resp_a"));
  s.put("resp_a", entry("one"));
  auto got = s.get("resp_a");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->response["output"], "one");
  EXPECT_EQ(got->input_items[0]["content"], "one");
  s.put("resp_a", entry("two"));  // replaced, not added
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.get("resp_a")->response["output"], "two");
  EXPECT_TRUE(s.erase("resp_a"));
  EXPECT_FALSE(s.erase("resp_a"));
  EXPECT_FALSE(s.get("resp_a"));
  EXPECT_EQ(s.bytes(), 0u);
}

TEST(ResponsesStore, EvictsTheLeastRecentlyUsedPastMaxEntries) {
  ResponsesStore s({3, size_t(1) << 20, 3600s});
  s.put("a", entry("a"));
  s.put("b", entry("b"));
  s.put("c", entry("c"));
  ASSERT_TRUE(s.get("a"));  // now b is the least recently used
  s.put("d", entry("d"));
  EXPECT_EQ(s.size(), 3u);
  EXPECT_FALSE(s.get("b"));
  EXPECT_TRUE(s.get("a") && s.get("c") && s.get("d"));
}

TEST(ResponsesStore, EvictsPastMaxBytesAndSkipsWhatCannotFit) {
  const size_t one = [] {
    ResponsesStore probe;
    probe.put("x0", entry(std::string(100, 'x')));
    return probe.bytes();
  }();
  ASSERT_GT(one, 100u);
  ResponsesStore s({100, 2 * one + one / 2, 3600s});
  for (int i = 0; i < 5; ++i) s.put("x" + std::to_string(i), entry(std::string(100, 'x')));
  EXPECT_EQ(s.size(), 2u);  // two fit the bytes
  EXPECT_LE(s.bytes(), 2 * one + one / 2);
  EXPECT_TRUE(s.get("x3") && s.get("x4"));
  s.put("huge", entry(std::string(10 * one, 'y')));  // larger than the whole store: not kept
  EXPECT_FALSE(s.get("huge"));
  EXPECT_EQ(s.size(), 2u);
}

TEST(ResponsesStore, EntriesExpireALifetimeAfterTheyWereStored) {
  ResponsesStore s({10, size_t(1) << 20, 60s});
  const auto t0 = ResponsesStore::Clock::now();
  s.put("old", entry("o"), t0);
  s.put("new", entry("n"), t0 + 30s);
  EXPECT_TRUE(s.get("old", t0 + 59s));  // reading does not extend the lifetime
  EXPECT_FALSE(s.get("old", t0 + 60s));
  EXPECT_TRUE(s.get("new", t0 + 60s));
  EXPECT_FALSE(s.erase("new", t0 + 90s));  // expired: as if absent
  EXPECT_EQ(s.size(), 0u);
}

TEST(ResponsesStore, ManyThreads) {
  ResponsesStore s({64, size_t(1) << 20, 3600s});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&s, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string id = "r" + std::to_string((t * 31 + i) % 100);
        s.put(id, entry(id));
        if (auto got = s.get(id)) EXPECT_EQ(got->response["output"], id);
        if (i % 7 == 0) s.erase(id);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(s.size(), 64u);
}

}  // namespace
}  // namespace flashserve
