// CorsPolicy (label unit): which origins --allowed-origins admits, the headers of an ordinary
// response and of a preflight (only safe requested headers granted), and the flag values that
// fail at start-up.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "server/http/cors.h"

namespace flashserve {
namespace {

std::map<std::string, std::string> as_map(const HeaderList& h) { return {h.begin(), h.end()}; }

TEST(Cors, NoneByDefault) {
  CorsPolicy none;
  EXPECT_FALSE(none.allows("http://localhost:3000"));
  EXPECT_TRUE(none.response_headers("http://localhost:3000").empty());
  EXPECT_TRUE(none.preflight_headers("http://localhost:3000", "authorization").empty());
  EXPECT_FALSE(CorsPolicy("").allows("http://a.example"));
}

TEST(Cors, ListedOriginsOnly) {
  CorsPolicy p(" https://app.example.com , http://localhost:3000");
  EXPECT_TRUE(p.allows("https://app.example.com"));
  EXPECT_TRUE(p.allows("http://localhost:3000"));
  EXPECT_FALSE(p.allows("http://localhost:3001"));
  EXPECT_FALSE(p.allows("https://app.example.com.evil.com"));
  EXPECT_FALSE(p.allows(""));
  auto h = as_map(p.response_headers("http://localhost:3000"));
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "http://localhost:3000");
  EXPECT_EQ(h["Vary"], "Origin");
  EXPECT_TRUE(p.response_headers("http://other.example").empty());
}

TEST(Cors, AnyOriginIsEchoed) {
  CorsPolicy p("*");
  EXPECT_EQ(as_map(p.response_headers("http://x.example"))["Access-Control-Allow-Origin"],
            "http://x.example");
  EXPECT_TRUE(p.response_headers("").empty());
}

TEST(Cors, PreflightGrantsSafeHeadersOnly) {
  CorsPolicy p("http://localhost:3000");
  auto h = as_map(p.preflight_headers(
      "http://localhost:3000", "Authorization, content-type, X-Stainless-OS, x-evil, openai-beta"));
  EXPECT_EQ(h["Access-Control-Allow-Origin"], "http://localhost:3000");
  EXPECT_EQ(h["Access-Control-Allow-Methods"], "GET, POST, DELETE, OPTIONS");
  EXPECT_EQ(h["Access-Control-Allow-Headers"],
            "Authorization, Content-Type, x-stainless-os, openai-beta");
  EXPECT_EQ(h["Access-Control-Max-Age"], "600");
  EXPECT_EQ(as_map(p.preflight_headers("http://localhost:3000", ""))["Access-Control-Allow-Headers"],
            "Authorization, Content-Type");
  EXPECT_TRUE(p.preflight_headers("http://evil.example", "authorization").empty());
}

TEST(Cors, BadFlagValuesThrow) {
  EXPECT_THROW(CorsPolicy("http://a.example,"), Error);
  EXPECT_THROW(CorsPolicy("localhost:3000"), Error);
  EXPECT_THROW(CorsPolicy("http://a.example/path"), Error);
}

}  // namespace
}  // namespace flashserve
