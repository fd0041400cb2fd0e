// AdamW over a range of a ParamStore's flat order (all of it, or a ZeRO shard): fp32 states
// (exp_avg, exp_avg_sq) laid out like that range; weight decay only on parameters registered with
// it (matrices and embeddings), kept as ranges of adjacent parameters with the same decay flag. The
// states live on the compute device, on the host tier (all of them under offload cpu, a share of
// their chunks under host_fraction: the update runs on each part where it lives;
// core/allocator.h) or in a scratch file under offload_dir (nvme), streamed through two buffers
// per step. A step is one fused pass per part over all its ranges (ops::adamw_spans), or under
// nvme one per streamed piece and range.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "nn/param_store.h"
#include "parallel/flat_shards.h"

namespace tessera::memory {
class IoWorker;
class ScratchFile;
}  // namespace tessera::memory

namespace tessera::optim {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  // Where exp_avg and exp_avg_sq live: "none" (the compute device, but host_fraction of them on
  // the host tier), "cpu" (all on the host tier), or "nvme": a scratch file in offload_dir
  // (deleted at exit), streamed in pieces of offload_chunk elements through two host buffers,
  // reads and writes overlapping the update.
  std::string offload = "none";
  std::string offload_dir;
  int64_t offload_chunk = int64_t{1} << 20;  // 4 MiB of each state per buffer
  // Static placement: the states of the shard cut into chunks of placement_chunk elements; the
  // last round(host_fraction x chunks) chunks live on the host tier (offload "cpu": all).
  double host_fraction = 0.0;
  int64_t placement_chunk = int64_t{1} << 20;
  // The shard's elements whose states stay on the compute device.
  int64_t device_elements(int64_t shard) const;
};

class AdamW {
 public:
  // Updates the elements `shard` of the store's flat order (default: all of them).
  AdamW(nn::ParamStore& store, const AdamWConfig& config);
  AdamW(nn::ParamStore& store, const AdamWConfig& config, parallel::Range shard);
  ~AdamW();
  // One update with learning rate lr of the store's own flat buffers (the shard's part of them);
  // zero_grads: the gradients are zeroed as the update reads them (ops::AdamWArgs::zero_grad);
  // param_bits (bf16, one per element of the store's flat order; optional, not with the states in
  // files) receives the updated values' bf16 bits.
  void step(float lr, float grad_scale = 1.0f, bool zero_grads = false, Tensor param_bits = Tensor());
  // The same on explicit buffers holding exactly the shard (ZeRO-2/3 keep shards apart); param_bits
  // as params.
  void step(float lr, float grad_scale, Tensor& params, const Tensor& grads, bool zero_grads = false,
            Tensor param_bits = Tensor());

  parallel::Range shard() const { return shard_; }
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  // The states, all on the compute device (otherwise use read_states / write_states).
  Tensor& exp_avg();
  Tensor& exp_avg_sq();
  bool states_in_files() const { return state_file_ != nullptr; }
  int64_t host_tier_elements() const { return host_exp_avg_.numel(); }  // per state
  // Elements [begin, begin + count) of the shard's states to or from host memory, wherever they live.
  void read_states(int64_t begin, int64_t count, float* exp_avg, float* exp_avg_sq) const;
  void write_states(int64_t begin, int64_t count, const float* exp_avg, const float* exp_avg_sq);
  const AdamWConfig& config() const { return config_; }

 private:
  struct Range {
    int64_t begin, end;
    bool decay;
  };
  // The update of ranges_ with the states streamed from and to the scratch file.
  void step_streamed(ops::AdamWArgs args, Tensor& params, const Tensor& grads);

  nn::ParamStore& store_;
  AdamWConfig config_;
  parallel::Range shard_;
  std::vector<Range> ranges_;
  std::vector<ops::AdamWSpan> part_spans_[2];  // ranges_ within the device part and the host tier
  // Calls f(m, v, at, n, offset): the n states from element `at` of [begin, begin + count) are
  // m[offset ...] and v[offset ...] (the device part, then the host part).
  template <typename F>
  void for_each_part(int64_t begin, int64_t count, F f) const;

  Tensor exp_avg_, exp_avg_sq_;                      // in memory: the device part of the states
  Tensor host_exp_avg_, host_exp_avg_sq_;            // the rest, on the host tier
  std::unique_ptr<memory::ScratchFile> state_file_;  // nvme: [exp_avg | exp_avg_sq] of the shard
  Tensor stream_buffers_[2];                         // nvme: each [exp_avg piece | exp_avg_sq piece]
  std::unique_ptr<memory::IoWorker> io_;             // last: destroyed first, its jobs use the above
  int64_t step_ = 0;
};

}  // namespace tessera::optim
