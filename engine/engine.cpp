// Engine: the engine thread (drain inbox → cancel → schedule → model step → sample → events) and
// submit/metrics/shutdown. One thread owns the ModelRunner, the scheduler and the block
// allocator; other threads only touch EngineInbox (under its mutex) and the streams.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <thread>
#include <unordered_map>

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include "core/error.h"
#include "engine/request_stream.h"
#include "engine/stop_rules.h"
#include "sampling/sampler.h"
#include "scheduling/scheduler.h"

namespace flashserve {
namespace {

// What the engine thread keeps per request beside its Sequence.
struct ActiveRequest {
  std::shared_ptr<StreamImpl> stream;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<SampledToken> prompt_logprobs;  // gathered chunk by chunk until complete
  bool prompt_counted = false;                // prompt tokens added to the metrics
  int num_cached_tokens = 0;  // prompt tokens the prefix cache saved, once the prompt is done
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
  void process_outputs(const SchedulerOutput& out, const StepPlan& plan,
                       const std::vector<float>& logits, const std::vector<int32_t>& sampled_ids);
  void finish(uint64_t id, FinishReason reason, std::string error = {});
  void finish_all(FinishReason reason, const std::string& error);
  void publish_metrics();
  void flush_events();
  // Why a request can never run, or "" when it can.
  std::string reject_reason(const GenerationRequest& r) const;

  std::unique_ptr<ModelRunner> runner_;
  const EngineOptions options_;
  const int vocab_size_;
  const int max_len_;  // max_position_embeddings: prompt + generated tokens
  std::shared_ptr<EngineInbox> inbox_ = std::make_shared<EngineInbox>();
  std::atomic<bool> failed_{false};
  std::mutex join_mu_;  // serialises shutdown() callers

  // Engine thread only.
  BlockAllocator blocks_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, ActiveRequest> active_;
  StepPlan plan_;  // this step's; reused so that its arrays keep their capacity
  std::vector<std::pair<std::shared_ptr<StreamImpl>, StreamEvent>> events_;  // this step's
  uint64_t preemptions_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0, finished_ = 0;
  uint64_t steps_ = 0;
  double schedule_s_ = 0, forward_s_ = 0, sample_s_ = 0;  // EngineMetrics' step timings

