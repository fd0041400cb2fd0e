// What tells two copies of an input file apart without reading it whole: its size and a digest of
// its first and last 64 KiB and of 32 blocks of 4 KiB spread over the rest. Ranks compare it to
// know they read the same data (files copied to each node, a path that names different files).
#pragma once
#include <string>

namespace tessera::io {

// "<bytes> bytes, digest <16 hex digits>"; "missing" when the file cannot be opened (the reader
// that opens it later names the problem).
std::string file_identity(const std::string& path);

}  // namespace tessera::io
