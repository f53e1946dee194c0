// bench_e2e's batch runs and its --json-schema constraint (see bench/e2e_run.h).
#include "bench/e2e_run.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "bench/synthetic_vocab.h"
#include "core/error.h"
#include "structured/compiled_grammar.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::bench {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<std::vector<int32_t>> make_prompts(int n, int len, const ModelConfig& c) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> id(259, std::min(459, c.vocab_size) - 1);
  std::vector<std::vector<int32_t>> p(n);
  for (auto& v : p) {
    v.push_back(c.bos_token_id);
    while (int(v.size()) < len) v.push_back(id(rng));
  }
  return p;
}

// Submits every prompt at once, drains all streams round-robin, times each request.
RunResult run_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                    int output_len, const BatchOptions& o) {
  const double max_seconds = o.max_seconds;
  RunResult r;
  const size_t n = prompts.size();
  std::vector<std::shared_ptr<RequestStream>> streams(n);
  std::vector<Clock::time_point> first(n), last(n);
  std::vector<int> count(n, 0);
  std::vector<bool> done(n, false);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    GenerationRequest req;
    req.prompt = prompts[i];
    req.max_tokens = output_len;
    req.sampling = o.sampling;
    req.sampling.seed = i;
    req.has_seed = true;
    req.ignore_eos = true;
    if (o.constraint) req.constraint = *o.constraint;
    streams[i] = engine.submit(std::move(req));
    FS_CHECK(streams[i] != nullptr, "engine queue full at request ", i, " (raise max_queue)");
  }
  size_t finished = 0;
  while (finished < n) {
    bool progressed = false;
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      while (auto ev = streams[i]->next(std::chrono::milliseconds(0))) {
        progressed = true;
        const auto now = Clock::now();
        if (ev->kind == StreamEvent::Kind::kToken) {
          if (count[i]++ == 0) first[i] = now;
          last[i] = now;
        } else if (ev->kind == StreamEvent::Kind::kFinished) {
          done[i] = true, ++finished;
          if (ev->finish != FinishReason::kLength) ++r.num_not_length;
          if (!ev->error.empty() && r.first_error.empty()) r.first_error = ev->error;
          break;
        }
      }
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (!r.timed_out && seconds(t0, Clock::now()) > max_seconds) {
      r.timed_out = true;  // cancel the rest; their kFinished still arrives
      for (size_t i = 0; i < n; ++i)
        if (!done[i]) streams[i]->cancel();
    }
  }
  r.elapsed_s = seconds(t0, Clock::now());
  for (size_t i = 0; i < n; ++i) {
    r.output_tokens += count[i];
    if (count[i] > 0) r.ttft_s.push_back(seconds(t0, first[i]));
    if (count[i] > 1) r.decode_s.push_back(seconds(first[i], last[i]));
  }
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string failure_of(const RunResult& r, size_t num_requests, double max_seconds) {
  if (!r.first_error.empty()) return r.first_error;
  if (r.timed_out) return str_cat("timed out after ", max_seconds, " s (--max-seconds)");
  if (r.num_not_length > 0)
    return str_cat(r.num_not_length, " of ", num_requests, " requests did not run to their length");
  return "";
}


namespace {

// An object of the kind API clients ask for: nested objects, an array of them, enums, bounded
// and free strings, integers in a range, numbers, booleans and an optional field.
constexpr const char* kRealisticSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "maxLength": 40},
    "status": {"enum": ["active", "inactive", "pending"]},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "score": {"type": "number"},
    "verified": {"type": "boolean"},
    "address": {"type": "object", "properties": {"street": {"type": "string"},
                "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "city", "zip"], "additionalProperties": false},
    "orders": {"type": "array", "maxItems": 4, "items": {"type": "object",
               "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
               "required": ["sku", "qty"], "additionalProperties": false}},
    "note": {"type": "string"}
  },
  "required": ["id", "name", "status", "age", "score", "verified", "address", "orders"],
  "additionalProperties": false
})";

}  // namespace

OutputConstraint json_schema_constraint(const std::string& schema_file,
                                        const std::string& tokenizer_file, const ModelConfig& c,
                                        int synthetic_vocab) {
  std::string schema = kRealisticSchema;
  if (schema_file != "realistic") {
    std::ifstream in(schema_file);
    FS_CHECK(in.good(), schema_file, ": cannot read");
    std::stringstream text;
    text << in.rdbuf();
    schema = text.str();
  }
  const std::string array = R"({"type":"array","minItems":1000,"items":)" + schema + "}";
  auto tokenizer = Tokenizer::load(tokenizer_file);
  structured::TokenVocabulary vocab = structured::vocabulary_from_tokenizer(
      *tokenizer, synthetic_vocab > 0 ? tokenizer->vocab_size() : c.vocab_size, c.eos_token_ids);
  if (synthetic_vocab > 0) {
    stretch_vocabulary(vocab, synthetic_vocab);
    FS_CHECK(vocab.vocab_size() == c.vocab_size, "--synthetic-vocab ", synthetic_vocab,
             ": the vocabulary of ", tokenizer_file, " stretched has ", vocab.vocab_size(),
             " tokens, the model's vocab_size is ", c.vocab_size);
  }
  auto trie = std::make_shared<const structured::VocabTrie>(std::move(vocab));
  structured::GrammarCompiler compiler(trie);
  OutputConstraint out;
  out.grammar = compiler.json_schema(array);
  return out;
}

}  // namespace flashserve::bench
