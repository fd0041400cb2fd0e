// The pipeline bookkeeping of a block model: which blocks each of this stage's chunks holds, and
// the activations of every (chunk, micro-batch) in flight, made on first use and recycled by
// release(). Generic over the model's activation set: Gpt and Vit use it.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "core/error.h"
#include "models/model_layout.h"

namespace tessera::models {

// Consecutive blocks [first_block, end_block) of the model (block_base: the first one's index
// among this stage's blocks), with the embedding before them (first virtual stage) or the head
// after them (last virtual stage).
struct ModelChunk {
  int64_t first_block = 0, end_block = 0;
  size_t block_base = 0;
  bool embedding = false, head = false;
  int64_t blocks() const { return end_block - first_block; }
};

// This stage's chunks in chunk order (chunk c is virtual stage c x stages + stage).
inline std::vector<ModelChunk> model_chunks(int64_t layers, const PipelinePlacement& pipe) {
  TESSERA_CHECK(pipe.stages >= 1 && pipe.stage >= 0 && pipe.stage < pipe.stages && pipe.chunks >= 1,
                "pipeline placement: stage ", pipe.stage, " of ", pipe.stages, " with ", pipe.chunks, " chunks");
  std::vector<ModelChunk> chunks;
  size_t base = 0;
  for (int c = 0; c < pipe.chunks; ++c) {
    const int v = pipe.virtual_stage(c);
    const auto [first, end] = stage_blocks(layers, pipe.virtual_stages(), v, pipe.stage_layers);
    chunks.push_back({first, end, base, v == 0, v == pipe.virtual_stages() - 1});
    base += static_cast<size_t>(end - first);
  }
  return chunks;
}

// Per chunk, one Activations per micro-batch in flight; as many exist as the schedule's peak.
template <class Activations>
class ActivationSlots {
 public:
  using Make = std::function<std::unique_ptr<Activations>(int chunk)>;
  ActivationSlots() = default;
  ActivationSlots(size_t chunks, Make make) : chunks_(chunks), make_(std::move(make)) {}

  Activations& at(int chunk, int micro) {
    PerChunk& s = chunks_.at(static_cast<size_t>(chunk));
    if (auto it = s.by_micro.find(micro); it != s.by_micro.end()) return *it->second;
    if (s.free.empty()) {
      s.all.push_back(make_(chunk));
      s.free.push_back(s.all.back().get());
    }
    Activations* a = s.free.back();
    s.free.pop_back();
    s.by_micro.emplace(micro, a);
    return *a;
  }

  void release(int chunk, int micro) {
    PerChunk& s = chunks_.at(static_cast<size_t>(chunk));
    auto it = s.by_micro.find(micro);
    TESSERA_CHECK(it != s.by_micro.end(), "release: micro-batch ", micro, " of chunk ", chunk, " holds nothing");
    s.free.push_back(it->second);
    s.by_micro.erase(it);
  }

 private:
  struct PerChunk {
    std::vector<std::unique_ptr<Activations>> all;
    std::vector<Activations*> free;
    std::map<int, Activations*> by_micro;
  };
  std::vector<PerChunk> chunks_;
  Make make_;
};

}  // namespace tessera::models
