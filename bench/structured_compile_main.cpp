// bench_structured_compile: what a structured-output request costs before its first token —
// compiling its JSON Schema and the first token mask — for every schema of a folder, or of a
// corpus file (JSONL of {"source","name","schema"}: bench/structured_corpus/, tools/schema_corpus.mjs), over one tokenizer's
// vocabulary (host only). Schemas compile under the best-effort policy (--strict: refused
// instead). JSON lines on stdout: one per schema (medians over --repeats, each with a fresh
// compiler so nothing comes from a cache; the keywords dropped and the unknown ones ignored), then
// a summary: the share accepted and the share exactly enforced (nothing dropped), overall and per
// source, refusals and drops counted by keyword, and the p50/p99 over the accepted ones.
// --synthetic-vocab N stretches the vocabulary to N tokens by joining pieces, to stand in for a
// larger tokenizer (e.g. 128k) that is not at hand. --walks N: N random byte-level walks through
// each accepted schema's grammar, each validated against the original schema (SchemaValidator):
// no invalid output where nothing was dropped; where keywords were dropped, the mismatch rate
// that best effort reports. --walks-out FILE also writes the outputs, for an external validator.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "bench/record.h"
#include "bench/synthetic_vocab.h"
#include "cli/cli.h"
#include "structured/compiled_grammar.h"
#include "structured/matcher.h"
#include "structured/completion.h"
#include "structured/schema_error.h"
#include "structured/schema_validator.h"
#include "structured/stack_automaton.h"
#include "tokenizer/tokenizer.h"

using namespace flashserve;
using namespace flashserve::structured;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Schema {
  std::string source, name, text;
};

// A random output of the grammar: random allowed bytes for up to `budget` bytes, then the bytes
// that bring it closest to accepting; it stops at an accepting state with probability 1/4.
std::string random_walk(const Grammar& g, std::mt19937_64& rng, size_t budget) {
  StackAutomaton a(g);
  int32_t set = a.initial();
  std::string out;
  std::vector<std::pair<uint8_t, int32_t>> next;
  for (size_t n = 0; n < (size_t{1} << 20); ++n) {  // required content may be long
    if (a.accepting(set) && (out.size() >= budget || rng() % 4 == 0)) return out;
    next.clear();
    for (int b = 0; b < 256; ++b)
      if (int32_t t = a.step(set, static_cast<uint8_t>(b)); t != StackAutomaton::kDead) next.push_back({uint8_t(b), t});
    if (next.empty() && a.accepting(set)) return out;
    FS_CHECK(!next.empty(), "a walk reached a state with no byte to continue: ", out);
    size_t pick = rng() % next.size();
    if (out.size() >= budget) {  // finish: the byte closest to accepting
      int64_t best = kNoCompletion + 1;
      for (size_t i = 0; i < next.size(); ++i)
        if (int64_t d = a.distance_to_accept(next[i].second); d < best) best = d, pick = i;
    }
    out.push_back(static_cast<char>(next[pick].first));
    set = next[pick].second;
  }
  return out;  // did not finish: the validator reports it
}

