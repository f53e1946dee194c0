// The default model (stories260K) when no --model is given: found beside the program or the
// source tree it was built from, never relative to the working directory, so a binary started
// from anywhere finds the same model.
#pragma once

#include <string>

namespace flashserve {

// The first folder holding stories260K.bin among shared/models/stories260K and
// models/stories260K (what scripts/fetch_model.sh downloads) under any ancestor of the running
// executable's folder, then of the source tree (FS_SOURCE_DIR, set at build time). "" if none.
std::string default_model_dir();

}  // namespace flashserve
