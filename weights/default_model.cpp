// default_model_dir() (see default_model.h): looks upwards from the executable, then from the
// source tree, for the stories260K folder.
#include "weights/default_model.h"

#include <filesystem>
#include <system_error>

namespace flashserve {

namespace fs = std::filesystem;

namespace {

// The stories260K folder under `dir` or one of its ancestors, "" if none.
std::string find_upwards(fs::path dir) {
  const fs::path candidates[] = {fs::path("shared") / "models" / "stories260K",
                                 fs::path("models") / "stories260K"};
  std::error_code ec;
  for (; !dir.empty(); dir = dir.parent_path()) {
    for (const fs::path& c : candidates)
      if (fs::is_regular_file(dir / c / "stories260K.bin", ec)) return (dir / c).string();
    if (dir == dir.root_path()) break;
  }
  return "";
}

}  // namespace

std::string default_model_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    if (std::string d = find_upwards(exe.parent_path()); !d.empty()) return d;
  }
#ifdef FS_SOURCE_DIR
  return find_upwards(fs::path(FS_SOURCE_DIR));
#else
  return "";
#endif
}

}  // namespace flashserve
