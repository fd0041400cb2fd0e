// ParamStore: flat buffers, views, and layout-independent Philox initialisation.
#include "nn/param_store.h"

#include <algorithm>

#include "core/philox.h"

namespace tessera::nn {
namespace {

// Calls fn(local_index, global_index) for every element of a shard that is not padding.
template <typename Fn>
void for_each_logical(const ParamSpec& s, Fn fn) {
  const Shape& g = s.global_shape;
  const Shape& l = s.local_shape;
  if (s.shard.dim < 0) {
    for (int64_t i = 0; i < g.numel(); ++i) fn(i, i);
    return;
  }
  // Split the index space into [outer, local_extent, inner] around the sharded dimension.
  const int d = s.shard.dim;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= g[i];
  for (int i = d + 1; i < g.rank(); ++i) inner *= g[i];
  const int64_t valid = std::max<int64_t>(0, std::min(l[d], g[d] - s.shard.start));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < valid; ++j)
      for (int64_t k = 0; k < inner; ++k)
        fn((o * l[d] + j) * inner + k, (o * g[d] + s.shard.start + j) * inner + k);
}

}  // namespace

int ParamStore::add(std::string name, Shape global_shape, Init init, bool weight_decay, Shard shard) {
  TESSERA_CHECK(!flat_values_.defined(), "parameter ", name, " added after the store was allocated");
  TESSERA_CHECK(find(name) < 0, "parameter ", name, " registered twice");
  ParamSpec s;
  s.name = std::move(name);
  s.local_shape = global_shape;
  if (shard.dim >= 0) {
    TESSERA_CHECK(shard.dim < global_shape.rank(), "shard dim of ", s.name, " out of range");
    std::vector<int64_t> dims = global_shape.dims();
    dims[shard.dim] = shard.local_extent;
    s.local_shape = Shape(dims);
  }
  s.global_shape = std::move(global_shape);
  s.shard = shard;
  s.init = init;
  s.weight_decay = weight_decay;
  s.offset = total_;
  total_ += s.local_shape.numel();
  specs_.push_back(std::move(s));
  return size() - 1;
}

int ParamStore::find(const std::string& name) const {
  for (int i = 0; i < size(); ++i)
    if (specs_[i].name == name) return i;
  return -1;
}

int64_t ParamStore::logical_numel() const {
  int64_t n = 0;
  for (int i = 0; i < size(); ++i) n += logical_local_shape(i).numel();
  return n;
}

Shape ParamStore::logical_local_shape(int id) const {
  const ParamSpec& s = specs_[id];
  if (s.shard.dim < 0) return s.global_shape;
  std::vector<int64_t> dims = s.local_shape.dims();
  dims[s.shard.dim] = std::max<int64_t>(0, std::min(dims[s.shard.dim], s.global_shape[s.shard.dim] - s.shard.start));
  return Shape(dims);
}

// Initial values of flat elements [begin, end) into out[0, end - begin) (zeroed by the caller).
void ParamStore::fill_init(float* out, int64_t begin, int64_t end, uint64_t seed) const {
  for (const ParamSpec& s : specs_) {
    if (s.offset >= end || s.offset + s.local_shape.numel() <= begin || s.init.kind == Init::zeros) continue;
    const uint64_t stream = stream_id(s.name);
    for_each_logical(s, [&](int64_t local, int64_t global) {
      const int64_t flat = s.offset + local;
      if (flat < begin || flat >= end) return;
      out[flat - begin] = s.init.kind == Init::ones
                              ? 1.0f
                              : s.init.std * philox_normal(seed, stream, static_cast<uint64_t>(global));
    });
  }
}

void ParamStore::allocate_shard(Device device, uint64_t seed, int64_t begin, int64_t end) {
  TESSERA_CHECK(0 <= begin && begin <= end && end <= total_, "allocate_shard: [", begin, ", ", end, ") outside ", total_);
  Tensor host = Tensor::zeros({end - begin});
  fill_init(host.data<float>(), begin, end, seed);
  shard_values_ = device == Device::cpu ? host : host.to(device);
  shard_grads_ = Tensor::zeros({end - begin}, DType::f32, device);
  sharded_ = true;
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
}

}  // namespace tessera::nn
