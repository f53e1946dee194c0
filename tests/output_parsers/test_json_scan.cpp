// scan_json_value against nlohmann's parser: a complete value is exactly what nlohmann accepts,
// every proper prefix of a valid document is partial, and an invalid byte is found where it is.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "output_parsers/json_scan.h"

namespace flashserve::output_parsers {
namespace {

const std::vector<std::string> kValid = {
    "{}", "[]", "0", "-0", "12.5e-3", "1E+9", "true", "false", "null", "\"\"",
    "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE80\"", "\"Zürich 東京 🚀\"",
    "{\"a\": [1, {\"b\": null}, \"x\"], \"c\": {\"d\": [[], {}]}}", "[ 1 , 2 ]",
    "{ \"k\" : \"v\" }"};

TEST(JsonScan, ValidValuesAreCompleteAndTheirPrefixesPartial) {
  for (const std::string& v : kValid) {
    ASSERT_TRUE(nlohmann::json::accept(v)) << v;
    const JsonSpan s = scan_json_value(v, 0);
    // A number that reaches the end of the text could still take more digits.
    const bool number = v[0] == '-' || (v[0] >= '0' && v[0] <= '9');
    EXPECT_EQ(s.status, number ? JsonStatus::kPartial : JsonStatus::kComplete) << v;
    EXPECT_EQ(s.end, v.size()) << v;
    if (number) {
      EXPECT_EQ(scan_json_value(v + " ", 0).status, JsonStatus::kComplete) << v;
    }
    for (size_t n = 1; n < v.size(); ++n) {
      const JsonSpan p = scan_json_value(std::string_view(v).substr(0, n), 0);
      // A number prefix that is itself a number ("12" of "12.5e-3") can only be partial too.
      EXPECT_EQ(p.status, JsonStatus::kPartial) << v.substr(0, n);
    }
  }
}

TEST(JsonScan, ValueEndsWhereTheTextGoesOn) {
  EXPECT_EQ(scan_json_value("{\"a\": 1}</tool_call>", 0).end, 8u);
  EXPECT_EQ(scan_json_value("12, 13", 0).end, 2u);
  EXPECT_EQ(scan_json_value("x[1]", 1).end, 4u);
  EXPECT_EQ(scan_json_value("\"s\"tail", 0).end, 3u);
}

TEST(JsonScan, InvalidBytesAreFound) {
  struct Bad {
    std::string text;
    size_t at;
  };
  const std::vector<Bad> bad = {{"{\"a\": 1,}", 8}, {"[1,]", 3},       {"{a: 1}", 1},
                                {"01", 1},          {"-", 1},          {"1.e5", 2},
                                {"tru e", 3},       {"\"a\nb\"", 2},   {"\"\\x\"", 2},
                                {"\"\\u12g4\"", 5}, {"{\"a\" 1}", 5},  {"[1 2]", 3},
                                {"{\"a\": 1]", 7},  {"'single'", 0}};
  for (const Bad& b : bad) {
    EXPECT_FALSE(nlohmann::json::accept(b.text)) << b.text;
    const JsonSpan s = scan_json_value(b.text, 0);
    // "-" and "01" end early; each is reported where the first byte that cannot follow is.
    if (b.text == "-") {
      EXPECT_EQ(s.status, JsonStatus::kPartial) << b.text;
      continue;
    }
    if (b.text == "01") {
      EXPECT_EQ(s.status, JsonStatus::kComplete) << b.text;  // "0", then a stray "1"
      EXPECT_EQ(s.end, 1u);
      continue;
    }
    EXPECT_EQ(s.status, JsonStatus::kInvalid) << b.text;
    EXPECT_EQ(s.end, b.at) << b.text;
  }
}

TEST(JsonScan, DeepNestingDoesNotRecurse) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  const JsonSpan s = scan_json_value(deep, 0);
  EXPECT_EQ(s.status, JsonStatus::kComplete);
  EXPECT_EQ(s.end, deep.size());
}

}  // namespace
}  // namespace flashserve::output_parsers
