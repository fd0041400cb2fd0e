// AdamW: decay ranges and the fused update, on states in memory or streamed from a scratch file.
#include "optim/adamw.h"

#include <algorithm>

#include "core/allocator.h"
#include "memory/io_worker.h"
#include "memory/scratch_file.h"

namespace tessera::optim {

AdamW::AdamW(nn::ParamStore& store, const AdamWConfig& config) : AdamW(store, config, {0, store.numel()}) {}

AdamW::AdamW(nn::ParamStore& store, const AdamWConfig& config, parallel::Range shard)
    : store_(store), config_(config), shard_(shard) {
  // Decay ranges, clipped to the shard and made relative to its start.
  for (const nn::ParamSpec& s : store.specs()) {
    const int64_t begin = std::max(s.offset, shard.begin) - shard.begin;
    const int64_t end = std::min(s.offset + s.local_shape.numel(), shard.end) - shard.begin;
    if (begin >= end) continue;
    if (!ranges_.empty() && ranges_.back().decay == s.weight_decay && ranges_.back().end == begin)
      ranges_.back().end = end;
    else
      ranges_.push_back({begin, end, s.weight_decay});
  }
  const Device device = store.device();
  TESSERA_CHECK(config.offload == "none" || config.offload == "cpu" || config.offload == "nvme", "--offload ",
                config.offload, ": expected none, cpu or nvme");
  TESSERA_CHECK(config.offload == "none" || device == Device::cpu, "--offload ", config.offload,
                ": not implemented for --device cuda yet");
  if (config.offload != "nvme") {
    exp_avg_ = Tensor::zeros({shard.size()}, DType::f32, device);
    exp_avg_sq_ = Tensor::zeros({shard.size()}, DType::f32, device);
    return;
  }
  TESSERA_CHECK(config.offload_chunk > 0, "AdamW: offload_chunk must be positive");
  // A new file reads as zeros: the states' initial value.
  state_file_ = std::make_unique<memory::ScratchFile>(config.offload_dir, 2 * shard.size() * int64_t(sizeof(float)),
                                                      "optimizer-states");
  io_ = std::make_unique<memory::IoWorker>();
  const int64_t piece = std::min(config.offload_chunk, std::max<int64_t>(shard.size(), 1));
  for (Tensor& b : stream_buffers_) b = Tensor::empty({2 * piece}, DType::f32, Device::cpu);
}

AdamW::~AdamW() = default;

Tensor& AdamW::exp_avg() {
  TESSERA_CHECK(!state_file_, "AdamW::exp_avg: the states are in files (--offload nvme); use read_states");
  return exp_avg_;
}

Tensor& AdamW::exp_avg_sq() {
  TESSERA_CHECK(!state_file_, "AdamW::exp_avg_sq: the states are in files (--offload nvme); use read_states");
  return exp_avg_sq_;
}

void AdamW::read_states(int64_t begin, int64_t count, float* exp_avg, float* exp_avg_sq) const {
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= shard_.size(), "AdamW::read_states: [", begin, ", ",
                begin + count, ") outside the shard of ", shard_.size());
  const int64_t bytes = count * int64_t(sizeof(float));
  if (state_file_) {
    state_file_->read(begin * int64_t(sizeof(float)), exp_avg, bytes);
    state_file_->read((shard_.size() + begin) * int64_t(sizeof(float)), exp_avg_sq, bytes);
    return;
  }
  copy_bytes(exp_avg, Device::cpu, exp_avg_.data<float>() + begin, exp_avg_.device(), bytes);
  copy_bytes(exp_avg_sq, Device::cpu, exp_avg_sq_.data<float>() + begin, exp_avg_sq_.device(), bytes);
}

