// The soak test's client side: random requests (valid completions with random parameters, bad
// requests, hang-ups mid-request and mid-response, fixed probes) and a strict classification of
// every answer, so that at the end each request is accounted for.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace flashserve::soak {

struct Tally {
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> ok{0};              // 200 with a complete, well-formed completion
  std::atomic<int64_t> ok_choices{0};      // choices in those (each one engine request)
  std::atomic<int64_t> usage_prompt{0};    // usage reported by the answers that carry it
  std::atomic<int64_t> usage_completion{0};
  std::atomic<int64_t> rejected{0};        // 503 + Retry-After (queue full)
  std::atomic<int64_t> bad_expected{0};    // a bad request answered with its expected 4xx
  std::atomic<int64_t> status_400{0}, status_404{0};
  std::atomic<int64_t> other_ok{0};        // GET /health, /v1/models, /metrics: 200
  std::atomic<int64_t> hung_up_request{0};   // the client left before sending the whole request
  std::atomic<int64_t> hung_up_response{0};  // the client left while the answer was coming
  std::atomic<int64_t> probes_ok{0};       // fixed requests whose text matched the idle answer
  // With probes_exact off (the CUDA backend: its GEMMs round differently at different batch
  // sizes, so a sampled text may change with its neighbours): well-formed probe answers whose
  // text differs from the idle one. They count as ok; with probes_exact on they are lost.
  std::atomic<int64_t> probes_differ{0};
  bool probes_exact = true;
  std::atomic<int64_t> lost{0};            // anything else: no answer, truncated, wrong status
  std::mutex mu;
  std::vector<std::string> failures;       // the first few `lost` ones, for the report
  void fail(const std::string& what);
};

struct Probe {
  std::string body;      // a non-streamed request (greedy or seeded)
  std::string expected;  // its text when the server was idle
};

// Runs requests until `next` (shared) reaches `total`. Each request's randomness comes from
// (seed, request number), so a run is reproducible up to timing.
void run_client(int port, uint64_t seed, std::atomic<int64_t>* next, int64_t total,
                const std::vector<Probe>& probes, Tally* tally);

// The text of a non-streamed completion's first choice ("" and false on any failure).
bool completion_text(int port, const std::string& body, std::string* text);

}  // namespace flashserve::soak
