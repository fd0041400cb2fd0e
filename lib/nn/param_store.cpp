// ParamStore: flat buffers, views, and layout-independent Philox initialisation.
#include "nn/param_store.h"

#include <omp.h>

#include <algorithm>

#include "core/philox.h"

namespace tessera::nn {
std::vector<Run> logical_runs(const ParamSpec& s, int64_t begin, int64_t end) {
  std::vector<Run> runs;
  if (begin >= end) return runs;
  if (s.shard.dim < 0) return {{begin, begin, end - begin}};
  const Shape& g = s.global_shape;
  const int d = s.shard.dim, d2 = s.shard.dim2;
  const int64_t g_extent = g[d] / s.shard.groups;
  const int64_t valid = std::max<int64_t>(0, std::min(s.shard.local_extent, g_extent - s.shard.start));
  int64_t mid = 1, inner = 1;  // [outer, extent, mid, extent2, inner] as in for_each_logical
  for (int i = d + 1; i < (d2 < 0 ? g.rank() : d2); ++i) mid *= g[i];
  for (int i = d2 + 1; d2 >= 0 && i < g.rank(); ++i) inner *= g[i];
  // A run: what is contiguous in both the logical local tensor and the global one.
  const int64_t run = d2 < 0 ? valid * mid : s.shard.local_extent2 * inner;
  for (int64_t r = begin / run; r * run < end; ++r) {
    const int64_t lo = std::max(begin, r * run), hi = std::min(end, (r + 1) * run);
    int64_t global = 0;
    if (d2 < 0) {
      global = (r * g_extent + s.shard.start) * mid;
    } else {
      const int64_t m = r % mid, j = (r / mid) % valid, o = r / mid / valid;
      global = (((o * g_extent + s.shard.start + j) * mid + m) * g[d2] + s.shard.start2) * inner;
    }
    runs.push_back({global + (lo - r * run), lo, hi - lo});
  }
  return runs;
}

int ParamStore::add(std::string name, Shape global_shape, Init init, bool weight_decay, Shard shard) {
  TESSERA_CHECK(!flat_values_.defined(), "parameter ", name, " added after the store was allocated");
  TESSERA_CHECK(find(name) < 0, "parameter ", name, " registered twice");
  ParamSpec s;
  s.name = std::move(name);
  s.local_shape = global_shape;
  if (shard.dim >= 0) {
    TESSERA_CHECK(shard.dim < global_shape.rank(), "shard dim of ", s.name, " out of range");
    TESSERA_CHECK(shard.groups >= 1 && global_shape[shard.dim] % shard.groups == 0, "parameter ", s.name,
                  ": dimension ", shard.dim, " of ", global_shape.str(), " does not split into ", shard.groups,
                  " blocks");
    const int64_t block = global_shape[shard.dim] / shard.groups;
    TESSERA_CHECK(shard.start + shard.local_extent <= block || (shard.dim == 0 && shard.groups == 1), "parameter ",
                  s.name, ": only a first-dimension shard may be padded");
    std::vector<int64_t> dims = global_shape.dims();
    dims[shard.dim] = shard.local_extent * shard.groups;
    if (shard.dim2 >= 0) {
      TESSERA_CHECK(shard.dim2 > shard.dim && shard.dim2 < global_shape.rank() && shard.start2 >= 0 &&
                        shard.start2 + shard.local_extent2 <= global_shape[shard.dim2],
                    "parameter ", s.name, ": second shard dimension out of range");
      dims[shard.dim2] = shard.local_extent2;
    }
    s.local_shape = Shape(dims);
  }
  s.global_shape = std::move(global_shape);
  s.shard = shard;
  s.init = init;
  s.weight_decay = weight_decay;
  s.offset = total_;
  total_ += s.local_shape.numel();
  ids_.emplace(s.name, static_cast<int>(specs_.size()));
  specs_.push_back(std::move(s));
  return size() - 1;
}

int ParamStore::find(const std::string& name) const {
  const auto it = ids_.find(name);
  return it == ids_.end() ? -1 : it->second;
}

int64_t ParamStore::logical_numel() const {
  int64_t n = 0;
  for (int i = 0; i < size(); ++i) n += logical_local_shape(i).numel();
  return n;
}

int64_t ParamStore::global_numel() const {
  int64_t n = 0;
  for (const ParamSpec& s : specs_) n += s.global_shape.numel();
  return n;
}

Shape ParamStore::logical_local_shape(int id) const {
  const ParamSpec& s = specs_[id];
  if (s.shard.dim < 0) return s.global_shape;
  std::vector<int64_t> dims = s.local_shape.dims();
  const int64_t block = s.global_shape[s.shard.dim] / s.shard.groups;
  dims[s.shard.dim] = s.shard.groups * std::max<int64_t>(0, std::min(s.shard.local_extent, block - s.shard.start));
  return Shape(dims);
}

// Initial values of flat elements [begin, end) into out[0, end - begin) (zeroed by the caller).
// Each element's value is a function of its global index alone (Philox), so large parameters are
// filled on the OpenMP threads with the same result (a GPT-2-medium took 28 s on one thread).
void ParamStore::fill_init(float* out, int64_t begin, int64_t end, uint64_t seed) const {
  constexpr int64_t kParallelElements = int64_t{1} << 16;
  for (const ParamSpec& s : specs_) {
    if (s.offset >= end || s.offset + s.local_shape.numel() <= begin || s.init.kind == Init::zeros) continue;
    const uint64_t stream = stream_id(s.name);
    const bool parallel = s.local_shape.numel() >= kParallelElements && !omp_in_parallel();
    for_each_logical(
        s,
        [&](int64_t local, int64_t global) {
          const int64_t flat = s.offset + local;
          if (flat < begin || flat >= end) return;
          out[flat - begin] = s.init.kind == Init::ones
                                  ? 1.0f
                                  : s.init.std * philox_normal(seed, stream, static_cast<uint64_t>(global));
        },
        parallel);
  }
}

void ParamStore::allocate_shard(Device device, uint64_t seed, int64_t begin, int64_t end, bool host_tier) {
  TESSERA_CHECK(0 <= begin && begin <= end && end <= total_, "allocate_shard: [", begin, ", ", end, ") outside ", total_);
  TESSERA_CHECK(!host_tier || device == Device::cpu, "--offload-params: not implemented for --device cuda yet");
  Tensor host = host_tier ? Tensor::host_tier_zeros({end - begin}) : Tensor::zeros({end - begin});
  fill_init(host.data<float>(), begin, end, seed);
  shard_values_ = device == Device::cpu ? host : host.to(device);
  shard_grads_ = host_tier ? Tensor::host_tier_zeros({end - begin}) : Tensor::zeros({end - begin}, DType::f32, device);
  sharded_ = true;
  shard_on_host_tier_ = host_tier;
  device_ = device;
  shard_begin_ = begin;
  values_.assign(specs_.size(), Tensor());
  grads_.assign(specs_.size(), Tensor());
}

void ParamStore::bind(int id, Tensor value, Tensor grad) {
  TESSERA_CHECK(value.shape() == specs_[id].local_shape, "bind ", specs_[id].name, ": shape ", value.shape().str());
  values_[id] = std::move(value);
  grads_[id] = std::move(grad);
}

void ParamStore::unbind(int id) {
  values_[id] = Tensor();
  grads_[id] = Tensor();
}

void ParamStore::allocate(Device device, uint64_t seed) {
  Tensor host = Tensor::zeros({total_});
  fill_init(host.data<float>(), 0, total_, seed);
  device_ = device;
  flat_values_ = device == Device::cpu ? host : host.to(device);
  flat_grads_ = Tensor::zeros({total_}, DType::f32, device);
  values_.clear();
  grads_.clear();
  for (const ParamSpec& s : specs_) {
    values_.push_back(flat_values_.slice(s.offset, s.local_shape));
    grads_.push_back(flat_grads_.slice(s.offset, s.local_shape));
  }
  values_written();
}

Tensor ParamStore::logical_copy(const Tensor& local, int id) const {
  const Tensor host = local.device() == Device::cpu ? local : local.to(Device::cpu);
  Tensor out = Tensor::empty(logical_local_shape(id));
  const float* src = host.data<float>();
  float* dst = out.data<float>();
  int64_t n = 0;  // the valid region, walked in row-major order, written densely
  for_each_logical(specs_[id], [&](int64_t l, int64_t) { dst[n++] = src[l]; });
  return out;
}

void ParamStore::assign_logical(Tensor& local, int id, const Tensor& logical) {
  TESSERA_CHECK(logical.shape() == logical_local_shape(id), "parameter ", specs_[id].name, ": shape ",
                logical.shape().str(), " does not match ", logical_local_shape(id).str());
  Tensor host = Tensor::zeros(local.shape());
  const float* src = logical.data<float>();
  float* dst = host.data<float>();
  int64_t n = 0;
  for_each_logical(specs_[id], [&](int64_t l, int64_t) { dst[l] = src[n++]; });
  local.copy_from(host);
  values_written();  // (local may be a gradient: then the copy is rounded again for nothing)
}

ops::Operand ParamStore::operand(int id) {
  Tensor& v = value(id);
  if (!keeps_bf16_copy()) return v;
  allocate_bf16_copy();
  if (copy_version_ != values_version_) {
    ops::cast(bf16_copy_, flat_values_.reshape({flat_values_.numel()}));
    copy_version_ = values_version_;
  }
  return {v, bf16_copy_.slice(specs_[id].offset, {specs_[id].local_shape.numel()})};
}

void ParamStore::allocate_bf16_copy() {
  const int64_t n = flat_values_.numel();
  if (bf16_copy_.defined() && bf16_copy_.numel() == n && bf16_copy_.device() == flat_values_.device()) return;
  bf16_copy_ = Tensor::empty({n}, DType::bf16, flat_values_.device());
  copy_version_ = kNoVersion;
}

Tensor ParamStore::bf16_copy_for_update() {
  if (!keeps_bf16_copy()) return Tensor();
  allocate_bf16_copy();
  return bf16_copy_;
}

void ParamStore::values_updated(bool copy_written) {
  ++values_version_;
  if (copy_written) {
    TESSERA_CHECK(bf16_copy_.defined(), "ParamStore::values_updated: no bf16 copy was written");
    copy_version_ = values_version_;
  }
}

}  // namespace tessera::nn
