// The work budget of one render: evaluation steps and the size of any string built. Every
// statement, expression and built string pays here, so a hostile template stops with a
// RenderError instead of running long or filling memory.
#pragma once

#include <cstddef>

#include "chat_template/jinja_eval.h"

namespace flashserve::jinja {

class Budget {
 public:
  explicit Budget(const Limits& limits) : limits_(limits) {}

  const Limits& limits() const { return limits_; }

  void charge(size_t steps) {
    steps_ += steps;
    if (steps_ > limits_.max_steps) throw RenderError("template exceeded its work limit");
  }
  void check_size(const Text& t) const {
    if (t.s.size() > limits_.max_text_bytes) throw RenderError("template output too large");
  }

 private:
  const Limits& limits_;
  size_t steps_ = 0;
};

}  // namespace flashserve::jinja
