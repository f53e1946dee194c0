// CORS for browser clients (--allowed-origins): which origins may call the API, and the
// Access-Control-* headers for a preflight (OPTIONS) and for an ordinary response. Pure (no
// HTTP types), so that it is unit-tested; http_server.cpp applies the headers.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace flashserve {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

class CorsPolicy {
 public:
  CorsPolicy() = default;  // no origin allowed: no CORS headers at all
  // The flag's value: "" (none), "*" (any origin), or a comma-separated list of exact origins
  // ("https://app.example.com,http://localhost:3000"). Throws flashserve::Error for an empty
  // item or an origin with a path, so a mistyped flag fails at start-up.
  explicit CorsPolicy(const std::string& allowed_origins);

  bool allows(const std::string& origin) const;
  // An ordinary response to a request from `origin` ("" = no Origin header): the origin echoed,
  // and Vary: Origin (the answer depends on it). Empty when the origin is not allowed.
  HeaderList response_headers(const std::string& origin) const;
  // A preflight from `origin` asking for `request_headers` (Access-Control-Request-Headers):
  // the response headers plus the methods, Authorization and Content-Type, those of the asked
  // headers on a safe list, and how long the browser may cache the answer. Empty when refused.
  HeaderList preflight_headers(const std::string& origin, const std::string& request_headers) const;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;
};

}  // namespace flashserve
