// StageSequence: what the "Sequence" component of each tokenizer.json stage (normalizer,
// pre-tokenizer, decoder) shares: its steps, parsed from a list by the stage's own parser (null
// steps dropped), run in order, and a property that holds when any step's does. Each stage
// derives its Sequence from it and names its own run and property methods.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/hf_json.h"

namespace flashserve::hf {

template <class Stage>
class StageSequence : public Stage {
 public:
  using Parse = std::unique_ptr<Stage> (*)(const json&);
  // `component` names it in errors ("decoder Sequence"); `key` holds the list ("decoders").
  StageSequence(const json& j, const char* key, const std::string& component, Parse parse) {
    const json& list = required(j, key, component);
    if (!list.is_array()) config_error(component + ": '" + key + "' is not a list");
    for (const json& s : list)
      if (auto step = parse(s)) steps_.push_back(std::move(step));
  }

 protected:
  // Runs `run` of every step on `x`, in order.
  template <class Arg>
  void run_all(void (Stage::*run)(Arg&) const, Arg& x) const {
    for (const auto& s : steps_) ((*s).*run)(x);
  }
  bool any_step(bool (Stage::*property)() const) const {
    for (const auto& s : steps_)
      if (((*s).*property)()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Stage>> steps_;
};

}  // namespace flashserve::hf
