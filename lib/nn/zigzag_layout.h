// The zigzag layout of a sequence over sp ranks (load-balanced causal ring attention, as the peers
// lay it out): the sequence is cut into 2 sp chunks of c = T / (2 sp) positions, and rank r holds
// chunk r (its "low" half) and chunk 2 sp - 1 - r (its "high" half). Under a causal mask every
// rank then attends to the same number of key positions at every ring step. A rank's local rows
// are half-major: [low half of every sequence of the micro-batch, then high half of every one],
// row (h x B + b) x c + i holding position chunk(r, h) x c + i of sequence b; so each half is a
// contiguous [B, c] block that the attention kernels take as it is. Pure functions, no
// communication: the model places its tokens with them and the ring masks its blocks with them.
#pragma once
#include <cstdint>

namespace tessera::nn {

// The chunk (of 2 sp) that rank r holds as half h (0: low, 1: high).
int64_t zigzag_chunk(int rank, int half, int sp);
// The rank holding chunk k of 2 sp, and as which half.
int zigzag_owner(int64_t chunk, int sp);
int zigzag_half(int64_t chunk, int sp);

// How a block of queries (one chunk) attends to a block of keys (one chunk) under a causal mask:
// every key (the keys' chunk comes earlier), the causal diagonal (the same chunk), or none (later).
enum class ChunkMask { full, causal, skipped };
ChunkMask chunk_mask(int64_t query_chunk, int64_t key_chunk);
const char* chunk_mask_name(ChunkMask mask);  // "full", "causal", "skipped"

// The ring step's mask: rank r's query half qh against the key/value half kh of rank `owner`'s
// block (owner = (r - s) mod sp at step s).
ChunkMask zigzag_block_mask(int rank, int query_half, int owner, int key_half, int sp);

// Where the tokens of a micro-batch of B sequences of T positions sit: the local row of (sequence
// b, position t) on this rank, or -1 when another rank holds t; and the position of local row n.
struct ZigzagPlace {
  int rank, sp;
  int64_t batch, seq;  // B, T (T divisible by 2 sp)
  int64_t chunk_length() const { return seq / (2 * sp); }
  int64_t local_row(int64_t b, int64_t t) const;
  int64_t position(int64_t row) const;
  int64_t sequence(int64_t row) const;  // b of local row n
};

}  // namespace tessera::nn
