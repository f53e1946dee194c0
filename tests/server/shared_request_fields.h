// The request fields /v1/completions and /v1/chat/completions read alike (sampling, n, stop,
// streaming), as one JSON object each endpoint's "every field is read" test merges into its
// body, and the check that a parsed request carries exactly those values.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api/openai_api.h"

namespace flashserve::testing {

inline nlohmann::json shared_request_fields() {
  return nlohmann::json::parse(R"({"temperature":0.5,"top_p":0.9,"top_k":7,"min_p":0.1,"n":2,
      "stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true},
      "presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.3})");
}

inline void expect_shared_request_fields(const CompletionRequest& r) {
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 7);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.3f);
}

}  // namespace flashserve::testing
