// ParamStore: every parameter of a model (or of one pipeline stage) as a view into one flat value
// buffer and one flat gradient buffer, with its logical name, global shape and shard. Zeroing the
// gradients is one memset; optimizers, gradient sync and checkpoints work on ranges of the buffers.
// It also owns the precision its layers multiply the weights in, and the weights' bf16 copy.
#pragma once
#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "kernels/ops.h"

namespace tessera::nn {

// How a parameter is initialised: from Philox keyed by (seed, name, global element index).
struct Init {
  enum Kind { normal, zeros, ones } kind = normal;
  float std = 0.02f;
  static Init Normal(float std) { return {normal, std}; }
  static Init Zeros() { return {zeros, 0.0f}; }
  static Init Ones() { return {ones, 0.0f}; }
};

// Which slice of the global tensor this rank holds: along `dim`, global indices
// [start, start + local_extent). Elements at or past the global extent are padding: zero, and
// excluded from checkpoints and norms. dim = -1: the whole tensor.
// groups > 1: `dim` is `groups` equal blocks (the q, k and v rows of a fused QKV weight) and the
// slice is taken inside each block: this rank holds [g * extent / groups + start, + local_extent)
// for every block g, stored block after block.
// dim2 >= 0 (> dim): a second split, along dim2, of global indices [start2, start2 + local_extent2)
// (never padded, no blocks): the 2D/2.5D/3D layouts hold a block of a matrix.
// parts: how many ranks of the tensor-parallel group hold distinct slices (1: every rank holds the
// same tensor, or padding is the only difference); replica: which of the ranks holding this same
// slice this rank is (the first writes checkpoints).
struct Shard {
  int dim = -1;
  int64_t start = 0;
  int64_t local_extent = 0;
  int64_t groups = 1;
  int parts = 1;
  int dim2 = -1;
  int64_t start2 = 0;
  int64_t local_extent2 = 0;
  int replica = 0;
  bool split() const { return parts > 1; }
};

// Calls fn(local_index, global_index) for every element of a parameter's local tensor that is not
// padding, in local (row-major) order; with parallel = true, over the OpenMP threads instead (fn
// must then be safe to call at once for distinct elements, and the order is unspecified).
struct ParamSpec;
template <typename Fn>
void for_each_logical(const ParamSpec& s, Fn fn, bool parallel = false);

// Which tensor-parallel ranks' gradients of a parameter add up to its gradient (summed once per
// step, after the data-parallel reduction):
//   complete: this rank's is whole;
//   rows: the ranks holding the same residual-stream features for other token rows (layer norms
//     under split_gather: the tp group; the grid layouts' norms, positions and biases of the
//     layers writing the stream);
//   branch_rows: the same for the features inside an attention or MLP branch (3D's biases of the
//     layers writing a branch; the same ranks as rows under 2D and 2.5D);
//   replicas: the ranks holding copies of the same weight block (2.5D's layers, 3D's token table).
enum class PartialGrad : int8_t { complete, rows, branch_rows, replicas };

struct ParamSpec {
  std::string name;        // logical name, e.g. "blocks.3.attn.qkv.weight"
  Shape global_shape;      // logical shape of the whole parameter
  Shape local_shape;       // what this rank stores (global_shape unless sharded or padded)
  Shard shard;
  Init init;
  bool weight_decay = true;
  PartialGrad partial = PartialGrad::complete;
  // A mixture-of-experts expert's tensor: split over the expert-parallel group along its first
  // (expert) dimension, replicated over tp, and its gradient is complete over the ep group. Every
  // other parameter's gradient under expert parallelism covers this ep rank's tokens only.
  bool expert = false;
  // Every op that reads it under bf16 reads bf16 values: the store's bf16 copy, or its own
  // rounding (a linear layer's weight, a GEMM operand; an unsplit token table, whose lookup reads
  // the copy and whose tied head is a GEMM). Mixed precision need not round its held values in
  // place then (optim/mixed_precision.h).
  bool rounded_on_read = false;
  int64_t offset = 0;      // first element in the flat buffers
};

// Elements [begin, end) of a parameter's logical local tensor (this rank's slice, padding
// excluded, row-major) as contiguous runs of the global tensor's row-major flattening, in order:
// one run when the tensor is whole or sharded along its first dimension, one per outer index
// otherwise (one per row of the block under a second split). What checkpoints read and write.
struct Run {
  int64_t global_begin, local_begin, length;
};
std::vector<Run> logical_runs(const ParamSpec& s, int64_t begin, int64_t end);

template <typename Fn>
void for_each_logical(const ParamSpec& s, Fn fn, bool parallel) {
  const Shape& g = s.global_shape;
  const Shape& l = s.local_shape;
  if (s.shard.dim < 0) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < g.numel(); ++i) fn(i, i);
    return;
  }
  // The index space as [outer, extent, mid, extent2, inner] around the split dimensions (dim's
  // blocks folded into outer; without dim2: extent2 = 1 and inner = 1).
  const int d = s.shard.dim, d2 = s.shard.dim2;
  const int64_t groups = s.shard.groups, g_extent = g[d] / groups, l_extent = l[d] / groups;
  const int64_t g2 = d2 < 0 ? 1 : g[d2], l2 = d2 < 0 ? 1 : l[d2], start2 = d2 < 0 ? 0 : s.shard.start2;
  int64_t outer = groups, mid = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= g[i];
  for (int i = d + 1; i < (d2 < 0 ? g.rank() : d2); ++i) mid *= g[i];
  for (int i = d2 + 1; d2 >= 0 && i < g.rank(); ++i) inner *= g[i];
  const int64_t valid = std::max<int64_t>(0, std::min(l_extent, g_extent - s.shard.start));
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < valid; ++j)
      for (int64_t m = 0; m < mid; ++m)
        for (int64_t j2 = 0; j2 < l2; ++j2)
          for (int64_t k = 0; k < inner; ++k)
            fn((((o * l_extent + j) * mid + m) * l2 + j2) * inner + k,
               (((o * g_extent + s.shard.start + j) * mid + m) * g2 + start2 + j2) * inner + k);
}

