// AdamW over a ParamStore's flat buffers: fp32 states (exp_avg, exp_avg_sq) laid out like the
// parameters; weight decay only on parameters registered with it (matrices and embeddings).
// Adjacent parameters with the same decay flag are updated as one range: a few fused passes.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "nn/param_store.h"

namespace tessera::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
 public:
  AdamW(nn::ParamStore& store, const AdamWConfig& config);
  // One update with learning rate lr; gradients are multiplied by grad_scale first.
  void step(float lr, float grad_scale = 1.0f);

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
  std::vector<Range> ranges_;
  Tensor exp_avg_, exp_avg_sq_;
  int64_t step_ = 0;
};

}  // namespace tessera::optim
