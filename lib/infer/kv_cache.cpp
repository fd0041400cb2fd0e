// KvCache: one allocation, sliced by (layer, slot, kv head).
#include "infer/kv_cache.h"

#include "core/error.h"

namespace tessera::infer {

KvCache::KvCache(int64_t layers, int64_t slots, int64_t max_len, int64_t kv_heads, int64_t head_dim)
    : layers_(layers), slots_(slots), max_len_(max_len), kv_heads_(kv_heads), head_dim_(head_dim),
      length_(static_cast<size_t>(slots > 0 ? slots : 0), 0) {
  TESSERA_CHECK(layers >= 1 && slots >= 1 && max_len >= 1 && kv_heads >= 1 && head_dim >= 1,
                "KvCache: every size must be at least 1 (layers ", layers, ", slots ", slots, ", max_len ", max_len,
                ", kv heads ", kv_heads, ", head size ", head_dim, ")");
  data_ = Tensor::empty({layers, slots, kv_heads, max_len, 2 * head_dim});
}

int64_t KvCache::bytes_for(int64_t layers, int64_t slots, int64_t max_len, int64_t kv_heads, int64_t head_dim) {
  return 2 * layers * slots * max_len * kv_heads * head_dim * static_cast<int64_t>(sizeof(float));
}

Tensor KvCache::block(int64_t layer, int64_t slot, int64_t kv_head, int64_t first, int64_t count) const {
  TESSERA_CHECK(layer >= 0 && layer < layers_ && slot >= 0 && slot < slots_ && kv_head >= 0 && kv_head < kv_heads_,
                "KvCache: no block (layer ", layer, ", slot ", slot, ", kv head ", kv_head, ")");
  TESSERA_CHECK(first >= 0 && count >= 0 && first + count <= max_len_, "KvCache: positions [", first, ", ",
                first + count, ") outside the cache's ", max_len_);
  const int64_t width = 2 * head_dim_;
  return data_.slice((((layer * slots_ + slot) * kv_heads_ + kv_head) * max_len_ + first) * width,
                     {1, count, width});
}

void KvCache::set_length(int64_t slot, int64_t length) {
  TESSERA_CHECK(slot >= 0 && slot < slots_, "KvCache: slot ", slot, " outside [0, ", slots_, ")");
  TESSERA_CHECK(length >= 0 && length <= max_len_, "KvCache: length ", length, " outside [0, ", max_len_, "]");
  length_[static_cast<size_t>(slot)] = length;
}

}  // namespace tessera::infer
