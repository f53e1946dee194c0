// The oracle test: every template in tests/chat_template/templates/ (and every built-in template) is
// rendered against every conversation in tests/chat_template/conversations.json by our interpreter and by
// jinja2 through tests/chat_template/render_jinja2.py, and the results must agree byte for byte: the same
// text, or both raising the same raise_exception message, or both failing. python3-jinja2 is a
// CI dependency (scripts/common.sh); without it this test fails, it does not skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat_template/builtin_templates.h"
#include "chat_template/chat_template.h"

using namespace flashserve;
namespace fs = std::filesystem;

namespace {

const std::string kChatTests = std::string(FS_SOURCE_DIR) + "/tests/chat_template";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string run_command(const std::string& cmd, int* status) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    *status = -1;
    return "";
  }
  std::string out;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

// The corpus plus the built-in templates, in one folder for the Python side.
fs::path prepare_templates() {
  const fs::path dir = fs::path(FS_BINARY_DIR) / "chat_oracle_templates";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kChatTests + "/templates")) {
    fs::copy_file(entry.path(), dir / entry.path().filename());
  }
  for (const std::string& name : ChatTemplate::builtin_names()) {
    std::ofstream(dir / ("builtin_" + name + ".jinja"), std::ios::binary)
        << builtin_template_source(name);
  }
  return dir;
}

std::vector<ChatMessage> messages_of(const nlohmann::json& conv) {
  std::vector<ChatMessage> out;
  for (const auto& m : conv["messages"]) {
    out.push_back({m["role"], m["content"], m.value("name", "")});
  }
  return out;
}

// Every literal range must hold text the user wrote: be inside some message's content or name or
// contents printed back to back (touching ranges merge), or contain a content in JSON form
// (tojson output that read a content is literal as a whole).
void expect_literals_from_messages(const RenderedChat& r, const std::vector<ChatMessage>& msgs,
                                   const std::string& where) {
  for (auto [b, e] : r.literal) {
    ASSERT_LE(e, r.text.size()) << where;
    const std::string piece = r.text.substr(b, e - b);
    std::string all;
    for (const auto& m : msgs) all += m.content;
    bool found = all.find(piece) != std::string::npos;
    for (const auto& m : msgs) {
      found = found || m.content.find(piece) != std::string::npos ||
              m.name.find(piece) != std::string::npos ||
              nlohmann::json(m.content).dump().find(piece) != std::string::npos;
      const std::string json = nlohmann::json(m.content).dump();
      found = found || (json.size() > 2 && piece.find(json.substr(1, json.size() - 2)) != std::string::npos);
    }
    EXPECT_TRUE(found) << where << ": literal range [" << b << ", " << e << ") = '" << piece
                       << "' is not from a message";
  }
}

// On a mismatch, shows where the texts part rather than both whole prompts.
void expect_same(const std::string& got, const std::string& want, const std::string& where) {
  if (got == want) return;
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  ADD_FAILURE() << where << ": differs from jinja2 at byte " << i << "\n  ours:   "
                << nlohmann::json(got.substr(from, 120)).dump() << "\n  jinja2: "
                << nlohmann::json(want.substr(from, 120)).dump();
}

struct Tally {
  size_t texts = 0, raised = 0, errors = 0;
};

// Renders every template of `dir` against every conversation of `conversations` with jinja2 and
// with ChatTemplate and expects the same outcome. `check_literals(file)` says whether to check
// that file's literal ranges against the messages.
Tally compare_with_jinja2(const fs::path& dir, const std::string& conversations,
                          const std::function<bool(const std::string&)>& check_literals) {
  Tally tally;
  int status = 0;
  const std::string out = run_command(
      "python3 " + kChatTests + "/render_jinja2.py " + dir.string() + " " + conversations, &status);
  EXPECT_EQ(status, 0) << "render_jinja2.py failed: python3 with python3-jinja2 is required "
                          "(scripts/common.sh installs it)";
  if (status != 0) return tally;
  const auto expected = nlohmann::json::parse(out);
  const auto spec = nlohmann::json::parse(slurp(conversations));
  const std::string bos = spec["bos_token"], eos = spec["eos_token"];
  for (const auto& [file, results] : expected.items()) {
    std::unique_ptr<ChatTemplate> tmpl;
    try {
      tmpl = std::make_unique<ChatTemplate>(slurp(dir / file), file, bos, eos);
    } catch (const Error& e) {
      EXPECT_TRUE(results.contains("compile_error")) << file << ": we refuse it (" << e.what()
                                                     << ") but jinja2 compiles it";
      continue;
    }
    EXPECT_FALSE(results.contains("compile_error"))
        << file << ": jinja2 cannot compile it: " << results.value("compile_error", "");
    if (results.contains("compile_error")) continue;
    for (const auto& conv : spec["conversations"]) {
      const std::string where = file + " x " + conv["name"].get<std::string>();
      const auto& want = results[conv["name"].get<std::string>()];
      const auto msgs = messages_of(conv);
      try {
        const RenderedChat got = tmpl->render(msgs, conv["add_generation_prompt"]);
        EXPECT_TRUE(want.contains("text")) << where << ": jinja2 failed (" << want.dump()
                                           << ") but we rendered:\n" << got.text.substr(0, 300);
        if (want.contains("text")) {
          expect_same(got.text, want["text"].get<std::string>(), where);
          if (check_literals(file)) expect_literals_from_messages(got, msgs, where);
          ++tally.texts;
        }
      } catch (const ChatTemplateError& e) {
        if (want.contains("raised")) {
          EXPECT_EQ(std::string(e.what()), want["raised"].get<std::string>()) << where;
          ++tally.raised;
        } else {
          EXPECT_TRUE(want.contains("error"))
              << where << ": we failed (" << e.what() << ") but jinja2 gave "
              << want.dump().substr(0, 300);
          ++tally.errors;
        }
      }
    }
  }
  std::printf("compared %zu texts, %zu raise_exception messages, %zu errors\n", tally.texts,
              tally.raised, tally.errors);
  return tally;
}

}  // namespace

TEST(ChatOracle, MatchesJinja2ByteForByte) {
  // The feature templates print reprs and reversals of contents (literal as a whole, by the
  // conservative rule); the family and built-in ones only copy contents.
  const Tally t = compare_with_jinja2(prepare_templates(), kChatTests + "/conversations.json",
                                      [](const std::string& file) {
                                        return file.rfind("family_", 0) == 0 ||
                                               file.rfind("builtin_", 0) == 0;
                                      });
  EXPECT_GT(t.texts, 400u);
  EXPECT_GT(t.raised, 40u);
}

// Differential: random templates over the supported constructs (tests/chat_template/random_templates.py,
// fixed seed) must render as jinja2 renders them, text or failure.
TEST(ChatOracle, RandomTemplatesMatchJinja2) {
  const fs::path dir = fs::path(FS_BINARY_DIR) / "chat_oracle_random";
  int status = 0;
  run_command("python3 " + kChatTests + "/random_templates.py " + dir.string() + " 400 1", &status);
  ASSERT_EQ(status, 0) << "random_templates.py failed";
  const Tally t = compare_with_jinja2(dir, kChatTests + "/random_conversations.json",
                                      [](const std::string&) { return false; });
  EXPECT_GT(t.texts, 300u);
  EXPECT_GT(t.errors, 300u);
}
