// The zigzag layout's chunk map and block masks (zigzag_layout.h).
#include "nn/zigzag_layout.h"

namespace tessera::nn {

int64_t zigzag_chunk(int rank, int half, int sp) { return half == 0 ? rank : 2 * sp - 1 - rank; }

int zigzag_owner(int64_t chunk, int sp) { return static_cast<int>(chunk < sp ? chunk : 2 * sp - 1 - chunk); }

int zigzag_half(int64_t chunk, int sp) { return chunk < sp ? 0 : 1; }

ChunkMask chunk_mask(int64_t query_chunk, int64_t key_chunk) {
  if (key_chunk < query_chunk) return ChunkMask::full;
  return key_chunk == query_chunk ? ChunkMask::causal : ChunkMask::skipped;
}

const char* chunk_mask_name(ChunkMask mask) {
  switch (mask) {
    case ChunkMask::full: return "full";
    case ChunkMask::causal: return "causal";
    case ChunkMask::skipped: return "skipped";
  }
  return "?";
}

ChunkMask zigzag_block_mask(int rank, int query_half, int owner, int key_half, int sp) {
  return chunk_mask(zigzag_chunk(rank, query_half, sp), zigzag_chunk(owner, key_half, sp));
}

int64_t ZigzagPlace::local_row(int64_t b, int64_t t) const {
  const int64_t c = chunk_length(), chunk = t / c;
  if (zigzag_owner(chunk, sp) != rank) return -1;
  return (zigzag_half(chunk, sp) * batch + b) * c + t % c;
}

int64_t ZigzagPlace::position(int64_t row) const {
  const int64_t c = chunk_length();
  return zigzag_chunk(rank, static_cast<int>(row / (batch * c)), sp) * c + row % c;
}

int64_t ZigzagPlace::sequence(int64_t row) const { return row / chunk_length() % batch; }

}  // namespace tessera::nn
