// A file's size and a digest of sampled blocks.
#include "io/file_identity.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <vector>

#include "core/fnv1a.h"

namespace tessera::io {

std::string file_identity(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "missing";
  const int64_t size = in.tellg();
  constexpr int64_t kEnd = 64 << 10, kBlock = 4 << 10, kBlocks = 32;
  Fnv1a digest;
  std::vector<char> buffer(static_cast<size_t>(kEnd));
  auto take = [&](int64_t at, int64_t bytes) {
    if (at < 0 || bytes <= 0) return;
    in.seekg(at);
    in.read(buffer.data(), bytes);
    digest.add(buffer.data(), static_cast<size_t>(in.gcount()));
    in.clear();
  };
  take(0, std::min(size, kEnd));
  for (int64_t i = 0; i < kBlocks && size > 2 * kEnd; ++i) take(kEnd + (size - 2 * kEnd) * i / kBlocks, kBlock);
  if (size > kEnd) take(std::max(kEnd, size - kEnd), std::min(kEnd, size - kEnd));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, digest.value());
  return std::to_string(size) + " bytes, digest " + hex;
}

}  // namespace tessera::io
