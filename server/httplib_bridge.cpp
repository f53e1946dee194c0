// The bridge between ConnectionFront and cpp-httplib (see httplib_bridge.h): the client socket
// check and BufferedRequestStream's reads, writes and addresses.
#include "server/httplib_bridge.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "server/http/connection_front.h"

namespace flashserve {

bool socket_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

bool BufferedRequestStream::is_writable() const {
  pollfd p{fd_, POLLOUT, 0};
  return poll(&p, 1, write_timeout_ms_) > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

ssize_t BufferedRequestStream::read(char* ptr, size_t size) {
  size = std::min(size, in_.size() - pos_);
  std::memcpy(ptr, in_.data() + pos_, size);
  pos_ += size;
  return static_cast<ssize_t>(size);
}

ssize_t BufferedRequestStream::write(const char* ptr, size_t size) {
  if (!head_done_) {
    head_.append(ptr, std::min<size_t>(size, 16384));
    const size_t end = head_.find("\r\n\r\n");
    if (end != std::string::npos || head_.size() >= 16384) {
      head_done_ = true;
      std::string h = head_.substr(0, end) + "\r\n";
      for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      closes_ = h.find("\r\nconnection: close\r\n") != std::string::npos;
    }
  }
  return write_all(fd_, ptr, size, write_timeout_ms_) ? static_cast<ssize_t>(size) : -1;
}

namespace {

using NameFn = int (*)(int, sockaddr*, socklen_t*);

// The numeric address and port of one end of socket `fd` (getpeername or getsockname); left
// as they are when the socket has none.
void socket_address(NameFn fn, int fd, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  char host[NI_MAXHOST] = {0}, serv[NI_MAXSERV] = {0};
  if (fn(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(serv);
}

}  // namespace

void BufferedRequestStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  socket_address(getpeername, fd_, ip, port);
}

void BufferedRequestStream::get_local_ip_and_port(std::string& ip, int& port) const {
  socket_address(getsockname, fd_, ip, port);
}

}  // namespace flashserve
