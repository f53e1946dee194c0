// Engine: the engine thread (drain inbox → cancel → schedule → model step → sample → events),
// the requests' lifecycle on it (admit, finish) and submit/metrics/shutdown. One thread owns the
// ModelRunner, the scheduler and the block allocator; other threads only touch EngineInbox
// (under its mutex) and the streams. A step's outputs are read in step_outputs.cpp.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include "core/error.h"
#include "engine/engine_impl.h"
#include "engine/stop_rules.h"
#include "scheduling/kv_window.h"

namespace flashserve {

EngineImpl::EngineImpl(std::unique_ptr<ModelRunner> runner, const EngineOptions& options)
    : runner_(std::move(runner)),
      options_(options),
      vocab_size_(runner_->config().vocab_size),
      max_model_len_(runner_->config().max_model_len),
      blocks_(runner_->num_kv_blocks()),
      scheduler_({.max_num_seqs = options.max_num_seqs,
                  .max_num_batched_tokens = options.max_num_batched_tokens,
                  .block_size = runner_->block_size(),
                  .enable_prefix_caching = options.enable_prefix_caching,
                  .kv_window = shared_kv_window(runner_->config().layer_windows)},
                 &blocks_) {
  FS_CHECK(options.mask_threads >= 1, "EngineOptions::mask_threads must be at least 1, got ",
           options.mask_threads);
  mask_pool_ = std::make_unique<ThreadPool>(options.mask_threads);
  if (options.proposer) {
    policy_ = std::make_unique<SpeculationPolicy>(options.num_speculative_tokens,
                                                  options.adaptive_speculation);
    inbox_->metrics.speculative_method = options.proposer->name();
  }
  inbox_->metrics.kv_blocks_total = blocks_.num_total();
  inbox_->metrics.kv_blocks_free = blocks_.num_free();
  thread_ = std::thread([this] { loop(); });
}

std::string EngineImpl::reject_reason(const GenerationRequest& r) const {
  const int n = static_cast<int>(r.prompt.size());
  if (n == 0) return "empty prompt";
  // An embedding request is judged as one that generates nothing.
  const int max_tokens = r.embed ? 0 : r.max_tokens;
  if (max_tokens < 0) return str_cat("max_tokens ", max_tokens, " < 0");
  for (int32_t t : r.prompt) {
    if (t < 0 || t >= vocab_size_) return str_cat("prompt token ", t, " outside vocab of ", vocab_size_);
  }
  // The engine caps max_tokens by the context (generation_budget) instead of refusing it, but
  // the prompt must leave room for the first token to generate. It may fill the context exactly
  // when nothing is to be generated (max_tokens 0 with prompt logprobs: the server's
  // echo + logprobs), as the API edge allows prompt + max_tokens == max_model_len.
  if (!fits_context(n, std::min(max_tokens, 1), max_model_len_)) {
    return str_cat("prompt of ", n, " tokens leaves no room in the context of ", max_model_len_);
  }
  if (r.constraint && !r.embed) {
    const OutputConstraint& c = *r.constraint;
    if (!c.grammar) return "output constraint without a grammar";
    if (c.grammar->trie().vocab_size() != vocab_size_)
      return str_cat("output constraint compiled for a vocabulary of ",
                     c.grammar->trie().vocab_size(), " tokens, the model has ", vocab_size_);
    for (const auto* ids : {&c.triggers, &c.end_tokens})
      for (int32_t t : *ids)
        if (t < 0 || t >= vocab_size_)
          return str_cat("output constraint token ", t, " outside vocab of ", vocab_size_);
    if (c.must_trigger && c.triggers.empty()) return "output constraint must_trigger without triggers";
  }
  const int total = n + generation_budget(n, max_tokens, max_model_len_);
  // Under a sliding window on every layer a sequence holds only its window's blocks.
  const int64_t kv_tokens = int64_t(runner_->num_kv_blocks()) * runner_->block_size();
  if (!scheduler_.fits_in_cache(total)) {
    return str_cat("prompt + max_tokens = ", total, " tokens can never fit the KV cache of ",
                   kv_tokens, " tokens");
  }
  return {};
}

std::shared_ptr<RequestStream> EngineImpl::submit(GenerationRequest request) {
  std::string why = reject_reason(request);
  std::unique_lock<std::mutex> lock(inbox_->mu);
  if (!inbox_->closed && why.empty() &&
      static_cast<int>(inbox_->pending.size()) + inbox_->metrics.num_waiting >= options_.max_queue) {
    return nullptr;  // back-pressure
  }
  auto stream = std::make_shared<StreamImpl>(inbox_->next_id++, inbox_);
  if (inbox_->closed || !why.empty()) {  // finishes at once, never reaching the engine thread
    ++inbox_->metrics.requests_finished_total;
    const bool closed = inbox_->closed;
    const FinishReason closed_reason = inbox_->closed_reason;
    const std::string closed_error = inbox_->closed_error;
    lock.unlock();
    if (closed) {
      stream->finish(closed_reason, closed_error);
    } else {
      stream->finish(FinishReason::kError, why);
    }
    return stream;
  }
  if (!request.has_seed) request.sampling.seed = inbox_->seed_rng();
  inbox_->pending.push_back({stream->id(), std::move(request), stream});
  inbox_->cv.notify_one();
  return stream;
}

EngineMetrics EngineImpl::metrics() const {
  std::lock_guard<std::mutex> lock(inbox_->mu);
  EngineMetrics m = inbox_->metrics;
  m.num_waiting += static_cast<int>(inbox_->pending.size());
  return m;
}

void EngineImpl::shutdown() {
  std::lock_guard<std::mutex> join_lock(join_mu_);
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->stop = true;
    inbox_->cv.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void EngineImpl::admit(PendingRequest p) {
  GenerationRequest& r = p.request;
  auto seq = std::make_unique<Sequence>();
  seq->id = p.id;
  seq->num_prompt_tokens = static_cast<int>(r.prompt.size());
  seq->tokens = std::move(r.prompt);
  seq->max_tokens = r.embed ? 0 : generation_budget(seq->num_prompt_tokens, r.max_tokens,
                                                    max_model_len_);
  seq->need_prompt_logprobs = r.prompt_logprobs && !r.embed;
  seq->pooled = r.embed;
  seq->cache_root = root_hash(r.cache_salt);
  ActiveRequest& a = active_[p.id];
  a.stream = std::move(p.stream);
  a.sampling = std::move(r.sampling);
  a.ignore_eos = r.ignore_eos;
  a.speculate = options_.proposer != nullptr && r.speculative;
  if (r.constraint && !r.embed) {
    try {
      a.constraint = std::make_unique<ConstrainedOutput>(std::move(*r.constraint),
                                                         runner_->config().eos_token_ids);
    } catch (const std::exception& e) {  // this request's grammar: fail it alone
      finish(p.id, FinishReason::kError, e.what());
      return;
    }
  }
  if (!r.embed && needs_no_step(seq->max_tokens, seq->need_prompt_logprobs)) {
    finish(p.id, FinishReason::kLength);
    return;
  }
  scheduler_.add(std::move(seq));
}

void EngineImpl::finish(uint64_t id, FinishReason reason, std::string error) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  scheduler_.remove(id);  // frees its blocks now
  if (options_.proposer) options_.proposer->release(id);
  StreamEvent e;
  e.kind = StreamEvent::Kind::kFinished;
  e.finish = reason;
  e.error = std::move(error);
  e.num_cached_tokens = it->second.num_cached_tokens;
  e.num_draft_tokens = int(it->second.draft_tokens);
  e.num_accepted_tokens = int(it->second.accepted_tokens);
  events_.emplace_back(std::move(it->second.stream), std::move(e));
  active_.erase(it);
  ++finished_;
}

void EngineImpl::finish_all(FinishReason reason, const std::string& error) {
  std::vector<uint64_t> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) finish(id, reason, error);
}

