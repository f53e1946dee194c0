// FakeSseServer: a scripted stand-in for flashserve on 127.0.0.1, for client tests that need a
// reply the real server cannot be made to give on cue: a slow one (to interrupt it), or one that
// fails mid-stream. GET /v1/models names one model; POST /v1/chat/completions (chat chunks with
// {"delta":{"content"}}) and POST /v1/completions ("text") answer with the script's text deltas as
// SSE events (chunked, paced) and then end the way the script says.
// It records the completion request's body and whether the client hung up during the reply.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashserve::testing {

enum class ReplyEnd {
  kDone,            // a finish_reason "length" event, then [DONE]: a complete reply
  kErrorEvent,      // an error event in the stream (as flashserve sends when a request fails)
  kCutMidChunk,     // the connection closes in the middle of a chunk
  kEndWithoutDone,  // the chunked body ends cleanly, but no finish_reason and no [DONE]
  kStatus503,       // no stream at all: 503 with an OpenAI error body
};

struct ReplyScript {
  std::vector<std::string> texts;              // one event per text delta of choice 0
  std::chrono::milliseconds interval{0};       // pause before each event
  ReplyEnd end = ReplyEnd::kDone;
};

class FakeSseServer {
 public:
  explicit FakeSseServer(ReplyScript script) : script_(std::move(script)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 8) != 0) {
      return;
    }
    socklen_t len = sizeof a;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeSseServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  int port() const { return port_; }
  bool client_hung_up() const { return hung_up_; }
  int events_sent() const { return events_sent_; }
  std::string completion_body() const {
    std::lock_guard<std::mutex> lock(mu_);
    return completion_body_;
  }

 private:
  // One connection at a time: the client makes its requests one after the other.
  void serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      handle(fd);
      close(fd);
    }
  }

  void handle(int fd) {
    std::string req;
    char buf[4096];
    size_t head_end;
    while ((head_end = req.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      req.append(buf, n);
    }
    size_t content_length = 0;
    std::string head = req.substr(0, head_end);
    for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (size_t at = head.find("content-length:"); at != std::string::npos) {
      content_length = std::stoul(head.substr(at + 15));
    }
    std::string body = req.substr(head_end + 4);
    while (body.size() < content_length) {
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      body.append(buf, n);
    }
    if (req.rfind("GET /v1/models", 0) == 0) {
      send_plain(fd, 200, R"({"object":"list","data":[{"id":"fake-model","object":"model",)"
                          R"("max_model_len":4096}]})");
    } else if (req.rfind("POST /v1/completions", 0) == 0 ||
               req.rfind("POST /v1/chat/completions", 0) == 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        completion_body_ = body;
      }
      chat_ = req.rfind("POST /v1/chat/completions", 0) == 0;
      stream_reply(fd);
    } else {
      send_plain(fd, 404, R"({"error":{"message":"not found","type":"invalid_request_error"}})");
    }
  }

  static bool send_all(int fd, const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  static void send_plain(int fd, int status, const std::string& body) {
    send_all(fd, "HTTP/1.1 " + std::to_string(status) + (status == 200 ? " OK" : " Error") +
                     "\r\nContent-Type: application/json\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }
  static bool send_chunk(int fd, const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return send_all(fd, size + data + "\r\n");
  }
  static std::string event(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }
  nlohmann::json text_chunk(const std::string& text, const nlohmann::json& finish) const {
    if (chat_) {
      return {{"object", "chat.completion.chunk"},
              {"choices", {{{"index", 0}, {"delta", {{"content", text}}}, {"finish_reason", finish}}}}};
    }
    return {{"object", "text_completion"},
            {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", finish}}}}};
  }

  // Whether the peer closed its side (it reads nothing from us, so readable means EOF or reset).
  static bool peer_closed(int fd) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
  }

  // Sleeps `d` in short slices; false when the client closed the connection first (or the
  // server is stopping).
  bool wait_unless_closed(int fd, std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
      if (stop_ || peer_closed(fd)) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  // The same before an event: a close there is the client hanging up mid-reply.
  bool pause(int fd, std::chrono::milliseconds d) {
    if (wait_unless_closed(fd, d)) return true;
    if (!stop_) hung_up_ = true;
    return false;
  }

  void stream_reply(int fd) {
    if (script_.end == ReplyEnd::kStatus503) {
      send_plain(fd, 503, R"({"error":{"message":"the server is overloaded, retry later",)"
                          R"("type":"server_error","param":null,"code":null}})");
      return;
    }
    if (!send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")) {
      return;
    }
    for (const std::string& t : script_.texts) {
      if (!pause(fd, script_.interval)) return;
      if (!send_chunk(fd, event(text_chunk(t, nullptr)))) {
        hung_up_ = true;
        return;
      }
      ++events_sent_;
    }
    switch (script_.end) {
      case ReplyEnd::kDone:
        send_chunk(fd, event(text_chunk("", "length")));
        send_chunk(fd, "data: [DONE]\n\n");
        send_all(fd, "0\r\n\r\n");
        break;
      case ReplyEnd::kErrorEvent:
        send_chunk(fd, event({{"error", {{"message", "the engine failed: out of KV blocks"},
                                         {"type", "server_error"},
                                         {"param", nullptr},
                                         {"code", nullptr}}}}));
        send_chunk(fd, "data: [DONE]\n\n");
        send_all(fd, "0\r\n\r\n");
        break;
      case ReplyEnd::kCutMidChunk:
        send_all(fd, "40\r\ndata: {\"choi");  // promises 64 bytes, sends 13, hangs up
        break;
      case ReplyEnd::kEndWithoutDone:
        send_all(fd, "0\r\n\r\n");
        break;
      case ReplyEnd::kStatus503:
        break;
    }
    // Let the client read everything before the close (a close with unread request bytes
    // would turn into a reset that could eat the tail of the reply).
    shutdown(fd, SHUT_WR);
    wait_unless_closed(fd, std::chrono::milliseconds(2000));
  }

  ReplyScript script_;
  int listen_fd_ = -1;
  int port_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> hung_up_{false};
  std::atomic<int> events_sent_{0};
  mutable std::mutex mu_;
  std::string completion_body_;
  std::atomic<bool> chat_{false};  // the last request came to /v1/chat/completions
};

}  // namespace flashserve::testing
