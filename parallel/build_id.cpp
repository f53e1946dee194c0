// build_id(): the identity the nodes of a group compare (parallel/node_group.h). The revision
// comes from parallel/CMakeLists.txt at configure time (FLASHSERVE_REVISION: `git describe`, or
// "unknown" outside a checkout); only this file sees it, so a new revision recompiles one file.
#include "parallel/communicator.h"

#ifndef FLASHSERVE_REVISION
#define FLASHSERVE_REVISION "unknown"
#endif

namespace flashserve {

std::string build_id() {
  std::string compiler =
#if defined(__clang__)
      "clang " __clang_version__;
#elif defined(__GNUC__)
      "gcc " __VERSION__;
#else
      "unknown compiler";
#endif
  while (!compiler.empty() && compiler.back() == ' ') compiler.pop_back();
  return std::string("flashserve ") + FLASHSERVE_REVISION + " (" + compiler + ", " +
         (nccl_available() ? "NCCL" : "no NCCL") + ")";
}

}  // namespace flashserve
