// ServerMetrics and the Prometheus text format (version 0.0.4): # HELP / # TYPE lines, then
// samples; histogram buckets are cumulative and end with le="+Inf".
#include "server/http/metrics.h"

#include <cstdio>

namespace flashserve {

namespace {

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

void add_metric(std::string* out, const std::string& name, const char* type, const char* help,
                const std::string& value) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
          value + "\n";
}

// Speculative decoding's counters, labelled by method (docs/SPECULATIVE.md).
void render_speculation(const EngineMetrics& e, std::string* out) {
  const std::string label = "{method=\"" + e.speculative_method + "\"} ";
  const auto add = [&](const char* name, const char* type, const char* help,
                       const std::string& value) {
    *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
            name + label + value + "\n";
  };
  add("flashserve_spec_draft_tokens_total", "counter",
      "Speculative draft tokens verified by the target.", std::to_string(e.spec_draft_tokens_total));
  add("flashserve_spec_accepted_tokens_total", "counter",
      "Speculative draft tokens accepted (equal to the target's own token).",
      std::to_string(e.spec_accepted_tokens_total));
  add("flashserve_spec_verifications_total", "counter",
      "Drafts verified (one sequence's draft in one step).",
      std::to_string(e.spec_verifications_total));
  const uint64_t v = e.spec_verifications_total;
  add("flashserve_spec_mean_accepted_length", "gauge",
      "Tokens each verification yields on average: accepted drafts plus the target's own.",
      fmt(v ? double(e.spec_accepted_tokens_total + v) / double(v) : 0.0));
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
  size_t i = 0;
  while (i < bounds_.size() && x > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += x;
  ++count_;
}

void Histogram::render(const std::string& name, const std::string& help, std::string* out) const {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += name + "_bucket{le=\"" + fmt(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts_.back();
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  *out += name + "_sum " + fmt(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      e2e_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void ServerMetrics::observe_ttft(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.observe(s);
}
void ServerMetrics::observe_tpot(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  tpot_.observe(s);
}
void ServerMetrics::observe_e2e(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  e2e_.observe(s);
}
void ServerMetrics::count_request(int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_by_status_[http_status];
}
void ServerMetrics::count_disconnect() {
  std::lock_guard<std::mutex> lock(mu_);
  ++disconnects_;
}

std::string ServerMetrics::render(const EngineMetrics& e) const {
  std::string out;
  add_metric(&out, "flashserve_requests_running", "gauge", "Sequences running in the engine.",
             std::to_string(e.num_running));
  add_metric(&out, "flashserve_requests_waiting", "gauge", "Requests waiting in the admission queue.",
             std::to_string(e.num_waiting));
  add_metric(&out, "flashserve_kv_blocks_used", "gauge", "KV-cache blocks in use.",
             std::to_string(e.kv_blocks_used));
  add_metric(&out, "flashserve_kv_blocks_total", "gauge", "KV-cache blocks in the pool.",
             std::to_string(e.kv_blocks_total));
  add_metric(&out, "flashserve_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks in use.",
             fmt(e.kv_blocks_total ? double(e.kv_blocks_used) / e.kv_blocks_total : 0.0));
  add_metric(&out, "flashserve_kv_blocks_free", "gauge", "KV-cache blocks free (no content).",
             std::to_string(e.kv_blocks_free));
  add_metric(&out, "flashserve_prefix_cache_blocks", "gauge",
             "KV blocks held by no request but kept for the prefix cache (evictable); "
             "used + free + these = total.",
             std::to_string(e.kv_blocks_cached));
  add_metric(&out, "flashserve_prefix_cache_queries_tokens_total", "counter",
             "Tokens of admitted requests looked up in the prefix cache.",
             std::to_string(e.prefix_cache_queries_tokens_total));
  add_metric(&out, "flashserve_prefix_cache_hits_tokens_total", "counter",
             "Tokens found in the prefix cache (their prefill skipped).",
             std::to_string(e.prefix_cache_hits_tokens_total));
  add_metric(&out, "flashserve_prefix_cache_evictions_total", "counter",
             "Cached KV blocks evicted to make room.",
             std::to_string(e.prefix_cache_evictions_total));
  add_metric(&out, "flashserve_preemptions_total", "counter", "Recompute preemptions.",
             std::to_string(e.num_preemptions));
  add_metric(&out, "flashserve_prompt_tokens_total", "counter", "Prompt tokens processed.",
             std::to_string(e.prompt_tokens_total));
  add_metric(&out, "flashserve_generation_tokens_total", "counter", "Tokens generated.",
             std::to_string(e.generation_tokens_total));
  add_metric(&out, "flashserve_engine_requests_finished_total", "counter",
             "Engine requests (choices) finished, for any reason.",
             std::to_string(e.requests_finished_total));
  add_metric(&out, "flashserve_engine_steps_total", "counter", "Engine steps run.",
             std::to_string(e.steps_total));
  out += "# HELP flashserve_engine_step_seconds_total Engine-thread time by phase of its steps.\n"
         "# TYPE flashserve_engine_step_seconds_total counter\n";
  out += "flashserve_engine_step_seconds_total{phase=\"schedule\"} " +
         fmt(e.schedule_seconds_total) + "\n";
  out += "flashserve_engine_step_seconds_total{phase=\"forward\"} " +
         fmt(e.forward_seconds_total) + "\n";
  out += "flashserve_engine_step_seconds_total{phase=\"sample\"} " + fmt(e.sample_seconds_total) +
         "\n";
  if (!e.speculative_method.empty()) render_speculation(e, &out);
  std::lock_guard<std::mutex> lock(mu_);
  add_metric(&out, "flashserve_client_disconnects_total", "counter",
             "Requests cancelled because the client disconnected.", std::to_string(disconnects_));
  out += "# HELP flashserve_http_requests_total HTTP requests answered, by status code.\n"
         "# TYPE flashserve_http_requests_total counter\n";
  for (const auto& [status, n] : requests_by_status_) {
    out += "flashserve_http_requests_total{status=\"" + std::to_string(status) + "\"} " +
           std::to_string(n) + "\n";
  }
  ttft_.render("flashserve_time_to_first_token_seconds", "Time from submit to first token.", &out);
  tpot_.render("flashserve_time_per_output_token_seconds",
               "Mean time between output tokens after the first, per request.", &out);
  e2e_.render("flashserve_e2e_request_latency_seconds", "Time from submit to finish.", &out);
  return out;
}

}  // namespace flashserve
