// AdamW: decay ranges and the fused update, on states in memory or streamed from a scratch file.
#include "optim/adamw.h"

#include <algorithm>

#include "core/allocator.h"
#include "memory/io_worker.h"
#include "memory/scratch_file.h"

namespace tessera::optim {

int64_t AdamWConfig::device_elements(int64_t shard) const {
  if (offload == "cpu") return 0;
  if (offload == "nvme" || host_fraction <= 0.0) return shard;
  const int64_t chunks = (shard + placement_chunk - 1) / placement_chunk;
  const auto host_chunks = static_cast<int64_t>(host_fraction * static_cast<double>(chunks) + 0.5);
  return std::max<int64_t>(0, shard - host_chunks * placement_chunk);
}

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
  TESSERA_CHECK(config.host_fraction >= 0.0 && config.host_fraction <= 1.0 && config.placement_chunk > 0,
                "--offload-optim-frac must be in [0, 1], got ", config.host_fraction);
  TESSERA_CHECK(config.host_fraction == 0.0 || device == Device::cpu,
                "--offload-optim-frac: not implemented for --device cuda yet");
  if (config.offload != "nvme") {
    const int64_t on_device = config.device_elements(shard.size()), on_host = shard.size() - on_device;
    exp_avg_ = Tensor::zeros({on_device}, DType::f32, device);
    exp_avg_sq_ = Tensor::zeros({on_device}, DType::f32, device);
    host_exp_avg_ = Tensor::host_tier_zeros({on_host});
    host_exp_avg_sq_ = Tensor::host_tier_zeros({on_host});
    // Each part's spans, relative to the part's start (the placement is fixed from here on).
    for_each_part(0, shard.size(), [&](const Tensor&, const Tensor&, int64_t at, int64_t n, int64_t) {
      std::vector<ops::AdamWSpan>& spans = part_spans_[at == 0 ? 0 : 1];
      for (const Range& r : ranges_) {
        const int64_t begin = std::max(r.begin, at), end = std::min(r.end, at + n);
        if (begin < end) spans.push_back({begin - at, end - at, r.decay});
      }
    });
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
  TESSERA_CHECK(!state_file_ && host_tier_elements() == 0,
                "AdamW::exp_avg: the states are offloaded (--offload cpu/nvme, --offload-optim-frac); use read_states");
  return exp_avg_;
}

Tensor& AdamW::exp_avg_sq() {
  TESSERA_CHECK(!state_file_ && host_tier_elements() == 0,
                "AdamW::exp_avg_sq: the states are offloaded (--offload cpu/nvme, --offload-optim-frac); use read_states");
  return exp_avg_sq_;
}

template <typename F>
void AdamW::for_each_part(int64_t begin, int64_t count, F f) const {
  const int64_t split = exp_avg_.numel(), end = begin + count;
  if (begin < split) f(exp_avg_, exp_avg_sq_, begin, std::min(end, split) - begin, begin);
  if (end > split) f(host_exp_avg_, host_exp_avg_sq_, std::max(begin, split), end - std::max(begin, split),
                     std::max(begin, split) - split);
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
  for_each_part(begin, count, [&](const Tensor& m, const Tensor& v, int64_t at, int64_t n, int64_t offset) {
    const size_t part = static_cast<size_t>(n) * sizeof(float);
    copy_bytes(exp_avg + (at - begin), Device::cpu, m.data<float>() + offset, m.device(), part);
    copy_bytes(exp_avg_sq + (at - begin), Device::cpu, v.data<float>() + offset, v.device(), part);
  });
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
  for_each_part(begin, count, [&](const Tensor& m, const Tensor& v, int64_t at, int64_t n, int64_t offset) {
    const size_t part = static_cast<size_t>(n) * sizeof(float);
    copy_bytes(m.data<float>() + offset, m.device(), exp_avg + (at - begin), Device::cpu, part);
    copy_bytes(v.data<float>() + offset, v.device(), exp_avg_sq + (at - begin), Device::cpu, part);
  });
}

void AdamW::step(float lr, float grad_scale, bool zero_grads, Tensor param_bits) {
  Tensor params = store_.flat_values().slice(shard_.begin, {shard_.size()});
  const Tensor grads = store_.flat_grads().slice(shard_.begin, {shard_.size()});
  if (param_bits.defined()) param_bits = param_bits.slice(shard_.begin, {shard_.size()});
  step(lr, grad_scale, params, grads, zero_grads, param_bits);
}

void AdamW::step(float lr, float grad_scale, Tensor& params, const Tensor& grads, bool zero_grads,
                 Tensor param_bits) {
  TESSERA_CHECK(params.numel() == shard_.size() && grads.numel() == shard_.size(),
                "AdamW::step: buffers of ", params.numel(), " and ", grads.numel(), " elements for a shard of ",
                shard_.size());
  TESSERA_CHECK(!param_bits.defined() || (param_bits.numel() == shard_.size() && !state_file_),
                "AdamW::step: param_bits must match the shard, and the states must not be in files");
  ++step_;
  ops::AdamWArgs args;
  args.lr = lr;
  args.beta1 = config_.beta1;
  args.beta2 = config_.beta2;
  args.eps = config_.eps;
  args.step = step_;
  args.grad_scale = grad_scale;
  args.zero_grad = zero_grads;
  args.weight_decay = config_.weight_decay;
  if (state_file_) return step_streamed(args, params, grads);
  // One pass per part where the states live (on a CPU build the host tier is host memory, as the
  // parameters are: the same kernel updates both), over the spans of every parameter in it.
  for_each_part(0, shard_.size(), [&](const Tensor& ms, const Tensor& vs, int64_t at, int64_t n, int64_t offset) {
    const Shape shape{n};
    Tensor p = params.slice(at, shape);
    Tensor g = grads.slice(at, shape);
    Tensor m = ms.slice(offset, shape);
    Tensor v = vs.slice(offset, shape);
    ops::adamw_spans(p, g, m, v, part_spans_[at == 0 ? 0 : 1], args,
                     param_bits.defined() ? param_bits.slice(at, shape) : Tensor());
  });
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
