// A minimal blocking HTTP/1.1 client over POSIX sockets for the server tests and the load
// generator (bench/bench_server.cpp): one request per connection (Connection: close), chunked
// or Content-Length bodies delivered piece by piece, and the ability to hang up mid-response.
// Header-only and loopback-oriented; not used by the server itself.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace flashserve::http {

struct Response {
  int status = 0;                              // 0: no response (connect/IO error, or hung up)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

// Called with each new piece of the body; return false to hang up at once.
using BodyCallback = std::function<bool(std::string_view piece)>;

class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { close(); }

  bool connect(const std::string& host, int port, int timeout_s = 60) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    timeval tv{timeout_s, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close();
      return false;
    }
    return true;
  }

  bool send_all(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  bool send_request(const std::string& method, const std::string& path, const std::string& body,
                    const std::vector<std::string>& extra_headers = {}) {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    for (const auto& h : extra_headers) req += h + "\r\n";
    if (method == "POST" || !body.empty()) {
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    }
    req += "\r\n" + body;
    return send_all(req);
  }

  // Reads the response; `on_body` sees the de-chunked body as it arrives. When it returns false
  // the connection is closed at once (a client that goes away) and status stays as parsed.
  Response read_response(const BodyCallback& on_body = nullptr) {
    Response r;
    std::string buf;
    size_t header_end = std::string::npos;
    while (header_end == std::string::npos) {
      if (!read_more(&buf)) return r;
      header_end = buf.find("\r\n\r\n");
    }
    parse_head(buf.substr(0, header_end), &r);
    buf.erase(0, header_end + 4);
    const bool chunked = r.headers["transfer-encoding"] == "chunked";
    long long remaining = r.headers.count("content-length")
                              ? std::stoll(r.headers["content-length"]) : -1;
    auto deliver = [&](std::string_view piece) {
      r.body.append(piece);
      if (on_body && !piece.empty() && !on_body(piece)) {
        close();
        return false;
      }
      return true;
    };
    if (!chunked) {
      for (;;) {
        if (remaining >= 0 && static_cast<long long>(buf.size()) >= remaining) {
          deliver(std::string_view(buf).substr(0, static_cast<size_t>(remaining)));
          return r;
        }
        if (remaining < 0 && !buf.empty()) {
          if (!deliver(buf)) return r;
          buf.clear();
        }
        if (!read_more(&buf)) {
          if (remaining >= 0) r.status = 0;  // truncated
          else deliver(buf);
          return r;
        }
      }
    }
    for (;;) {  // chunked: "<hex size>\r\n<data>\r\n" ... "0\r\n\r\n"
      size_t eol = buf.find("\r\n");
      if (eol != std::string::npos) {
        size_t size = std::stoul(buf.substr(0, eol), nullptr, 16);
        if (size == 0) return r;
        if (buf.size() >= eol + 2 + size + 2) {
          std::string piece = buf.substr(eol + 2, size);
          buf.erase(0, eol + 2 + size + 2);
          if (!deliver(piece)) return r;
          continue;
        }
      }
      if (!read_more(&buf)) {
        r.status = 0;  // the stream ended without its last chunk
        return r;
      }
    }
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }

 private:
  bool read_more(std::string* buf) {
    if (fd_ < 0) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf->append(tmp, static_cast<size_t>(n));
    return true;
  }

  static void parse_head(const std::string& head, Response* r) {
    size_t pos = head.find("\r\n");
    std::string status_line = head.substr(0, pos);
    size_t sp = status_line.find(' ');
    if (sp != std::string::npos) r->status = std::atoi(status_line.c_str() + sp + 1);
    while (pos != std::string::npos && pos < head.size()) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos
                                                                        : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t v = line.find_first_not_of(' ', colon + 1);
        r->headers[name] = v == std::string::npos ? "" : line.substr(v);
      }
      pos = next;
    }
  }

  int fd_ = -1;
};

// One request on a fresh connection.
inline Response request(int port, const std::string& method, const std::string& path,
                        const std::string& body = "",
                        const std::vector<std::string>& headers = {},
                        const BodyCallback& on_body = nullptr) {
  Connection c;
  if (!c.connect("127.0.0.1", port) || !c.send_request(method, path, body, headers)) return {};
  return c.read_response(on_body);
}

// Splits an SSE body into its `data:` payloads (in order).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) out.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace flashserve::http