void EngineImpl::publish_metrics() {
  std::lock_guard<std::mutex> lock(inbox_->mu);
  EngineMetrics& m = inbox_->metrics;
  m.num_running = scheduler_.num_running();
  m.num_waiting = scheduler_.num_waiting();
  m.kv_blocks_used = blocks_.num_used();
  m.kv_blocks_free = blocks_.num_free();
  m.kv_blocks_cached = blocks_.num_cached();
  m.prefix_cache_queries_tokens_total = scheduler_.prefix_queried_tokens();
  m.prefix_cache_hits_tokens_total = scheduler_.prefix_hit_tokens();
  m.prefix_cache_evictions_total = blocks_.num_evictions();
  m.num_preemptions = scheduler_.num_preemptions();
  m.prompt_tokens_total = prompt_tokens_;
  m.generation_tokens_total = generation_tokens_;
  m.spec_draft_tokens_total = draft_tokens_;
  m.spec_accepted_tokens_total = accepted_tokens_;
  m.spec_verifications_total = verifications_;
  m.steps_total = steps_;
  m.schedule_seconds_total = schedule_s_;
  m.forward_seconds_total = forward_s_;
  m.sample_seconds_total = sample_s_;
  // Requests finished at submit() are counted there, under this same lock.
  m.requests_finished_total += finished_;
  finished_ = 0;
}

void EngineImpl::flush_events() {
  for (auto& [stream, event] : events_) stream->push(std::move(event));
  events_.clear();
}

// Gives the heap's free pages back to the operating system. The handler threads allocate in
// glibc arenas of their own; after a burst of requests those hold freed memory that RSS still
// counts. Called only once the engine has been idle for a while, so it costs no serving time.
void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// How long the engine must have been idle, after doing work, before it releases free heap.
constexpr auto kIdleTrimDelay = std::chrono::milliseconds(200);

