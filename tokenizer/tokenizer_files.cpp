// Which tokenizer file a model uses, and Tokenizer::load choosing the back end by file type.
// The choice follows transformers' fast tokenizer: tokenizer.json when present, else the
// SentencePiece tokenizer.model; else (llama2.c folders) the single tok*.model there.
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer_backends.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

namespace fs = std::filesystem;

std::string find_tokenizer_file(const std::string& model_path) {
  std::error_code ec;
  const fs::path p(model_path);
  const bool is_dir = fs::is_directory(p, ec);
  const fs::path dir = is_dir ? p : (p.parent_path().empty() ? fs::path(".") : p.parent_path());
  std::vector<std::string> looked;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    const fs::path c = dir / name;
    looked.push_back(c.string());
    if (fs::is_regular_file(c, ec)) return c.string();
  }
  // llama2.c: tok512.model and the like in the folder
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tok", 0) == 0 && e.path().extension() == ".model") found.push_back(e.path());
  }
  if (found.size() == 1) return found[0].string();
  looked.push_back((dir / "tok*.model").string() +
                   (found.empty() ? "" : " (" + std::to_string(found.size()) + " found: ambiguous)"));
  std::string list;
  for (const auto& l : looked) list += (list.empty() ? "" : ", ") + l;
  throw Error("no tokenizer found for model " + model_path + ": looked for " + list +
              "; pass --tokenizer PATH");
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const std::string file = fs::is_directory(path, ec) ? find_tokenizer_file(path) : path;
  if (fs::path(file).extension() == ".json") return load_hf_tokenizer(file);
  return load_sentencepiece_tokenizer(file);
}

}  // namespace flashserve
