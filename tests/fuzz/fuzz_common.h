// Shared by the libFuzzer targets: a per-process scratch file that each input is written to, and
// the one rule of every target (only the documented error types may escape; anything else aborts).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tessera::fuzz {

// <TMPDIR or /tmp>/tessera_fuzz_<tag>_<pid><suffix>, the same path for every input of a process.
inline const std::string& scratch_path(const char* tag, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/tessera_fuzz_" + tag + "_" +
           std::to_string(getpid()) + suffix;
  }();
  return path;
}

// Writes the input bytes to `path` (truncating); aborts if the scratch file cannot be written.
inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::fprintf(stderr, "fuzz: cannot write scratch file %s\n", path.c_str());
    std::abort();
  }
}

// An exception type the target does not allow: report it and abort, so libFuzzer saves the input.
[[noreturn]] inline void unexpected(const char* what) {
  std::fprintf(stderr, "fuzz: unexpected exception escaped: %s\n", what);
  std::abort();
}

}  // namespace tessera::fuzz
