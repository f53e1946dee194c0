// The OpenAI API's shared pieces: the served model as the API sees it, the validated request
// that /v1/completions and /v1/chat/completions both produce (endpoints/ parse the bodies; its
// `format` only decides the shapes of what goes back), its limits, and the response JSON / SSE
// builders of both shapes. Nothing here touches HTTP or the engine, so all of it is unit-tested
// (tests/server/).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "sampling/sampling.h"
#include "server/api/api_error.h"
#include "server/api/tool_call_syntax.h"

namespace flashserve {

class Tokenizer;
class ChatTemplate;
namespace structured {
class GrammarCompiler;
}

// Which endpoint a request came from: decides the response's JSON and SSE shapes.
enum class ResponseFormat { kCompletion, kChat };

struct ServedModel {
  std::string id;           // the served model name (request "model" must match it)
  int max_model_len = 0;    // prompt + max_tokens must fit
  int vocab_size = 0;       // valid token ids are [0, vocab_size)
  int64_t created = 0;      // unix time the server started
  // The KV cache's size in tokens; > 0: prompt + max_tokens must fit it too (a chat request
  // without max_tokens gets what is left of it).
  int64_t kv_cache_tokens = 0;
  // A request that omits temperature/top_p/top_k/repetition_penalty gets these (the API's
  // defaults, overridden by the model's generation_config.json).
  SamplingParams sampling_defaults{};
  // Renders /v1/chat/completions prompts; null: that endpoint answers 400 saying how to set one.
  std::shared_ptr<const ChatTemplate> chat_template = nullptr;
  // Structured outputs and tool calls: the grammar compiler for this model's vocabulary, built
  // once at start-up (null: constrained requests are a 400), the EOS ids that end a constrained
  // output, and how this model writes tool calls (server/api/tool_call_syntax.h).
  std::shared_ptr<structured::GrammarCompiler> grammar_compiler = nullptr;
  std::vector<int32_t> eos_ids;
  ToolCallSyntax tool_calls;
  // --reasoning-parser: chat output is split into reasoning_content (<think>...</think>) and
  // content (output_parsers/reasoning_parser.h).
  bool reasoning = false;
  // > 0: an embedding model (--task embed, server/endpoints/embeddings.h) whose vectors have this many
  // values; it serves /v1/embeddings and none of the generation endpoints.
  int embedding_dimensions = 0;
  // The engine speculates (--speculative, docs/SPECULATIVE.md): a request may ask for it.
  bool speculative = false;
};

struct CompletionRequest {
  ResponseFormat format = ResponseFormat::kCompletion;
  std::vector<std::vector<int32_t>> prompts;  // token ids (text prompts: BOS + encode(text))
  std::vector<std::string> echo_texts;        // per prompt: the text `echo` prepends
  int max_tokens = 16;
  int n = 1;                                  // choices per prompt
  SamplingParams sampling;
  bool has_seed = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;                 // stream_options.include_usage
  bool echo = false;
  bool ignore_eos = false;                    // extension
  // Extension: false keeps this request out of speculative decoding (its output is the same
  // either way; only its speed differs). true where the server does not speculate is a 400.
  bool speculative = true;
  int logprobs = -1;                          // -1: off; completions 0..5, chat top_logprobs 0..20
  std::string user;
  // Prefix-cache isolation (extension, as vLLM): only requests with the same salt (and the same
  // API key, see tenant_cache_salt) share cached prompt blocks.
  std::string cache_salt;
  // What the output must match (response_format, guided_*, a forced tool call); none = free.
  std::optional<OutputConstraint> constraint;
  // Chat with tools: the output is parsed into tool_calls in this format (kNone: all content).
  output_parsers::ToolCallFormat tool_call_format = output_parsers::ToolCallFormat::kNone;
  bool parallel_tool_calls = true;  // false: only the first call is returned
  // Special tokens that decode to nothing but whose text the output keeps, so the tool-call
  // parser sees the markers (Mistral's [TOOL_CALLS], Llama's <|python_tag|>).
  std::vector<int32_t> marker_ids;
  // Chat with the reasoning parser: <think>...</think> goes to reasoning_content, and the output
  // starts inside it when the rendered prompt opened <think> (prompt_opens_reasoning).
  bool reasoning = false;
  bool starts_in_reasoning = false;
  // Chat with a harmony model (gpt-oss): the output is split by channel into reasoning_content,
  // tool_calls to these functions (the request's tools) and content
  // (output_parsers/harmony_parser.h). harmony_prefill: the header of a forced call, which the
  // prompt already ends with, so the output starts inside that call's arguments.
  bool harmony = false;
  std::vector<std::string> harmony_functions;
  std::string harmony_prefill;
};

constexpr size_t kMaxCacheSaltBytes = 1024;

// The engine's cache salt for a request: the API key it authenticated with and its cache_salt,
// length-prefixed so that no two (key, salt) pairs give the same bytes. Tenants with different
// keys never share cached blocks, so one cannot learn another's prompts from response times.
std::string tenant_cache_salt(std::string_view api_key, std::string_view cache_salt);

constexpr int kMaxLogprobs = 5;
constexpr int kMaxTopLogprobs = 20;  // chat: top_logprobs
constexpr int kMaxStops = 64;
// Bytes per stop string. StopMatcher's work per token grows with the stops' total length
// squared, so an unbounded stop would let one request burn a handler thread's CPU.
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxChoices = 128;   // prompts x n per request
// A text prompt over kPromptBytesFactor x max_model_len x tokenizer.max_piece_bytes() bytes is
// refused (context_length_exceeded) before it is encoded.
constexpr size_t kPromptBytesFactor = 4;

// The bytes one token stands for: the piece with "▁" as a space, byte pieces <0xNN> as their byte.
std::string token_bytes(const Tokenizer& tokenizer, int32_t id);

// The printable text of one token for logprobs: the piece with "▁" as a space, byte pieces
// <0xNN> as their byte; text that is not valid UTF-8 becomes "bytes:\xNN..." as OpenAI does.
// An id past the tokenizer's vocabulary (a model's padding row) has the text "", as in vLLM.
std::string token_text(const Tokenizer& tokenizer, int32_t id);

bool is_valid_utf8(std::string_view s);

// Logprobs accumulated token by token, in the endpoint's shape: completions' parallel lists
// {tokens, token_logprobs, top_logprobs, text_offset}, or chat's {content: [{token, logprob,
// bytes, top_logprobs: [{token, logprob, bytes}]}]}.
struct LogprobsAccumulator {
  ResponseFormat format = ResponseFormat::kCompletion;
  nlohmann::json tokens = nlohmann::json::array();
  nlohmann::json token_logprobs = nlohmann::json::array();
  nlohmann::json top_logprobs = nlohmann::json::array();
  nlohmann::json text_offset = nlohmann::json::array();
  nlohmann::json content = nlohmann::json::array();  // chat
  // `logprob` NaN -> null (the first prompt token); `has_top` false -> top entry null.
  void add(const Tokenizer& tokenizer, const SampledToken& t, size_t offset, bool has_top);
  size_t size() const { return format == ResponseFormat::kChat ? content.size() : tokens.size(); }
  bool empty() const { return size() == 0; }
  nlohmann::json to_json() const { return part(0, size()); }
  nlohmann::json part(size_t begin, size_t end) const;  // entries [begin, end), for a stream chunk
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt_tokens_details.cached_tokens: prefill the prefix cache saved
};

nlohmann::json usage_json(const Usage& u);

// One choice object: {"index","text","logprobs","finish_reason"}; finish_reason "" -> null.
nlohmann::json choice_json(int index, const std::string& text, const nlohmann::json& logprobs,
                           const std::string& finish_reason);

// The response envelope (also the shape of a stream chunk; usage omitted when null).
nlohmann::json completion_json(const std::string& id, int64_t created, const std::string& model,
                               nlohmann::json choices, const nlohmann::json& usage);

// Chat: {"index","message":{"role":"assistant","content"},"logprobs","finish_reason"}.
nlohmann::json chat_choice_json(int index, const std::string& text, const nlohmann::json& logprobs,
                                const std::string& finish_reason);
// A chat stream chunk's choice: {"index","delta","logprobs","finish_reason"}; `delta` is
// {"role":"assistant","content":""} first, {"content": text} after, {} with the finish reason.
nlohmann::json chat_delta_json(int index, const nlohmann::json& delta,
                               const nlohmann::json& logprobs, const std::string& finish_reason);
// The envelope for `format`: object "text_completion", or "chat.completion" ("chat.completion.chunk"
// when `chunk`); usage omitted when null.
nlohmann::json response_json(ResponseFormat format, bool chunk, const std::string& id,
                             int64_t created, const std::string& model, nlohmann::json choices,
                             const nlohmann::json& usage);

// /v1/models; "chat_template": whether /v1/chat/completions can render prompts for this model.
nlohmann::json models_json(const ServedModel& model);

// A random 64-bit number (thread-safe): request seeds and ids.
uint64_t random_u64();

// JSON text with invalid UTF-8 replaced (U+FFFD) rather than throwing.
std::string dump_json(const nlohmann::json& j);
// One Server-Sent Event: "data: <json>\n\n".
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace flashserve
