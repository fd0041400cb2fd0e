// AdamW over a range of a ParamStore's flat order (all of it, or a ZeRO shard): fp32 states
// (exp_avg, exp_avg_sq) laid out like that range; weight decay only on parameters registered with
// it (matrices and embeddings). Adjacent parameters with the same decay flag are updated as one
// range: a few fused passes over the flat buffers.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "nn/param_store.h"
#include "parallel/flat_shards.h"

namespace tessera::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
 public:
  // Updates the elements `shard` of the store's flat order (default: all of them).
  AdamW(nn::ParamStore& store, const AdamWConfig& config);
  AdamW(nn::ParamStore& store, const AdamWConfig& config, parallel::Range shard);
  // One update with learning rate lr of the store's own flat buffers (the shard's part of them).
  void step(float lr, float grad_scale = 1.0f);
  // The same on explicit buffers holding exactly the shard (ZeRO-2/3 keep shards apart).
  void step(float lr, float grad_scale, Tensor& params, const Tensor& grads);

  parallel::Range shard() const { return shard_; }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  Tensor& exp_avg() { return exp_avg_; }
  Tensor& exp_avg_sq() { return exp_avg_sq_; }
  const AdamWConfig& config() const { return config_; }

 private:
  struct Range {
    int64_t begin, end;
    bool decay;
  };
  nn::ParamStore& store_;
  AdamWConfig config_;
  parallel::Range shard_;
  std::vector<Range> ranges_;
  Tensor exp_avg_, exp_avg_sq_;
  int64_t step_ = 0;
};

}  // namespace tessera::optim
