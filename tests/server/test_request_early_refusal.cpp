// RequestReader's early refusals (label unit): bytes that can never start a valid head (a bare
// LF line end, a TLS ClientHello, a non-token method byte) are a 400 on arrival, before the head
// is complete, so the client is not left waiting for the head deadline's 408.
#include <gtest/gtest.h>

#include "server/http/request_reader.h"

namespace flashserve {
namespace {

using State = ParsedRequest::State;

ParsedRequest read(const std::string& s) { return read_request(s, RequestLimits{}); }

TEST(RequestEarlyRefusal, BareLfHeadIsRefusedBeforeItEnds) {
  for (const std::string& partial : {"GET / HTTP/1.1\n", "GET / HTTP/1.1\nHost: a\n",
                                     "GET / HTTP/1.1\r\nHost: a\n", "\nGET / HTTP/1.1\r\n"}) {
    ParsedRequest r = read(partial);
    EXPECT_EQ(r.state, State::kError) << partial;
    EXPECT_EQ(r.status, 400) << partial;
  }
  EXPECT_EQ(read("GET / HTTP/1.1\n\n").status, 400);
  // A CR whose LF has not arrived yet is not a bare LF.
  EXPECT_EQ(read("GET / HTTP/1.1\r").state, State::kNeedHead);
  EXPECT_EQ(read("GET / HTTP/1.1\r\nHost: a\r").state, State::kNeedHead);
}

TEST(RequestEarlyRefusal, TlsClientHelloIsRefusedAtTheFirstByte) {
  const std::string hello("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11);
  for (size_t n = 1; n <= hello.size(); ++n) {
    ParsedRequest r = read(hello.substr(0, n));
    EXPECT_EQ(r.state, State::kError) << n;
    EXPECT_EQ(r.status, 400) << n;
    EXPECT_NE(r.message.find("TLS"), std::string::npos) << r.message;
  }
}

TEST(RequestEarlyRefusal, NonTokenMethodByteIsRefused) {
  EXPECT_EQ(read("G(").status, 400);
  EXPECT_EQ(read(std::string("\0GET", 4)).status, 400);
  EXPECT_EQ(read("PO").state, State::kNeedHead);
  EXPECT_EQ(read("POST /v1/completions HTTP/1.1\r\nHost:").state, State::kNeedHead);
}

}  // namespace
}  // namespace flashserve
