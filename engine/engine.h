// engine/: the engine thread and its API — requests in, streams of tokens out, one step at a time.
//
// Engine: one thread owns the ModelRunner and the KV cache and runs continuous batching steps;
// HTTP handler threads submit requests to its inbox and read each request's events from a
// RequestStream. All public methods are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model_runner.h"
#include "sampling/sampling.h"
#include "speculative/proposer.h"
#include "structured/compiled_grammar.h"

namespace flashserve {

struct EngineOptions {
  int max_num_seqs = 64;             // running sequences per step
  int max_num_batched_tokens = 512;  // tokens per step (prefill chunks + decodes)
  int max_queue = 256;               // waiting requests; submit() refuses beyond this
  // Draw tokens where the logits are (Backend::sample_rows: the GPU sampler on CUDA) unless a
  // request wants logprobs; false copies every row to the host sampler (a baseline for benches).
  bool sample_on_device = true;
  // Automatic prefix caching (docs/PREFIX_CACHE.md): a request adopts the KV blocks of a prefix
  // the engine still holds and prefills only the rest. false: every prompt is computed in full.
  bool enable_prefix_caching = true;
  // Host threads (the engine thread among them) computing a step's grammar masks, one row at a
  // time, while the device runs the forward: 64 rows over a 128k vocabulary take longer than a
  // small model's forward on one thread. 1: the engine thread alone.
  int mask_threads = 8;
  // Speculative decoding (docs/SPECULATIVE.md): each step the proposer guesses up to
  // num_speculative_tokens tokens per decoding sequence and one forward verifies them; the
  // output is the same as without. Null: off.
  std::shared_ptr<Proposer> proposer;
  int num_speculative_tokens = 4;  // 1 .. kMaxSpeculativeTokens
  // true: each sequence's draft length follows the measured step cost and its acceptance
  // (speculative/policy.h); false: always num_speculative_tokens (tests and benchmarks).
  bool adaptive_speculation = true;
};

// The longest draft a sequence may verify in one step.
constexpr int kMaxSpeculativeTokens = 16;

// What a request's generated tokens must match: a compiled grammar (structured/), applied from the
// first token or, lazily, from a trigger token on. Masks are computed per step by the engine.
struct OutputConstraint {
  std::shared_ptr<const structured::CompiledGrammar> grammar;  // required
  // Empty: the grammar applies from the first generated token. Otherwise output is free until the
  // model emits one of these token ids (e.g. a tool-call start marker); the grammar then applies
  // to the tokens after it, and once one of end_tokens ends the region, output is free again and
  // the next trigger re-arms it (parallel tool calls).
  std::vector<int32_t> triggers;
  // With triggers: the first generated token must be a trigger (tool_choice "required" or named).
  bool must_trigger = false;
  // Allowed only where the grammar accepts, and ending the constrained region (EOS ids, or a
  // closing marker such as </tool_call>). Where the region ends the request (no triggers), this
  // holds the EOS ids; empty means the model's EOS ids. The vocabulary's other stop tokens are
  // never allowed inside a region.
  std::vector<int32_t> end_tokens;
  // How the engine applies it (engine/constrained_output.h): the grammar must be compiled for the
  // model's vocabulary size (else the request finishes with kError at once); a grammar that fails
  // at run time (too ambiguous, or no token can continue) finishes its request with kError. Without
  // triggers, the request stops (kStop) when its region ends, even with ignore_eos. Masked tokens
  // are forbidden before bias, penalties, temperature and truncation; logprobs stay those of the
  // raw logits.
};

struct GenerationRequest {
  std::vector<int32_t> prompt;        // token ids, BOS included when wanted
  int max_tokens = 16;                // capped so that prompt + generated fit max_model_len
  SamplingParams sampling;
  // false: the engine replaces sampling.seed with a fresh random seed (the request gave none);
  // true: sampling.seed is used as given, so the same request gives the same tokens.
  bool has_seed = false;
  bool ignore_eos = false;            // keep generating through EOS (fixed-length benchmarks)
  bool prompt_logprobs = false;       // also report the prompt tokens' logprobs (echo+logprobs)
                                      // (such a request computes its whole prompt: no cache)
  // Prefix-cache isolation: only requests with equal salts share cached blocks (the server puts
  // the API key and the request's cache_salt here). Opaque bytes; "" is a salt like any other.
  std::string cache_salt;
  // Constrained decoding (structured outputs, tool calls); none = free text.
  std::optional<OutputConstraint> constraint;
  // An embedding request (prefill only): the prompt runs through the model, chunked and
  // prefix-cached like any other, and the request finishes (kStop) right after one kEmbedding
  // event with its last position's final-norm hidden state. Nothing is generated: max_tokens,
  // sampling, prompt_logprobs and constraint are ignored. The prompt may fill the context.
  bool embed = false;
  // false: this request never speculates, even when the engine does (EngineOptions::proposer).
  bool speculative = true;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

struct StreamEvent {
  enum class Kind { kToken, kPromptLogprobs, kEmbedding, kFinished } kind = Kind::kToken;
  SampledToken token;                        // kToken; an EOS token that ends the request is
                                             // delivered too, just before kFinished/kStop
  std::vector<SampledToken> prompt_logprobs; // kPromptLogprobs: one per prompt token (the first
                                             // has no logprob: NaN)
  std::vector<float> embedding;              // kEmbedding: [hidden_size] the last prompt
                                             // position's final-norm hidden state (not
                                             // normalised)
  FinishReason finish = FinishReason::kNone; // kFinished
  std::string error;                         // kFinished with kError
  int num_cached_tokens = 0;                 // kFinished: prompt tokens whose prefill the
                                             // prefix cache saved (usage.cached_tokens)
  int num_draft_tokens = 0;     // kFinished: speculative draft tokens verified for the request,
  int num_accepted_tokens = 0;  // and those accepted (docs/SPECULATIVE.md)
};

// A request's output channel. The engine pushes; the handler thread pops.
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  virtual uint64_t id() const = 0;
  // Next event, waiting at most `timeout`; nullopt on timeout. After kFinished, nullopt forever.
  virtual std::optional<StreamEvent> next(std::chrono::milliseconds timeout) = 0;
  // Asks the engine to stop this request (client gone, stop string matched): it is aborted at
  // the next step and its KV blocks are freed. A kFinished event still follows.
  virtual void cancel() = 0;
};

// A consistent snapshot, published by the engine thread at least once per step.
struct EngineMetrics {
  int num_running = 0;      // sequences admitted to the batch (prefilling or decoding)
  int num_waiting = 0;      // submitted and not running: queued, or preempted awaiting resume
  // KV blocks: used (held by sequences) + free + cached (held by none, kept for the prefix cache,
  // evicted least recently used first) == total.
  int kv_blocks_used = 0;
  int kv_blocks_free = 0;
  int kv_blocks_cached = 0;
  int kv_blocks_total = 0;
  // Prefix cache: tokens of admitted requests looked up, tokens found (their prefill skipped),
  // cached blocks evicted to make room.
  uint64_t prefix_cache_queries_tokens_total = 0;
  uint64_t prefix_cache_hits_tokens_total = 0;
  uint64_t prefix_cache_evictions_total = 0;
  uint64_t num_preemptions = 0;          // recompute-preemptions so far
  uint64_t prompt_tokens_total = 0;      // each request's prompt once, when its prefill completes
  uint64_t generation_tokens_total = 0;  // kToken events
  uint64_t requests_finished_total = 0;  // kFinished events, whatever the reason
  // Speculative decoding: its method ("" when off), the draft tokens verified, those accepted,
  // and the verifications (one sequence's draft checked in one step). Each verification yields
  // its accepted tokens and one of the target's own: the mean accepted length is
  // (accepted + verifications) / verifications.
  std::string speculative_method;
  uint64_t spec_draft_tokens_total = 0;
  uint64_t spec_accepted_tokens_total = 0;
  uint64_t spec_verifications_total = 0;
  // Where the engine thread's time goes, summed over its steps (seconds of wall time):
  // scheduling, the model's forward (logits back on the host), and sampling + events.
  uint64_t steps_total = 0;
  double schedule_seconds_total = 0, forward_seconds_total = 0, sample_seconds_total = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  static std::unique_ptr<Engine> create(std::unique_ptr<ModelRunner> runner,
                                        const EngineOptions& options);
  virtual const ModelConfig& config() const = 0;
  virtual const ModelRunner& runner() const = 0;
  // Requests that may wait for admission at once (EngineOptions::max_queue); submit() returns
  // nullptr beyond it.
  virtual int max_queue() const = 0;

  // Queues a request. Returns nullptr when the waiting queue is full (back-pressure: the caller
  // answers 429/503 with Retry-After). Requests that can never fit the KV cache finish at once
  // with kError (so do an empty prompt, token ids outside the vocabulary, max_tokens < 0, a
  // prompt longer than the context, and one that fills it with max_tokens > 0); after
  // shutdown() or a fault the stream finishes at once with kAbort or kError. Generation stops
  // at max_tokens or when prompt + generated tokens reach max_model_len (kLength).
  // Determinism: a request's tokens depend only on the request (with has_seed), never on what
  // shares its batch or on preemption.
  virtual std::shared_ptr<RequestStream> submit(GenerationRequest request) = 0;
  virtual EngineMetrics metrics() const = 0;
  // Stops the engine thread after aborting every request (each stream gets kFinished/kAbort).
  virtual void shutdown() = 0;
  // True once the engine thread died from a backend fault (the server then exits non-zero).
  virtual bool failed() const = 0;
};

}  // namespace flashserve
