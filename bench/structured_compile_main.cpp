// bench_structured_compile: what a structured-output request costs before its first token —
// compiling its JSON Schema and the first token mask — for every schema of a folder, or of a
// corpus file (JSONL of {"source","name","schema"}: bench/structured_corpus/, tools/schema_corpus.mjs), over one tokenizer's
// vocabulary (host only). Schemas compile under the best-effort policy (--strict: refused
// instead). JSON lines on stdout: one per schema (medians over --repeats, each with a fresh
// compiler so nothing comes from a cache; the keywords dropped and the unknown ones ignored), then
// a summary: the share accepted and the share exactly enforced (nothing dropped), overall and per
// source, refusals and drops counted by keyword, and the p50/p99 over the accepted ones.
// --synthetic-vocab N stretches the vocabulary to N tokens by joining pieces, to stand in for a
// larger tokenizer (e.g. 128k) that is not at hand.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <sstream>

#include "bench/record.h"
#include "bench/synthetic_vocab.h"
#include "cli/cli.h"
#include "structured/compiled_grammar.h"
#include "structured/matcher.h"
#include "structured/schema_error.h"
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
