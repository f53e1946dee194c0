// EngineImpl, the Engine behind Engine::create: its engine thread state and the per-request
// record it keeps. Internal to engine/: engine.cpp holds the thread loop, submission and request
// lifecycle; step_outputs.cpp turns a model step's outputs into tokens and events.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "engine/constrained_output.h"
#include "engine/engine.h"
#include "engine/request_stream.h"
#include "sampling/sampler.h"
#include "scheduling/scheduler.h"
#include "speculative/policy.h"

namespace flashserve {

// What the engine thread keeps per request beside its Sequence.
struct ActiveRequest {
  std::shared_ptr<StreamImpl> stream;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<SampledToken> prompt_logprobs;  // gathered chunk by chunk until complete
  bool prompt_counted = false;                // prompt tokens added to the metrics
  int num_cached_tokens = 0;  // prompt tokens the prefix cache saved, once the prompt is done
  std::unique_ptr<ConstrainedOutput> constraint;  // GenerationRequest::constraint's state
  bool speculate = false;  // the engine speculates and the request allows it
  uint64_t draft_tokens = 0, accepted_tokens = 0;  // its drafts verified, and kept
};

class EngineImpl : public Engine {
 public:
  EngineImpl(std::unique_ptr<ModelRunner> runner, const EngineOptions& options);
  ~EngineImpl() override { shutdown(); }

  const ModelConfig& config() const override { return runner_->config(); }
  const ModelRunner& runner() const override { return *runner_; }
  int max_queue() const override { return options_.max_queue; }
  std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
  EngineMetrics metrics() const override;
  void shutdown() override;
  bool failed() const override { return failed_.load(); }

 private:
  void loop();
  void admit(PendingRequest p);
  // Turns a step's logits, device-sampled ids and hidden states into tokens, prompt logprobs,
  // embeddings, finishes and events (engine/step_outputs.cpp).
  void process_outputs(const SchedulerOutput& out, const StepPlan& plan,
                       const std::vector<float>& logits, const std::vector<int32_t>& sampled_ids,
                       const std::vector<float>& hidden);
  // Chooses where each chunk's token is drawn (sampling/sampler.h) and marks the chunks whose
  // token a grammar constrains (engine/step_masks.cpp).
  void choose_sample_paths(const SchedulerOutput& out, StepPlan& plan);
  // The grammar masks of the marked chunks, computed while the forward runs; device-drawn rows
  // get theirs through plan.chunks[i].sample.allowed (engine/step_masks.cpp).
  void fill_masks(const SchedulerOutput& out, StepPlan& plan);
  // Sets each decoding sequence's draft for the coming step (engine/speculation.cpp).
  void propose_drafts();
  // The next token's grammar mask after the tokens a verification accepted so far; null when
  // the constraint masks nothing there (engine/speculation.cpp).
  const uint32_t* next_draft_mask(ActiveRequest& a);
  void finish(uint64_t id, FinishReason reason, std::string error = {});
  void finish_all(FinishReason reason, const std::string& error);
  void publish_metrics();
  void flush_events();
  // Why a request can never run, or "" when it can.
  std::string reject_reason(const GenerationRequest& r) const;

  std::unique_ptr<ModelRunner> runner_;
  const EngineOptions options_;
  const int vocab_size_;
  const int max_model_len_;  // prompt + generated tokens
  std::shared_ptr<EngineInbox> inbox_ = std::make_shared<EngineInbox>();
  std::atomic<bool> failed_{false};
  std::mutex join_mu_;  // serialises shutdown() callers

  // Engine thread only.
  BlockAllocator blocks_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, ActiveRequest> active_;
  StepPlan plan_;  // this step's; reused so that its arrays keep their capacity
  // This step's grammar masks: per chunk, the word offset of its mask in masks_ (-1: none) and
  // the error that kept it from having one ("" if none).
  std::vector<int64_t> chunk_mask_;
  std::vector<std::string> chunk_mask_error_;
  std::vector<uint32_t> masks_;  // [masked chunks, mask_words(vocab_size)]
  std::vector<size_t> masked_chunks_;       // this step's chunks with a mask, for the pool
  std::unique_ptr<ThreadPool> mask_pool_;   // EngineOptions::mask_threads
  std::vector<std::pair<std::shared_ptr<StreamImpl>, StreamEvent>> events_;  // this step's
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, finished_ = 0;
  uint64_t steps_ = 0;
  // Speculative decoding (EngineOptions::proposer): the policy, this step's requests to the
  // proposer and their sequences, its drafts, a verified position's mask, and the counts.
  std::unique_ptr<SpeculationPolicy> policy_;
  std::vector<ProposalRequest> proposals_;
  std::vector<Sequence*> proposal_seqs_;
  std::vector<std::vector<int32_t>> drafts_;
  std::vector<uint32_t> draft_mask_;  // [mask_words(vocab_size)]
  uint64_t draft_tokens_ = 0, accepted_tokens_ = 0, verifications_ = 0;
  double schedule_s_ = 0, forward_s_ = 0, sample_s_ = 0;  // EngineMetrics' step timings

  std::thread thread_;  // last: starts after everything above is built
};

// What the sampler needs of a sequence besides its parameters: its history and the index of the
// token being drawn (the same after a recompute, so a preempted request draws the same tokens).
SampleRequest sample_request(const Sequence& seq, const SamplingParams& params);

}  // namespace flashserve