// The *.json files of a folder (source "folder") or the lines of a corpus JSONL file.
std::vector<Schema> load_schemas(const std::string& folder, const std::string& corpus) {
  std::vector<Schema> out;
  if (!corpus.empty()) {
    std::ifstream in(corpus);
    FS_CHECK(in.good(), "cannot open the corpus ", corpus);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) {
        const json j = json::parse(line);
        out.push_back({j.at("source"), j.at("name"), j.at("schema").dump()});
      }
    return out;
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(folder))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) out.push_back({"folder", f.filename().string(), read_file(f)});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer = "../shared/models/llama2-tokenizer/tokenizer.model";
  std::string schemas = "tests/structured/schemas", corpus;
  int repeats = 5, synthetic = 0;
  bool strict = false;
  int walks = 0;
  std::string walks_out;
  CLI::App app{"Schema compile + first token mask over a folder of JSON Schemas; JSON lines.",
               "bench_structured_compile"};
  app.add_option("--tokenizer", tokenizer, "tokenizer file (SentencePiece .model or tokenizer.json)")
      ->capture_default_str();
  app.add_option("--schemas", schemas, "folder of *.json schemas")->capture_default_str();
  app.add_option("--corpus", corpus, "JSONL corpus of schemas (tools/schema_corpus.mjs); replaces --schemas");
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--synthetic-vocab", synthetic, "stretch the vocabulary to this many tokens (0: off)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_flag("--strict", strict, "refuse what the grammar cannot enforce (json_schema.strict)");
  app.add_option("--walks", walks, "random walks per accepted schema, validated against the original schema")
      ->check(CLI::Range(0, 1000))->capture_default_str();
  app.add_option("--walks-out", walks_out, "JSONL of the walks' outputs {source, schema, output}");
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const std::string command = cli::command_line(argc, argv);
  return cli::run_main("bench_structured_compile", [&] {
    auto tok = Tokenizer::load(tokenizer);
    TokenVocabulary vocab = vocabulary_from_tokenizer(*tok, tok->vocab_size());
    if (synthetic > 0) bench::stretch_vocabulary(vocab, synthetic);
    const auto t0 = Clock::now();
    auto trie = std::make_shared<const VocabTrie>(std::move(vocab));
    const double trie_ms = ms(t0, Clock::now());

    const std::vector<Schema> all = load_schemas(schemas, corpus);
    std::vector<double> compile_all, mask_all, total_all;
    std::map<std::string, int> refused_by_keyword, dropped_by_keyword, unknown_by_keyword;
    struct Counts {
      int accepted = 0, enforced = 0, total = 0;
    };
    std::map<std::string, Counts> by_source;
    int refused = 0, enforced_all = 0;
    int64_t walks_exact = 0, invalid_exact = 0, walks_dropped = 0, mismatch_dropped = 0;
    std::map<std::string, int> invalid_exact_by_keyword;  // the violations' keywords
    std::ofstream walks_file;
    if (!walks_out.empty()) walks_file.open(walks_out);
    std::mt19937_64 rng(1234);
    for (const Schema& sc : all) {
      json j{{"bench", "structured_compile"}, {"source", sc.source}, {"schema", sc.name},
             {"vocab_size", trie->vocab_size()}};
      std::vector<double> compile, mask, total;
      ++by_source[sc.source].total;
      SchemaReport report;
      try {
        for (int r = 0; r < repeats; ++r) {
          GrammarCompiler compiler(trie);  // fresh: no cached grammar or mask
          const auto a = Clock::now();
          auto grammar = compiler.json_schema(sc.text, strict);
          report = grammar->report();
          const auto b = Clock::now();
          Matcher m(grammar);
          std::vector<uint32_t> words(m.mask_words());
          m.fill_next_token_mask(words.data());
          const auto c = Clock::now();
          compile.push_back(ms(a, b)), mask.push_back(ms(b, c)), total.push_back(ms(a, c));
        }
      } catch (const std::exception& e) {  // a refused schema: reported, not timed
        ++refused;
        const auto* se = dynamic_cast<const SchemaError*>(&e);
        j["refused_keyword"] = se ? se->keyword() : std::string("(not a SchemaError)");
        ++refused_by_keyword[j["refused_keyword"].get<std::string>()];
        j["error"] = e.what();
        std::printf("%s\n", j.dump().c_str());
        continue;
      }
      ++by_source[sc.source].accepted;
      json dropped = json::array(), unknown = json::array();
      std::set<std::string> dropped_keys;
      for (const auto& d : report.dropped) {
        dropped.push_back(d.path);
        dropped_keys.insert(d.keyword);
      }
      for (const std::string& k : dropped_keys) ++dropped_by_keyword[k];
      for (const auto& [k, path] : report.unknown) {
        unknown.push_back(k);
        ++unknown_by_keyword[k];
      }
      j["enforced"] = report.dropped.empty();
      if (!dropped.empty()) j["dropped"] = dropped;
      if (!unknown.empty()) j["unknown"] = unknown;
      if (report.dropped.empty()) ++by_source[sc.source].enforced, ++enforced_all;
      if (walks > 0) {
        SchemaReport rep;
        SchemaOptions o;
        o.strict = strict;
        const Grammar g = compile_json_schema(sc.text, o, &rep);
        const SchemaValidator validator(sc.text);
        int invalid = 0;
        for (int w = 0; w < walks; ++w) {
          const std::string text = random_walk(g, rng, 64);
          json line{{"source", sc.source}, {"schema", sc.name}, {"enforced", rep.dropped.empty()}, {"output", text}};
          if (auto v = validator.validate(text)) {
            ++invalid;
            if (rep.dropped.empty()) ++invalid_exact_by_keyword[v->keyword];
            line["violation"] = {{"keyword", v->keyword}, {"schema_path", v->schema_path},
                                 {"instance_path", v->instance_path}, {"message", v->message}};
          }
          if (walks_file) walks_file << line.dump() << "\n";
        }
        j["walks"] = walks;
        j["walks_invalid"] = invalid;
        (rep.dropped.empty() ? walks_exact : walks_dropped) += walks;
        (rep.dropped.empty() ? invalid_exact : mismatch_dropped) += invalid;
      }
      j["compile_ms"] = bench::percentile(compile, 0.5);
      j["first_mask_ms"] = bench::percentile(mask, 0.5);
      j["total_ms"] = bench::percentile(total, 0.5);
      compile_all.push_back(j["compile_ms"]), mask_all.push_back(j["first_mask_ms"]);
      total_all.push_back(j["total_ms"]);
      std::printf("%s\n", j.dump().c_str());
    }
    json sources = json::object();
    for (const auto& [name, n] : by_source)
      sources[name] = {{"accepted", n.accepted}, {"enforced", n.enforced}, {"total", n.total},
                       {"accepted_share", double(n.accepted) / n.total},
                       {"enforced_share", double(n.enforced) / n.total}};
    auto counts = [](const std::map<std::string, int>& m) {
      json out = json::object();
      for (const auto& [k, n] : m) out[k] = n;
      return out;
    };
    const double n_all = all.empty() ? 1.0 : double(all.size());
    const json summary{{"bench", "structured_compile_summary"},
                       {"gpu", "none"},
                       {"command", command},
                       {"tokenizer", tokenizer},
                       {"vocab_size", trie->vocab_size()},
                       {"schemas", corpus.empty() ? schemas : corpus},
                       {"num_schemas", all.size()},
                       {"strict", strict},
                       {"num_refused", refused},
                       {"accepted_share", double(all.size() - refused) / n_all},
                       {"enforced_share", enforced_all / n_all},
                       {"by_source", sources},
                       {"refused_by_keyword", counts(refused_by_keyword)},
                       {"dropped_by_keyword", counts(dropped_by_keyword)},
                       {"unknown_keywords", counts(unknown_by_keyword)},
                       {"repeats", repeats},
                       {"walks_enforced", walks_exact},
                       {"walks_enforced_invalid", invalid_exact},
                       {"walks_enforced_invalid_by_keyword", counts(invalid_exact_by_keyword)},
                       {"walks_dropped", walks_dropped},
                       {"walks_dropped_mismatch", mismatch_dropped},
                       {"trie_build_ms", trie_ms},
                       {"compile_ms_p50", bench::percentile(compile_all, 0.5)},
                       {"first_mask_ms_p50", bench::percentile(mask_all, 0.5)},
                       {"compile_ms_p99", bench::percentile(compile_all, 0.99)},
                       {"total_ms_p50", bench::percentile(total_all, 0.5)},
                       {"total_ms_p99", bench::percentile(total_all, 0.99)}};
    std::printf("%s\n", summary.dump().c_str());
    return 0;
  });
}
