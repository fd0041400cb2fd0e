// KvCache: the keys and values of every sequence slot, allocated once from the largest batch and
// sequence length. Per layer, slot and kv head a block [max_len, 2 x head_dim]: each position's
// key (after the rotary positions, for Llama) then its value, the layout the attention kernel
// reads as its key/value block. A slot's length is how many positions it holds.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::infer {

class KvCache {
 public:
  KvCache(int64_t layers, int64_t slots, int64_t max_len, int64_t kv_heads, int64_t head_dim);

  // What KvCache(...) allocates, in bytes (the start-up report, and a plan before allocating).
  static int64_t bytes_for(int64_t layers, int64_t slots, int64_t max_len, int64_t kv_heads, int64_t head_dim);
  int64_t bytes() const { return bytes_for(layers_, slots_, max_len_, kv_heads_, head_dim_); }

  int64_t slots() const { return slots_; }
  int64_t max_len() const { return max_len_; }
  // Positions [first, first + count) of a (layer, slot, kv head) block: a view [1, count, 2 x head_dim].
  Tensor block(int64_t layer, int64_t slot, int64_t kv_head, int64_t first, int64_t count) const;

  int64_t length(int64_t slot) const { return length_[static_cast<size_t>(slot)]; }
  void set_length(int64_t slot, int64_t length);  // checked against max_len
  void clear(int64_t slot) { set_length(slot, 0); }

 private:
  int64_t layers_, slots_, max_len_, kv_heads_, head_dim_;
  Tensor data_;  // [layers, slots, kv_heads, max_len, 2 x head_dim]
  std::vector<int64_t> length_;
};

}  // namespace tessera::infer