class ParamStore {
 public:
  // Registers a parameter; returns its id. Views are valid after allocate().
  int add(std::string name, Shape global_shape, Init init, bool weight_decay, Shard shard = {});
  void set_partial(int id, PartialGrad partial) { specs_[id].partial = partial; }
  void set_expert(int id) { specs_[id].expert = true; }
  void set_rounded_on_read(int id) { specs_[id].rounded_on_read = true; }
  // Allocates the flat buffers on `device` and fills values from Philox by `seed`; grads zeroed.
  void allocate(Device device, uint64_t seed);
  // ZeRO-3: only elements [begin, end) of the flat order are resident (shard_values/shard_grads,
  // initialised with exactly the values allocate() would put there); a parameter's views exist
  // only while bind() points them into a gathered buffer. host_tier: the shard's values and
  // gradients live on the host tier (core/allocator.h: ZeRO-Infinity's parameter offload; the
  // gathered units are the device's).
  void allocate_shard(Device device, uint64_t seed, int64_t begin, int64_t end, bool host_tier = false);
  bool sharded() const { return sharded_; }
  bool shard_on_host_tier() const { return shard_on_host_tier_; }
  Device device() const { return device_; }
  int64_t shard_begin() const { return shard_begin_; }
  Tensor& shard_values() { return shard_values_; }
  Tensor& shard_grads() { return shard_grads_; }
  void bind(int id, Tensor value, Tensor grad);  // grad may be undefined (forward only)
  void unbind(int id);

