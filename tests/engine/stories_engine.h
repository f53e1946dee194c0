// stories260K (loaded once per test program) and an Engine over it on the CPU backend, for the
// engine tests that run the real model.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "weights/loaded_model.h"

namespace flashserve {

inline const LoadedModel& stories_model() {
  static std::unique_ptr<LoadedModel> m = load_model(FS_MODELS_DIR "/stories260K/stories260K.bin");
  return *m;
}

// One CPU thread, blocks of 16 tokens, a KV cache of `kv_tokens` tokens.
inline std::unique_ptr<Engine> make_stories_engine(int64_t kv_tokens, EngineOptions opts = {}) {
  ModelRunnerOptions ro;
  ro.backend = "cpu";
  ro.block_size = 16;
  ro.kv_cache_tokens = kv_tokens;
  ro.threads = 1;
  return Engine::create(ModelRunner::create(stories_model(), ro), opts);
}

}  // namespace flashserve