void AdamW::write_states(int64_t begin, int64_t count, const float* exp_avg, const float* exp_avg_sq) {
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= shard_.size(), "AdamW::write_states: [", begin, ", ",
                begin + count, ") outside the shard of ", shard_.size());
  const int64_t bytes = count * int64_t(sizeof(float));
  if (state_file_) {
    state_file_->write(begin * int64_t(sizeof(float)), exp_avg, bytes);
    state_file_->write((shard_.size() + begin) * int64_t(sizeof(float)), exp_avg_sq, bytes);
    return;
  }
  copy_bytes(exp_avg_.data<float>() + begin, exp_avg_.device(), exp_avg, Device::cpu, bytes);
  copy_bytes(exp_avg_sq_.data<float>() + begin, exp_avg_sq_.device(), exp_avg_sq, Device::cpu, bytes);
}

void AdamW::step(float lr, float grad_scale) {
  Tensor params = store_.flat_values().slice(shard_.begin, {shard_.size()});
  const Tensor grads = store_.flat_grads().slice(shard_.begin, {shard_.size()});
  step(lr, grad_scale, params, grads);
}

void AdamW::step(float lr, float grad_scale, Tensor& params, const Tensor& grads) {
  TESSERA_CHECK(params.numel() == shard_.size() && grads.numel() == shard_.size(),
                "AdamW::step: buffers of ", params.numel(), " and ", grads.numel(), " elements for a shard of ",
                shard_.size());
  ++step_;
  ops::AdamWArgs args;
  args.lr = lr;
  args.beta1 = config_.beta1;
  args.beta2 = config_.beta2;
  args.eps = config_.eps;
  args.step = step_;
  args.grad_scale = grad_scale;
  if (state_file_) return step_streamed(args, params, grads);
  for (const Range& r : ranges_) {
    args.weight_decay = r.decay ? config_.weight_decay : 0.0f;
    const Shape shape{r.end - r.begin};
    Tensor p = params.slice(r.begin, shape);
    Tensor g = grads.slice(r.begin, shape);
    Tensor m = exp_avg_.slice(r.begin, shape);
    Tensor v = exp_avg_sq_.slice(r.begin, shape);
    ops::adamw(p, g, m, v, args);
  }
}

// Pieces of at most one buffer, each: wait for its read, queue the next piece's read into the
// other buffer (behind the write that frees it: one worker, jobs in order), update, queue its
// write. The update of piece i overlaps the write of i - 1 and the read of i + 1.
void AdamW::step_streamed(ops::AdamWArgs args, Tensor& params, const Tensor& grads) {
  const int64_t chunk = stream_buffers_[0].numel() / 2;
  std::vector<Range> pieces;
  for (const Range& r : ranges_)
    for (int64_t b = r.begin; b < r.end; b += chunk) pieces.push_back({b, std::min(r.end, b + chunk), r.decay});
  if (pieces.empty()) return;
  auto queue_read = [&](size_t i) {
    const Range p = pieces[i];
    float* m = stream_buffers_[i % 2].data<float>();
    return io_->submit([this, p, m, chunk] { read_states(p.begin, p.end - p.begin, m, m + chunk); });
  };
  std::vector<int64_t> reads(pieces.size());
  reads[0] = queue_read(0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    io_->wait(reads[i]);
    if (i + 1 < pieces.size()) reads[i + 1] = queue_read(i + 1);
    const Range p = pieces[i];
    const Shape shape{p.end - p.begin};
    Tensor& buffer = stream_buffers_[i % 2];
    Tensor param = params.slice(p.begin, shape);
    Tensor grad = grads.slice(p.begin, shape);
    Tensor m = buffer.slice(0, shape);
    Tensor v = buffer.slice(chunk, shape);
    args.weight_decay = p.decay ? config_.weight_decay : 0.0f;
    ops::adamw(param, grad, m, v, args);
    const float* mp = m.data<float>();
    io_->submit([this, p, mp, chunk] { write_states(p.begin, p.end - p.begin, mp, mp + chunk); });
  }
  io_->wait_all();
}

}  // namespace tessera::optim