  int size() const { return static_cast<int>(specs_.size()); }
  const ParamSpec& spec(int id) const { return specs_[id]; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int find(const std::string& name) const;  // id, or -1
  // The parameter's local tensor and gradient (under ZeRO-3 only while bound: a use outside a
  // gather is an error naming the parameter).
  Tensor& value(int id) { return checked(values_[id], id, "value"); }
  Tensor& grad(int id) { return checked(grads_[id], id, "gradient"); }
  const Tensor& value(int id) const { return checked(values_[id], id, "value"); }
  const Tensor& grad(int id) const { return checked(grads_[id], id, "gradient"); }
  Tensor& flat_values() { return flat_values_; }
  Tensor& flat_grads() { return flat_grads_; }
  int64_t numel() const { return total_; }
  int64_t logical_numel() const;  // parameters this rank holds, padding excluded
  int64_t global_numel() const;   // parameters of the whole model (every tensor-parallel slice)
  void zero_grads() { (sharded_ ? shard_grads_ : flat_grads_).zero(); }

  // The logical (unpadded, this shard's) part of a parameter's local tensor, as a CPU copy, and
  // back: what checkpoints and tests see.
  Tensor logical_copy(const Tensor& local, int id) const;
  void assign_logical(Tensor& local, int id, const Tensor& logical);
  Shape logical_local_shape(int id) const;

  // ---- precision: how the layers multiply these weights, and the weights' bf16 copy ----------
  // Ownership rule: the store owns the bf16 copy of its values (one bf16 element per element of
  // the flat buffer), kept while matmul_inputs() is bf16 on an unsharded store (ZeRO-3's layers
  // multiply gathered units, which each GEMM rounds). Every write of the values bumps
  // values_version(): the optimizer's update (values_updated), a checkpoint load or assign_logical
  // (values_written). The copy records the version it was rounded from, and operand() rounds it
  // again first when the two differ: a stale copy is never read. Rounding values in place to bf16
  // (mixed precision's norms and biases for a step, then restored) leaves the copy valid: a value
  // and its rounding round to the same bits.
  void set_matmul_inputs(ops::MatmulInputs inputs) { matmul_inputs_ = inputs; }  // mixed precision's choice
  ops::MatmulInputs matmul_inputs() const { return matmul_inputs_; }
  // The parameter's value for a layer's products, with its bf16 copy when the store keeps one
  // (rounded again first if stale): the same numbers as the GEMM rounding the value itself.
  ops::Operand operand(int id);
  // The parameter's value for a lookup (the token table's), which reads what it is given: during a
  // mixed-precision step (rounded_for_step: its weights' held values rounded, those rounded on read
  // read through the copy) the operand with its copy, else the value alone (an evaluation reads
  // the fp32 master values).
  ops::Operand lookup_operand(int id) { return rounded_for_step_ ? operand(id) : ops::Operand(value(id)); }
  void set_rounded_for_step(bool rounded) { rounded_for_step_ = rounded; }  // optim::MixedPrecision's round trip
  uint64_t values_version() const { return values_version_; }
  void values_written() { ++values_version_; }  // the values changed: the copy is stale
  // The update: the bf16 copy (allocated if needed) for it to write as it writes every value
  // (ops::adamw_spans' param_bits), or undefined when the store keeps none; then values_updated.
  Tensor bf16_copy_for_update();
  // The update wrote the values, and with copy_written the copy's bits of every one of them too.
  void values_updated(bool copy_written);

 private:
  bool keeps_bf16_copy() const {
    return matmul_inputs_ == ops::MatmulInputs::bf16 && !sharded_ && flat_values_.defined();
  }
  void allocate_bf16_copy();  // when none of the flat buffer's size is held: made, marked stale
  template <typename T>
  T& checked(T& t, int id, const char* what) const {
    TESSERA_CHECK(t.defined(), "parameter ", specs_[id].name, ": ", what, " used while not gathered (ZeRO-3)");
    return t;
  }
  void fill_init(float* out, int64_t begin, int64_t end, uint64_t seed) const;

  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, int> ids_;  // name -> id: registering and finding stay O(1) per name
  std::vector<Tensor> values_, grads_;
  Tensor flat_values_, flat_grads_;
  bool sharded_ = false, shard_on_host_tier_ = false;
  Device device_ = Device::cpu;
  int64_t shard_begin_ = 0;
  Tensor shard_values_, shard_grads_;
  int64_t total_ = 0;
  ops::MatmulInputs matmul_inputs_ = ops::MatmulInputs::f32;
  static constexpr uint64_t kNoVersion = std::numeric_limits<uint64_t>::max();
  uint64_t values_version_ = 0;
  bool rounded_for_step_ = false;
  Tensor bf16_copy_;                     // the flat values rounded to bf16 (keeps_bf16_copy())
  uint64_t copy_version_ = kNoVersion;   // the values_version_ bf16_copy_ was rounded from
};

}  // namespace tessera::nn
