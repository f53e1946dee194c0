// CorsPolicy (server/http/cors.h). A preflight is granted only the headers that OpenAI's clients send
// (the SDKs' x-stainless-* telemetry headers among them): an allowed origin gets what its
// client needs, never a blanket echo of whatever header names it asks for.
#include "server/http/cors.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace flashserve {

namespace {

constexpr const char* kMaxAgeSeconds = "600";

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    out.push_back(trim(s.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool safe_header(const std::string& name) {
  static const std::vector<std::string> names = {
      "accept", "accept-language", "content-language", "authorization", "content-type",
      "openai-organization", "openai-project", "openai-beta", "x-requested-with"};
  return std::find(names.begin(), names.end(), name) != names.end() ||
         name.rfind("x-stainless-", 0) == 0;
}

}  // namespace

CorsPolicy::CorsPolicy(const std::string& allowed_origins) {
  if (trim(allowed_origins).empty()) return;
  for (const std::string& o : split_commas(allowed_origins)) {
    if (o == "*") {
      any_ = true;
      continue;
    }
    const size_t scheme = o.find("://");
    if (o.empty() || scheme == std::string::npos || o.find('/', scheme + 3) != std::string::npos)
      FS_THROW("--allowed-origins: '", o, "' is not an origin (scheme://host[:port], or '*')");
    origins_.push_back(o);
  }
}

bool CorsPolicy::allows(const std::string& origin) const {
  if (origin.empty()) return false;
  return any_ || std::find(origins_.begin(), origins_.end(), origin) != origins_.end();
}

HeaderList CorsPolicy::response_headers(const std::string& origin) const {
  if (!allows(origin)) return {};
  return {{"Access-Control-Allow-Origin", origin}, {"Vary", "Origin"}};
}

HeaderList CorsPolicy::preflight_headers(const std::string& origin,
                                         const std::string& request_headers) const {
  HeaderList h = response_headers(origin);
  if (h.empty()) return h;
  std::string allow = "Authorization, Content-Type";
  for (const std::string& name : split_commas(lower(request_headers))) {
    if (name != "authorization" && name != "content-type" && safe_header(name))
      allow += ", " + name;
  }
  h.emplace_back("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
  h.emplace_back("Access-Control-Allow-Headers", allow);
  h.emplace_back("Access-Control-Max-Age", kMaxAgeSeconds);
  return h;
}

}  // namespace flashserve
