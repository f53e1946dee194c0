// What the API-edge tests share: accepted() and refused() read an endpoint's result (a value or an
// ApiError), turning the wrong alternative into a test failure that names the request, so each
// endpoint's fixture needs no helper of its own; the fixtures' models; the rows of bad-input
// tables.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <variant>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve::testing {

// The model of the chat fixtures: "stories", 512 tokens of context, the fake tokenizer's
// vocabulary, the built-in ChatML template.
inline ServedModel chatml_test_model() {
  ServedModel m{"stories", 512, 262, 1700000000};
  m.chat_template = std::make_shared<ChatTemplate>(ChatTemplate::from_flag("chatml", "<s>", "</s>"));
  return m;
}

// The value of `r`; a failure (and T{}) when `what` was refused.
template <class T>
T accepted(const std::variant<T, ApiError>& r, const std::string& what) {
  if (auto* e = std::get_if<ApiError>(&r)) {
    ADD_FAILURE() << what << " -> " << e->status << " " << e->message;
    return {};
  }
  return std::get<T>(r);
}

// The error of `r`; a failure (and an empty error) when `what` was accepted.
template <class T>
ApiError refused(const std::variant<T, ApiError>& r, const std::string& what) {
  if (auto* e = std::get_if<ApiError>(&r)) return *e;
  ADD_FAILURE() << what << " was accepted";
  return {};
}

// A fixture with the fake tokenizer and a "stories" model of `Context` tokens over its
// vocabulary.
template <int Context>
class FakeModelTest : public ::testing::Test {
 protected:
  FakeTokenizer tok;
  ServedModel model{"stories", Context, 262, 1700000000};
};

// A request body and the parameter its 400 must name: the rows of the bad-input tables.
struct BadBody {
  nlohmann::json body;
  std::string param;
};

}  // namespace flashserve::testing
