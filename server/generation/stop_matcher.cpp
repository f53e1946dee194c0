// StopMatcher (see stop_matcher.h). Text is matched byte-wise; stops and decoded text are both
// whole UTF-8 code points, so a held-back tail never splits a character.
#include "server/generation/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace flashserve {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (s.empty()) continue;
    max_stop_len_ = std::max(max_stop_len_, s.size());
    stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return "";
  pending_.append(text);
  if (stops_.empty()) return std::exchange(pending_, std::string());

  // The earliest complete stop wins (a stop starting earlier ends the text earlier).
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of some stop.
  size_t hold = 0;
  size_t longest = std::min(pending_.size(), max_stop_len_ - 1);
  for (size_t k = longest; k > 0 && hold == 0; --k) {
    std::string_view tail(pending_.data() + pending_.size() - k, k);
    for (const auto& s : stops_) {
      if (s.size() > k && std::string_view(s).substr(0, k) == tail) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (matched_) return "";
  return std::exchange(pending_, std::string());
}

}  // namespace flashserve