  std::thread thread_;  // last: starts after everything above is built
};

EngineImpl::EngineImpl(std::unique_ptr<ModelRunner> runner, const EngineOptions& options)
    : runner_(std::move(runner)),
      options_(options),
      vocab_size_(runner_->config().vocab_size),
      max_len_(runner_->config().max_position_embeddings),
      blocks_(runner_->num_kv_blocks()),
      scheduler_({options.max_num_seqs, options.max_num_batched_tokens, runner_->block_size(),
                  options.enable_prefix_caching},
                 &blocks_) {
  inbox_->metrics.kv_blocks_total = blocks_.num_total();
  inbox_->metrics.kv_blocks_free = blocks_.num_free();
  thread_ = std::thread([this] { loop(); });
}

std::string EngineImpl::reject_reason(const GenerationRequest& r) const {
  const int n = static_cast<int>(r.prompt.size());
  if (n == 0) return "empty prompt";
  if (r.max_tokens < 0) return str_cat("max_tokens ", r.max_tokens, " < 0");
  for (int32_t t : r.prompt) {
    if (t < 0 || t >= vocab_size_) return str_cat("prompt token ", t, " outside vocab of ", vocab_size_);
  }
  // A prompt may fill the context exactly when nothing is to be generated (max_tokens 0 with
  // prompt logprobs: the server's echo + logprobs), as the API edge allows prompt + max_tokens
  // == max_model_len; to generate, it must leave room for at least one token.
  if (n > max_len_ || (n == max_len_ && r.max_tokens > 0)) {
    return str_cat("prompt of ", n, " tokens leaves no room in the context of ", max_len_);
  }
  const int total = n + generation_budget(n, r.max_tokens, max_len_);
  if (blocks_for_tokens(total, runner_->block_size()) > runner_->num_kv_blocks()) {
    return str_cat("prompt + max_tokens = ", total, " tokens can never fit the KV cache of ",
                   int64_t(runner_->num_kv_blocks()) * runner_->block_size(), " tokens");
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
  seq->max_tokens = generation_budget(seq->num_prompt_tokens, r.max_tokens, max_len_);
  seq->need_prompt_logprobs = r.prompt_logprobs;
  seq->cache_root = root_hash(r.cache_salt);
  ActiveRequest& a = active_[p.id];
  a.stream = std::move(p.stream);
  a.sampling = std::move(r.sampling);
  a.ignore_eos = r.ignore_eos;
  if (needs_no_step(seq->max_tokens, seq->need_prompt_logprobs)) {
    finish(p.id, FinishReason::kLength);
    return;
  }
  scheduler_.add(std::move(seq));
}

void EngineImpl::finish(uint64_t id, FinishReason reason, std::string error) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  scheduler_.remove(id);  // frees its blocks now
  StreamEvent e;
  e.kind = StreamEvent::Kind::kFinished;
  e.finish = reason;
  e.error = std::move(error);
  e.num_cached_tokens = it->second.num_cached_tokens;
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
  m.cascade_steps_total = runner_->cascade_steps();
  m.num_preemptions = scheduler_.num_preemptions();
  m.prompt_tokens_total = prompt_tokens_;
  m.generation_tokens_total = generation_tokens_;
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

// What the sampler needs of a sequence besides its parameters: its history and the index of the
// token being drawn (the same after a recompute, so a preempted request draws the same tokens).
SampleRequest sample_request(const Sequence& seq, const SamplingParams& params) {
  SampleRequest r;
  r.params = &params;
  r.prompt = std::span<const int32_t>(seq.tokens.data(), size_t(seq.num_prompt_tokens));
  r.generated = std::span<const int32_t>(seq.tokens.data() + seq.num_prompt_tokens,
                                         size_t(seq.num_generated()));
  r.step = static_cast<uint64_t>(seq.num_generated());
  return r;
}

void EngineImpl::process_outputs(const SchedulerOutput& out, const StepPlan& plan,
                                 const std::vector<float>& logits,
                                 const std::vector<int32_t>& sampled_ids) {
  const size_t vocab = static_cast<size_t>(vocab_size_);
  size_t row = 0, sampled_row = 0;
  std::vector<std::pair<uint64_t, FinishReason>> done;
  std::vector<std::pair<uint64_t, std::string>> errors;
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    Sequence* seq = c.seq;
    ActiveRequest& a = active_.at(seq->id);
    const bool sampled = plan.chunks[i].sample_path != SamplePath::kHost;
    const int32_t sampled_id = sampled ? sampled_ids.at(sampled_row++) : -1;
    const int num_rows = sampled ? 0
                         : c.logits == LogitsWanted::kAll ? c.num_tokens
                         : c.logits == LogitsWanted::kLast ? 1 : 0;
    const float* rows = logits.data() + row * vocab;  // [num_rows, vocab_size]
    row += num_rows;
    const int start = seq->num_computed - c.num_tokens;  // position of the chunk's first token
    if (c.logits == LogitsWanted::kAll && seq->need_prompt_logprobs) {
      // Row j predicts the token at start + j + 1.
      for (int j = 0; j < c.num_tokens && start + j + 1 < seq->num_prompt_tokens; ++j) {
        a.prompt_logprobs.push_back(token_logprobs({rows + j * vocab, vocab},
                                                   seq->tokens[start + j + 1], a.sampling.logprobs));
      }
      if (seq->num_computed >= seq->num_prompt_tokens) {
        StreamEvent e;
        e.kind = StreamEvent::Kind::kPromptLogprobs;
        SampledToken first;  // the first prompt token has nothing before it
        first.token = seq->tokens[0];
        first.logprob = std::numeric_limits<float>::quiet_NaN();
        e.prompt_logprobs.push_back(first);
        for (SampledToken& t : a.prompt_logprobs) e.prompt_logprobs.push_back(std::move(t));
        a.prompt_logprobs.clear();
        seq->need_prompt_logprobs = false;
        events_.emplace_back(a.stream, std::move(e));
      }
    }
    if (!a.prompt_counted && seq->num_computed >= seq->num_prompt_tokens) {
      a.prompt_counted = true;
      a.num_cached_tokens = seq->num_cached_prompt_tokens;
      prompt_tokens_ += seq->num_prompt_tokens;
    }
    if ((num_rows == 0 && !sampled) || seq->num_computed < seq->num_tokens())
      continue;  // mid-prompt chunk
    if (budget_spent(seq->num_generated(), seq->max_tokens)) {  // 0 tokens, prompt logprobs
      done.emplace_back(seq->id, FinishReason::kLength);
      continue;
    }
    SampledToken tok;
    try {
      if (sampled) {
        FS_CHECK(sampled_id >= 0, "NaN logit reached the sampler");
        tok.token = sampled_id;
        tok.logprob = std::numeric_limits<float>::quiet_NaN();  // none asked for
      } else {
        const float* row = rows + (num_rows - 1) * vocab;  // the last position's
        tok = sample_token({row, vocab}, sample_request(*seq, a.sampling));
      }
      FS_CHECK(tok.token >= 0 && tok.token < vocab_size_, "sampled token ", tok.token,
               " outside vocab of ", vocab_size_);
    } catch (const std::exception& e) {  // this request's parameters or logits: fail it alone
      errors.emplace_back(seq->id, e.what());
      continue;
    }
    seq->tokens.push_back(tok.token);
    ++generation_tokens_;
    const auto& eos = runner_->config().eos_token_ids;
    const FinishReason why =
        finish_after_token(tok.token, seq->num_generated(), seq->max_tokens, eos, a.ignore_eos);
    StreamEvent e;
    e.kind = StreamEvent::Kind::kToken;
    e.token = std::move(tok);
    events_.emplace_back(a.stream, std::move(e));
    if (why != FinishReason::kNone) done.emplace_back(seq->id, why);
  }
  FS_CHECK(row * vocab == logits.size(), "the model returned ", logits.size() / vocab,
           " logits rows, the batch asked for ", row);
  FS_CHECK(sampled_row == sampled_ids.size(), "the model returned ", sampled_ids.size(),
           " sampled ids, the batch asked for ", sampled_row);
  for (auto& [id, reason] : done) finish(id, reason);
  for (auto& [id, why] : errors) finish(id, FinishReason::kError, why);
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
  std::vector<float> logits;
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
        const auto t0 = Clock::now();
        SchedulerOutput out = scheduler_.schedule();
        for (uint64_t id : out.preempted) active_.at(id).prompt_logprobs.clear();  // recomputed
        StepPlan& plan = plan_;
        out.to_step_plan(&plan);
        for (size_t i = 0; i < plan.chunks.size(); ++i) {  // where each next token is drawn
          StepChunk& ch = plan.chunks[i];
          const Sequence& seq = *out.chunks[i].seq;
          const SamplingParams& p = active_.at(seq.id).sampling;
          ch.sample_path = choose_sample_path(
              p, vocab_size_, options_.sample_on_device && ch.logits == LogitsWanted::kLast);
          if (ch.sample_path != SamplePath::kHost) ch.sample = sample_request(seq, p);
        }
        const auto t1 = Clock::now();
        publish_metrics();
        flush_events();
        const auto t2 = Clock::now();
        logits.clear();
        sampled_ids.clear();
        runner_->step(plan, &logits, &sampled_ids);
        const auto t3 = Clock::now();
        scheduler_.commit(out);
        process_outputs(out, plan, logits, sampled_ids);
        // O(1): the three counts are kept apart, so a bookkeeping slip shows up here.
        FS_CHECK(blocks_.num_used() + blocks_.num_free() + blocks_.num_cached() ==
                     blocks_.num_total(),
                 "KV block accounting: used ", blocks_.num_used(), " + free ", blocks_.num_free(),
                 " + cached ", blocks_.num_cached(), " != total ", blocks_.num_total());
        const auto t4 = Clock::now();
        auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
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

}  // namespace

std::unique_ptr<Engine> Engine::create(std::unique_ptr<ModelRunner> runner,
                                       const EngineOptions& options) {
  FS_CHECK(runner != nullptr, "Engine::create needs a ModelRunner");
  FS_CHECK(options.max_num_seqs >= 1, "max_num_seqs = ", options.max_num_seqs);
  FS_CHECK(options.max_num_batched_tokens >= 1, "max_num_batched_tokens = ",
           options.max_num_batched_tokens);
  FS_CHECK(options.max_queue >= 1, "max_queue = ", options.max_queue);
  return std::make_unique<EngineImpl>(std::move(runner), options);
}

}  // namespace flashserve
