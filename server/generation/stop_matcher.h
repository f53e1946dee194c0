// StopMatcher: finds OpenAI `stop` strings in decoded text that arrives piece by piece, holding
// back the longest tail that could still begin a stop so no part of a stop is ever emitted, and
// giving that tail back at the end (flush) when no stop completed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flashserve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored

  // Adds newly decoded text and returns the text that is now safe to emit. When a stop
  // completes, returns the text up to the stop's start and matched() turns true; later pushes
  // return "".
  std::string push(std::string_view text);
  // The held-back tail, at the end of generation (empty after a match).
  std::string flush();
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  size_t max_stop_len_ = 0;
  std::string pending_;  // held back: a suffix that is a proper prefix of some stop
  bool matched_ = false;
};

}  // namespace flashserve
