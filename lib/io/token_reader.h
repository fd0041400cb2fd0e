// TokenReader: one 1-D integer token dataset (uint16, uint32 or int32; uint8 for a loss mask; int64,
// int32 or uint32 for document offsets) of an HDF5 file, read by element range. HDF5 (built without thread safety here) is asked once, on the opening thread,
// where the dataset's bytes lie; reads are then pread calls (plus zlib for deflated chunks) that any
// thread may make, e.g. a loader's prefetch thread while the trainer writes a checkpoint.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/hdf5_file.h"

namespace tessera::io {

class TokenReader {
 public:
  // Locates `dataset` of `file` (must be 1-D, little-endian u16, u32, i32 or i64 (offsets only) or
  // u8, contiguous, compact or chunked with at most the shuffle, deflate and fletcher32 filters).
  // Reads no token.
  TokenReader(const H5File& file, const std::string& dataset, int64_t vocab_size);
  TokenReader(const TokenReader&) = delete;
  TokenReader& operator=(const TokenReader&) = delete;
  ~TokenReader();

  int64_t size() const { return size_; }
  const std::string& type() const { return type_; }  // "u16", "u32", "i32", "u8" (a loss mask) or "i64"
  // Elements one read must decode whole (a filtered chunk's), or 0 when any range is read as it lies.
  int64_t decode_elements() const { return filters_.empty() ? 0 : chunk_elements_; }
  const std::string& path() const { return path_; }
  const std::string& dataset() const { return dataset_; }

  // Tokens [start, start + count) into out[count] as int32, each checked against the vocabulary:
  // a token outside [0, vocab_size) throws "<file>: <dataset>[<index>] = <v> is outside ...".
  // Thread-safe.
  void read(int64_t start, int64_t count, int32_t* out) const;
  // A uint8 dataset (a loss mask, vocab_size 2): values [start, start + count), each checked to lie
  // in [0, vocab_size). Thread-safe.
  void read(int64_t start, int64_t count, uint8_t* out) const;
  // Document offsets (i64, i32 or u32): values [start, start + count) widened to int64, unchecked
  // (DocumentIndex checks their order). Thread-safe.
  void read_offsets(int64_t start, int64_t count, int64_t* out) const;

  // What reads cost so far: pread calls and bytes read from the file (tests: open reads nothing).
  int64_t reads() const { return reads_.load(); }
  int64_t bytes_read() const { return bytes_.load(); }

 private:
  struct Chunk {
    int64_t addr = -1, bytes = 0;
    unsigned filter_mask = 0;
  };
  void pread_exact(int64_t addr, int64_t bytes, void* out) const;
  // Raw element bytes [start, start + count) into out (element size es_).
  void read_raw(int64_t start, int64_t count, char* out) const;
  // Chunk c's elements, unfiltered, into a buffer of chunk_elements_ * es_ bytes.
  void load_chunk(int64_t c, std::vector<char>& out) const;

  std::string path_, dataset_, type_;
  int64_t size_ = 0, vocab_ = 0;
  int es_ = 0;  // bytes per element
  int fd_ = -1;
  int64_t contiguous_addr_ = -1;   // contiguous layout
  std::vector<char> compact_;      // compact layout: the bytes live in the object header
  int64_t chunk_elements_ = 0;     // chunked layout
  std::vector<Chunk> chunks_;
  std::vector<int> filters_;       // pipeline order (H5Z ids)
  // The last chunk decoded (filtered chunks): reused while windows fall in it.
  mutable std::mutex cache_mutex_;
  mutable int64_t cached_chunk_ = -1;
  mutable std::vector<char> cache_;
  mutable std::atomic<int64_t> reads_{0}, bytes_{0};
};

}  // namespace tessera::io
