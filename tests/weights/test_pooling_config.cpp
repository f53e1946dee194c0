// read_pooling_config: sentence-transformers folders with last-token pooling are embedders;
// folders without modules.json or a Pooling module are not; other pooling modes, unknown module
// types and a wrong dimension fail with a message naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "weights/pooling_config.h"

namespace flashserve {
namespace {

namespace fs = std::filesystem;

class PoolingConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fs_pooling_" + std::to_string(getpid()));
    fs::create_directories(dir_ / "1_Pooling");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const fs::path& rel, const std::string& text) { std::ofstream(dir_ / rel) << text; }
  void write_modules(const std::string& extra = "") {
    write(
        "modules.json",
        R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},)"
        R"({"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"})" +
            extra + "]");
  }
  void write_pooling(bool last, bool mean, int dim = 64) {
    write("1_Pooling/config.json",
          "{\"word_embedding_dimension\": " + std::to_string(dim) +
              ", \"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": " +
              (mean ? "true" : "false") + ", \"pooling_mode_lasttoken\": " +
              (last ? "true" : "false") + ", \"include_prompt\": true}");
  }
  std::string error() {
    try {
      read_pooling_config(dir_.string(), 64);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(PoolingConfigTest, LastTokenPoolingWithNormalize) {
  write_modules(
      R"(,{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"})");
  write_pooling(true, false);
  const auto p = read_pooling_config(dir_.string(), 64);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->dimension, 64);
  EXPECT_TRUE(p->normalize);
}

TEST_F(PoolingConfigTest, NoModulesOrNoPoolingIsNotAnEmbedder) {
  EXPECT_FALSE(read_pooling_config(dir_.string(), 64).has_value());
  EXPECT_FALSE(read_pooling_config((dir_ / "missing").string(), 64).has_value());
  write("modules.json", R"([{"type":"sentence_transformers.models.Transformer","path":""}])");
  EXPECT_FALSE(read_pooling_config(dir_.string(), 64).has_value());
}

TEST_F(PoolingConfigTest, RefusesWhatIsNotImplemented) {
  write_modules();
  write_pooling(false, true);
  EXPECT_NE(error().find("pooling_mode_mean_tokens is not supported"), std::string::npos)
      << error();
  EXPECT_NE(error().find("1_Pooling/config.json"), std::string::npos) << error();
  write_pooling(true, true);
  EXPECT_NE(error().find("pooling_mode_mean_tokens"), std::string::npos) << error();
  write_pooling(true, false, 32);
  EXPECT_NE(error().find("word_embedding_dimension 32"), std::string::npos) << error();
  write_pooling(true, false);
  write_modules(R"(,{"idx":2,"path":"2_Dense","type":"sentence_transformers.models.Dense"})");
  EXPECT_NE(error().find("sentence_transformers.models.Dense' is not supported"), std::string::npos)
      << error();
  write("modules.json", R"([{"type":"sentence_transformers.models.Pooling","path":"../x"}])");
  EXPECT_NE(error().find("is not a folder inside"), std::string::npos) << error();
  write("modules.json", "{not json");
  EXPECT_NE(error().find("modules.json: not valid JSON"), std::string::npos) << error();
}

}  // namespace
}  // namespace flashserve
