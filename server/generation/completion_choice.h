// CompletionChoice: one choice of a Completion (completion.h) — the engine request behind it and
// what its events build: the text (the echo, then detokenized pieces cut at a stop string),
// logprobs, token counts, timings and the finish reason. The same path feeds streamed and
// non-streamed responses, so their texts are equal by construction.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/engine.h"
#include "output_parsers/reasoning_parser.h"
#include "server/api/openai_api.h"
#include "server/generation/stop_matcher.h"
#include "server/tool_calls/tool_call_output.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

struct CompletionChoice {
  using Clock = std::chrono::steady_clock;

  int index = 0;
  size_t prompt_idx = 0;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<IncrementalDetokenizer> detok;  // the prompt as context
  std::unique_ptr<StopMatcher> stop;
  LogprobsAccumulator logprobs;
  size_t logprobs_sent = 0;   // streaming: entries already in a chunk
  std::string text;           // everything emitted, echo included
  size_t decoded_bytes = 0;   // echo + decoded generation before stop truncation (text_offset)
  bool echo_pending = false;
  int completion_tokens = 0;
  int cached_tokens = 0;      // from the engine's kFinished
  bool done = false;
  std::string finish_reason;  // "stop" | "length" | "schema_mismatch"
  // Best-effort structured output that finished but fails the original schema: the choice's
  // "schema_violation" field (response_format.h, schema_mismatch); null otherwise.
  nlohmann::json schema_violation;
  bool aborted = false;       // the engine aborted it (shutdown)
  std::string error;          // the engine failed it
  // Chat with tools: the output parsed into tool calls, ids drawn from this seed (streaming:
  // tool_deltas turns text deltas into chunk deltas).
  uint64_t call_id_seed = 0;
  std::unique_ptr<ToolCallDeltas> tool_deltas;
  // Chat with the reasoning parser, streaming: splits text deltas into reasoning and content.
  std::unique_ptr<output_parsers::ReasoningStream> reasoning;
  // Chat with a harmony model, streaming: splits text deltas by channel (a forced call's header,
  // which the prompt ends with, is fed first).
  std::unique_ptr<HarmonyDeltas> harmony;
  bool harmony_prefill_sent = false;
  bool has_first = false;
  Clock::time_point first_token, last_token, end;

  // Applies one engine event of this choice's request `req` and returns the text it adds ("" once
  // done); `eos_ids` are the model's end-of-sequence tokens (engine/stop_rules.h, is_eos).
  std::string apply(const StreamEvent& ev, const CompletionRequest& req,
                    const Tokenizer& tokenizer, std::span<const int32_t> eos_ids);
  void finish(const std::string& reason);
};

}  // namespace flashserve