void EngineImpl::loop() {
  std::vector<float> logits, hidden;
  std::vector<int32_t> sampled_ids;
  std::string fault;
  bool worked_since_trim = false;
  for (;;) {
    std::deque<PendingRequest> incoming;
    std::vector<uint64_t> cancels;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(inbox_->mu);
      const auto ready = [&] {
        return inbox_->stop || !inbox_->pending.empty() || !inbox_->cancels.empty() ||
               scheduler_.has_work();
      };
      if (!worked_since_trim) {
        inbox_->cv.wait(lock, ready);
      } else if (!inbox_->cv.wait_for(lock, kIdleTrimDelay, ready)) {  // idle since the delay
        lock.unlock();
        release_free_heap();
        worked_since_trim = false;
        continue;
      }
      stop = inbox_->stop;
      incoming.swap(inbox_->pending);
      cancels.swap(inbox_->cancels);
      inbox_->metrics.num_waiting += static_cast<int>(incoming.size());  // keeps the queue bound exact
    }
    try {
      for (PendingRequest& p : incoming) admit(std::move(p));
      if (stop) break;
      for (uint64_t id : cancels) finish(id, FinishReason::kAbort);
      if (scheduler_.has_work()) {
        using Clock = std::chrono::steady_clock;
        auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
        const auto t0 = Clock::now();
        propose_drafts();
        SchedulerOutput out = scheduler_.schedule();
        for (uint64_t id : out.preempted) active_.at(id).prompt_logprobs.clear();  // recomputed
        StepPlan& plan = plan_;
        out.to_step_plan(&plan);
        choose_sample_paths(out, plan);
        const auto t1 = Clock::now();
        publish_metrics();
        flush_events();
        const auto t2 = Clock::now();
        logits.clear();
        sampled_ids.clear();
        hidden.clear();
        runner_->launch(plan);
        fill_masks(out, plan);  // on the host while the device runs the forward
        runner_->finish(&logits, &sampled_ids, &hidden);
        const auto t3 = Clock::now();
        if (policy_) policy_->record_step(int(plan.tokens.size()), sec(t2, t3));
        scheduler_.commit(out);
        process_outputs(out, plan, logits, sampled_ids, hidden);
        // O(1): the three counts are kept apart, so a bookkeeping slip shows up here.
        FS_CHECK(blocks_.num_used() + blocks_.num_free() + blocks_.num_cached() ==
                     blocks_.num_total(),
                 "KV block accounting: used ", blocks_.num_used(), " + free ", blocks_.num_free(),
                 " + cached ", blocks_.num_cached(), " != total ", blocks_.num_total());
        const auto t4 = Clock::now();
        ++steps_;
        worked_since_trim = true;
        schedule_s_ += sec(t0, t1);
        forward_s_ += sec(t2, t3);
        sample_s_ += sec(t3, t4);
      }
    } catch (const std::exception& e) {  // a backend fault (or a broken invariant)
      fault = str_cat("engine fault: ", e.what());
      break;
    }
    publish_metrics();
    flush_events();
  }
  // Stopped or failed: every request still here, and every one submitted from now on, finishes.
  std::deque<PendingRequest> late;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->closed = true;
    inbox_->closed_reason = fault.empty() ? FinishReason::kAbort : FinishReason::kError;
    inbox_->closed_error = fault.empty() ? "the engine has shut down" : fault;  // for late submits
    late.swap(inbox_->pending);
    inbox_->metrics.num_waiting += static_cast<int>(late.size());
  }
  const FinishReason reason = fault.empty() ? FinishReason::kAbort : FinishReason::kError;
  const std::string why = fault.empty() ? "the engine has shut down" : fault;
  for (PendingRequest& p : late) active_[p.id].stream = std::move(p.stream);
  if (!fault.empty()) failed_ = true;
  try {
    finish_all(reason, why);
  } catch (const std::exception&) {  // the scheduler itself is broken: just end the streams
    for (auto& [id, a] : active_) a.stream->finish(reason, why);
    active_.clear();
  }
  publish_metrics();
  flush_events();
}

std::unique_ptr<Engine> Engine::create(std::unique_ptr<ModelRunner> runner,
                                       const EngineOptions& options) {
  FS_CHECK(runner != nullptr, "Engine::create needs a ModelRunner");
  FS_CHECK(options.max_num_seqs >= 1, "max_num_seqs = ", options.max_num_seqs);
  FS_CHECK(options.max_num_batched_tokens >= 1, "max_num_batched_tokens = ",
           options.max_num_batched_tokens);
  FS_CHECK(options.max_queue >= 1, "max_queue = ", options.max_queue);
  FS_CHECK(!options.proposer || (options.num_speculative_tokens >= 1 &&
                                 options.num_speculative_tokens <= kMaxSpeculativeTokens),
           "num_speculative_tokens must be in [1, ", kMaxSpeculativeTokens, "], got ",
           options.num_speculative_tokens);
  return std::make_unique<EngineImpl>(std::move(runner), options);
}

}  // namespace flashserve
