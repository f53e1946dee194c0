// MappedFile: a read-only memory mapping of a whole file (RAII), so that weights are never read
// into a second copy. Errors throw flashserve::Error naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace flashserve {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws if missing, unreadable or a folder
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flashserve
