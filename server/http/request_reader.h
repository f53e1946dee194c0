// RequestReader: checks the bytes a client has sent so far and says whether they hold a complete
// HTTP/1.1 request (head and body), need more, or are an error to answer at once. Pure (no
// sockets): the connection front end (server/http/connection_front.h) calls it after every read, and
// hands a complete request on in a normalised form that cpp-httplib parses without surprises.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace flashserve {

struct RequestLimits {
  size_t max_line_bytes = 8 * 1024;   // the request line; beyond: 414
  size_t max_head_bytes = 16 * 1024;  // request line + headers; beyond: 431
  size_t max_body_bytes = 4u << 20;   // declared or de-chunked body; beyond: 413
};

struct ParsedRequest {
  enum class State {
    kNeedHead,  // the head is not complete yet
    kNeedBody,  // the head is complete and valid; the body is not
    kComplete,  // `request` and `consumed` are set
    kError,     // answer `status` with `message` and close the connection
  };
  State state = State::kNeedHead;
  int status = 0;
  std::string message;
  std::string method, path;      // path without the query (set once the head is complete)
  bool expect_continue = false;  // the client waits for "100 Continue" before sending the body
  // kComplete: the request again with its body de-chunked: the request line, the client's headers
  // but Content-Length / Transfer-Encoding / Expect, "Content-Length: N", the body.
  std::string request;
  size_t consumed = 0;  // bytes of the input this request took (the rest is the next request)
};

// Looks at the start of `input` (what a connection has received and not yet consumed).
// Strict by design: CRLF line ends, token method and header names, no control characters (NUL
// included) in the target or any header value, one Content-Length or `Transfer-Encoding:
// chunked` (not both), HTTP/1.0 or 1.1. A POST/PUT/PATCH with neither is 411. A bare LF, or a
// method byte outside tchar (a TLS ClientHello starts with 0x16), is a 400 as soon as it arrives.
ParsedRequest read_request(std::string_view input, const RequestLimits& limits);

}  // namespace flashserve
