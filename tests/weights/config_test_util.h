// Helpers for the config.json tests: the trimmed published configs (tests/weights/data/configs)
// and the error read_hf_config throws for a config, with EXPECT_MSG to look for part of it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"

namespace flashserve::test {

inline const std::string kConfigs = std::string(FS_SOURCE_DIR) + "/tests/weights/data/configs/";

// Published config `name` (tests/weights/data/configs/<name>.json).
inline nlohmann::json published(const std::string& name) {
  return nlohmann::json::parse(read_bytes(kConfigs + name + ".json"));
}

// The error read_hf_config throws for `j` ("" when it accepts it).
inline std::string config_error(const nlohmann::json& j) {
  const std::string dir = fresh_dir("err");
  write_text(dir + "/config.json", j.dump());
  return error_of([&] { read_hf_config(dir + "/config.json"); }, "");
}

}  // namespace flashserve::test

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)
