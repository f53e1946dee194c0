// read_request (see request_reader.h). The checks follow RFC 9110/9112 where a lenient reading
// would let a malformed request through to cpp-httplib (which stops at a NUL, accepts bare LF,
// and reads a body without a length until its timeout). Bytes that can never start a valid head
// are refused as soon as they arrive.
#include "server/http/request_reader.h"

#include <cctype>
#include <cstdint>

namespace flashserve {

namespace {

using State = ParsedRequest::State;

ParsedRequest error(int status, std::string message) {
  ParsedRequest r;
  r.state = State::kError;
  r.status = status;
  r.message = std::move(message);
  return r;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// RFC 9110 "tchar": the characters of a method or a header name.
bool is_tchar(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (!is_tchar(c)) return false;
  }
  return true;
}

// A header value: visible ASCII, space, tab and obs-text (>= 0x80); never NUL, CR, LF or another
// control character.
bool is_field_value(std::string_view s) {
  for (unsigned char c : s) {
    if (c != '\t' && (c < 0x20 || c == 0x7f)) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A whole decimal number (no sign, no spaces), or -1.
int64_t parse_length(std::string_view s) {
  if (s.empty() || s.size() > 18) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// De-chunks input[pos...] into *body. Returns kComplete (with *end just past the trailers),
// kNeedBody, or an error.
ParsedRequest dechunk(std::string_view input, size_t pos, const RequestLimits& limits,
                      std::string* body, size_t* end) {
  ParsedRequest need;
  need.state = State::kNeedBody;
  for (;;) {
    const size_t eol = input.find("\r\n", pos);
    // A size line (extensions included) has no reason to be long; a long one would let a
    // client fill our buffer with framing while its body stays under the limit.
    if ((eol == std::string_view::npos ? input.size() : eol) - pos > 256) {
      return error(400, "Chunk size line too long");
    }
    if (eol == std::string_view::npos) return need;
    std::string_view line = input.substr(pos, eol - pos);
    line = line.substr(0, line.find(';'));  // chunk extensions are ignored
    line = trim(line);
    if (line.empty() || line.size() > 15) return error(400, "Malformed chunk size");
    uint64_t size = 0;
    for (char c : line) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) return error(400, "Malformed chunk size");
      size = size * 16 + uint64_t(std::isdigit(static_cast<unsigned char>(c))
                                      ? c - '0' : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
    }
    pos = eol + 2;
    if (size == 0) {  // the last chunk; then trailer lines (skipped) up to an empty line
      for (;;) {
        const size_t t = input.find("\r\n", pos);
        if (t == std::string_view::npos) {
          if (input.size() - pos > limits.max_head_bytes) return error(431, "Trailers too large");
          return need;
        }
        if (!is_field_value(input.substr(pos, t - pos))) return error(400, "Malformed trailer");
        const bool last = t == pos;
        pos = t + 2;
        if (last) {
          *end = pos;
          ParsedRequest done;
          done.state = State::kComplete;
          return done;
        }
      }
    }
    if (body->size() + size > limits.max_body_bytes) {
      return error(413, "Request body exceeds the limit of " +
                            std::to_string(limits.max_body_bytes) + " bytes");
    }
    if (input.size() < pos + size + 2) return need;
    if (input.substr(pos + size, 2) != "\r\n") return error(400, "Malformed chunk");
    body->append(input.substr(pos, size));
    pos += size + 2;
  }
}

// What can be refused before the head is complete, so that a client that will never send a valid
// head gets its 400 at once rather than a 408 at the head deadline: a method byte that is not a
// tchar (a TLS ClientHello starts with 0x16), or a bare LF line end. RFC 9112 allows a server to
// accept a lone LF; refusing it keeps one reading of the head here and in cpp-httplib.
ParsedRequest refuse_early(std::string_view input, size_t start) {
  for (size_t i = start; i < input.size() && input[i] != ' '; ++i) {
    const unsigned char c = static_cast<unsigned char>(input[i]);
    if (c == '\r' || c == '\n') break;  // a malformed request line; the line checks answer it
    if (is_tchar(c)) continue;
    if (i == start && c == 0x16)
      return error(400, "TLS handshake sent to a plain-HTTP port: use http://, not https://");
    return error(400, "Malformed method");
  }
  const size_t head_end = input.find("\r\n\r\n", start);
  const std::string_view head = input.substr(
      start, head_end == std::string_view::npos ? std::string_view::npos : head_end - start);
  for (size_t i = head.find('\n'); i != std::string_view::npos; i = head.find('\n', i + 1)) {
    if (i == 0 || head[i - 1] != '\r')
      return error(400, "Bare LF line end: lines must end with CRLF");
  }
  return ParsedRequest{};
}

}  // namespace

ParsedRequest read_request(std::string_view input, const RequestLimits& limits) {
  // Empty lines before a request line are ignored (RFC 9112 2.2): some clients send a CRLF
  // after a body.
  size_t start = 0;
  while (input.substr(start, 2) == "\r\n") start += 2;
  if (start > limits.max_line_bytes) return error(400, "Too many empty lines before the request");
  if (ParsedRequest early = refuse_early(input, start); early.state == State::kError) return early;
  const size_t line_end = input.find("\r\n", start);
  if ((line_end == std::string_view::npos ? input.size() : line_end) - start > limits.max_line_bytes) {
    return error(414, "Request line exceeds " + std::to_string(limits.max_line_bytes) + " bytes");
  }
  const size_t head_end = input.find("\r\n\r\n", start);
  if (head_end == std::string_view::npos) {
    if (input.size() - start > limits.max_head_bytes) {
      return error(431, "Request head exceeds " + std::to_string(limits.max_head_bytes) + " bytes");
    }
    return ParsedRequest{};
  }
  if (head_end - start > limits.max_head_bytes) {
    return error(431, "Request head exceeds " + std::to_string(limits.max_head_bytes) + " bytes");
  }
  const std::string_view head = input.substr(start, head_end - start);

  // Request line: METHOD SP target SP HTTP/1.x
  size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return error(400, "Malformed request line");
  ParsedRequest r;
  r.method = std::string(line.substr(0, sp1));
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(r.method)) return error(400, "Malformed method");
  if (target.empty()) return error(400, "Empty request target");
  for (unsigned char c : target) {
    if (c <= 0x20 || c >= 0x7f) return error(400, "Invalid character in the request target");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return error(version.rfind("HTTP/", 0) == 0 ? 505 : 400, "Unsupported HTTP version");
  }
  r.path = std::string(target.substr(0, target.find('?')));

  // Headers.
  std::string headers;  // kept ones, each with its CRLF
  int64_t content_length = -1;
  bool chunked = false;
  while (eol != std::string_view::npos) {
    const size_t next = head.find("\r\n", eol + 2);
    const std::string_view h = head.substr(eol + 2, next == std::string_view::npos
                                                        ? std::string_view::npos : next - eol - 2);
    eol = next;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) return error(400, "Malformed header line");
    const std::string_view name = h.substr(0, colon);  // no space allowed before the colon
    const std::string_view value = trim(h.substr(colon + 1));
    if (!is_token(name)) return error(400, "Malformed header name");
    if (!is_field_value(value)) return error(400, "Control character in header '" + std::string(name) + "'");
    if (iequals(name, "Content-Length")) {
      const int64_t n = parse_length(value);
      if (n < 0) return error(400, "Malformed Content-Length");
      if (content_length >= 0 && n != content_length) return error(400, "Conflicting Content-Length");
      content_length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      if (!iequals(value, "chunked") || chunked) {
        return error(501, "Only 'Transfer-Encoding: chunked' is supported");
      }
      chunked = true;
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return error(417, "Only 'Expect: 100-continue' is supported");
      r.expect_continue = true;
    } else {
      headers.append(h);
      headers.append("\r\n");
    }
  }
  if (chunked && content_length >= 0) {
    return error(400, "Both Content-Length and Transfer-Encoding");  // a smuggling attempt
  }
  const bool needs_length = r.method == "POST" || r.method == "PUT" || r.method == "PATCH";
  if (!chunked && content_length < 0 && needs_length) {
    return error(411, "A request body needs Content-Length or 'Transfer-Encoding: chunked'");
  }
  if (content_length > int64_t(limits.max_body_bytes)) {
    return error(413, "Request body exceeds the limit of " + std::to_string(limits.max_body_bytes) +
                          " bytes");
  }

  // Body.
  const size_t body_start = head_end + 4;
  std::string body;
  size_t end = body_start;
  if (chunked) {
    ParsedRequest d = dechunk(input, body_start, limits, &body, &end);
    if (d.state == State::kError) return d;
    if (d.state == State::kNeedBody) {
      r.state = State::kNeedBody;
      return r;
    }
  } else if (content_length > 0) {
    if (input.size() - body_start < size_t(content_length)) {
      r.state = State::kNeedBody;
      return r;
    }
    body = std::string(input.substr(body_start, size_t(content_length)));
    end = body_start + size_t(content_length);
  }
  r.state = State::kComplete;
  r.consumed = end;
  r.request.reserve(line.size() + headers.size() + body.size() + 48);
  r.request.append(line);
  r.request.append("\r\n");
  r.request.append(headers);
  if (!body.empty() || needs_length) {
    r.request.append("Content-Length: " + std::to_string(body.size()) + "\r\n");
  }
  r.request.append("\r\n");
  r.request.append(body);
  return r;
}

}  // namespace flashserve
