// read_request (server/request_reader.h): what the connection front accepts, waits for, and
// refuses, byte by byte, without sockets.
#include <gtest/gtest.h>

#include <string>

#include "server/http/request_reader.h"

namespace flashserve {
namespace {

using State = ParsedRequest::State;

ParsedRequest read(const std::string& s, RequestLimits limits = {}) { return read_request(s, limits); }

TEST(RequestReader, CompleteRequestIsNormalised) {
  const std::string body = R"({"prompt":"Hi"})";
  const std::string raw = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body + "GET /next";
  ParsedRequest r = read(raw);
  ASSERT_EQ(r.state, State::kComplete) << r.message;
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.consumed, raw.size() - 9);  // the pipelined "GET /next" stays for later
  EXPECT_EQ(r.request, "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body);
}

TEST(RequestReader, EveryPrefixNeedsMore) {
  const std::string raw = "POST /v1/completions HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd";
  const size_t head = raw.find("\r\n\r\n") + 4;
  for (size_t n = 0; n < raw.size(); ++n) {
    ParsedRequest r = read(raw.substr(0, n));
    EXPECT_EQ(r.state, n < head ? State::kNeedHead : State::kNeedBody) << n;
  }
  EXPECT_EQ(read(raw).state, State::kComplete);
}

TEST(RequestReader, ChunkedBodyIsDechunked) {
  const std::string raw = "POST /p HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n"
                          "3;ext=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: t\r\n\r\n";
  for (size_t n = raw.find("\r\n\r\n") + 4; n < raw.size(); ++n) {
    EXPECT_EQ(read(raw.substr(0, n)).state, State::kNeedBody) << n;
  }
  ParsedRequest r = read(raw);
  ASSERT_EQ(r.state, State::kComplete) << r.message;
  EXPECT_EQ(r.consumed, raw.size());
  EXPECT_EQ(r.request, "POST /p HTTP/1.1\r\nContent-Length: 19\r\n\r\nabc0123456789abcdef");
}

TEST(RequestReader, RefusesWhatAProxyOrParserCouldReadTwoWays) {
  struct Case {
    const char* name;
    std::string raw;
    int status;
  };
  const std::string nul("X: a\0b\r\n", 8);
  std::string crlfs;  // 10,000 empty lines where a request line should be
  for (int i = 0; i < 10000; ++i) crlfs += "\r\n";
  const std::vector<Case> cases = {
      {"NUL in a value", "GET / HTTP/1.1\r\n" + nul + "\r\n", 400},
      {"control character", "GET / HTTP/1.1\r\nX: a\x01\r\n\r\n", 400},
      {"DEL", "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 400},
      {"bare LF", "GET / HTTP/1.1\r\nX: a\nY: b\r\n\r\n", 400},
      {"bare CR", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nX : a\r\n\r\n", 400},
      {"folded header", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400},
      {"no colon", "GET / HTTP/1.1\r\nnot a header\r\n\r\n", 400},
      {"NUL in target", std::string("GET /a\0b HTTP/1.1\r\n\r\n", 21), 400},
      {"space in target", "GET /a b HTTP/1.1\r\n\r\n", 400},
      {"bad method", "G(T / HTTP/1.1\r\n\r\n", 400},
      {"HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", 505},
      {"not HTTP", "GET / FTP/1.0\r\n\r\n", 400},
      {"POST without length", "POST / HTTP/1.1\r\n\r\n", 411},
      {"PUT without length", "PUT / HTTP/1.1\r\n\r\n", 411},
      {"length and chunked", "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"two lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"signed length", "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", 400},
      {"huge length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
      {"gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"chunked twice", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501},
      {"expect other", "POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n", 417},
      {"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"chunk without CRLF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 400},
      {"long chunk extension", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                                   std::string(300, 'e') + "\r\nX\r\n", 400},
      {"endless empty lines", crlfs, 400},
  };
  for (const Case& c : cases) {
    ParsedRequest r = read(c.raw);
    EXPECT_EQ(r.state, State::kError) << c.name;
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.message;
  }
}

TEST(RequestReader, LimitsAreEnforcedBeforeTheBodyArrives) {
  RequestLimits limits;
  limits.max_line_bytes = 64;
  limits.max_head_bytes = 128;
  limits.max_body_bytes = 10;
  EXPECT_EQ(read("GET /" + std::string(100, 'a'), limits).status, 414);  // no CRLF yet
  EXPECT_EQ(read("GET / HTTP/1.1\r\nX: " + std::string(200, 'b'), limits).status, 431);
  EXPECT_EQ(read("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", limits).status, 413);
  EXPECT_EQ(read("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\n", limits).status,
            413);
  EXPECT_EQ(read("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n", limits).state, State::kNeedBody);
}

TEST(RequestReader, ExpectContinueAndLeadingEmptyLines) {
  ParsedRequest r = read("\r\n\r\nPOST / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_EQ(r.state, State::kNeedBody);
  EXPECT_TRUE(r.expect_continue);
  r = read("\r\nPOST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok");
  ASSERT_EQ(r.state, State::kComplete);
  EXPECT_EQ(r.request, "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nok");  // Expect is dropped
  EXPECT_EQ(read("GET /health HTTP/1.0\r\n\r\n").request, "GET /health HTTP/1.0\r\n\r\n");
}

}  // namespace
}  // namespace flashserve
