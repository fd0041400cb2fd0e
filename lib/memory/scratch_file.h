// ScratchFile: an anonymous file of fixed size in a given directory (NVMe offload's backing
// store), unlinked as soon as it is created so that it disappears when the process ends, however
// it ends. Positional reads and writes, safe from several threads at once.
#pragma once
#include <cstdint>
#include <string>

namespace tessera::memory {

class ScratchFile {
 public:
  // Creates `bytes` bytes in dir; throws naming dir and the system's reason (purpose: for messages).
  ScratchFile(const std::string& dir, int64_t bytes, const std::string& purpose);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  void read(int64_t offset, void* dst, int64_t bytes) const;
  void write(int64_t offset, const void* src, int64_t bytes);
  int64_t size() const { return bytes_; }

 private:
  std::string dir_, purpose_;
  int fd_ = -1;
  int64_t bytes_ = 0;
};

// Throws unless a file can be created (and written) in dir: for validating options up front.
void check_scratch_dir(const std::string& dir, const std::string& option);

}  // namespace tessera::memory
