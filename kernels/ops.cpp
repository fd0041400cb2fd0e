// Dispatch of kernels/ops.h: shape, dtype and device checks, then the CPU kernel or its CUDA twin.
#include "kernels/ops.h"

#include <cstdlib>
#include <mutex>
#include <string_view>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/kernel_timing.h"
#ifdef TESSERA_HAVE_CUDA
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/op_timing.h"
#endif

namespace tessera::ops {
namespace {

// The dispatch, checked against the one list of kernels (kernels/op_list.h) at compile time, in
// every build: TESSERA_DISPATCH(device, fn, ...) calls fn on the CPU or its CUDA twin by the device
// of the first tensor, and fn must be declared cpu_and_cuda; TESSERA_CUDA_ONLY(fn, ...) calls the
// CUDA kernel fn (a variant with no CPU namesake, such as a tensor-core kernel), declared with a
// CUDA kernel; TESSERA_CPU_ONLY(device, fn, ...) calls the CPU kernel fn and throws for a CUDA
// tensor, and fn must be declared cpu_only, so that an op given a CUDA twin in the list is also
// given its dispatch. Each kernel is timed under its name (on the device for CUDA).
// TESSERA_EXPECT_OP(fn, devices) is the same check where ops.cpp calls a kernel itself.
#define TESSERA_EXPECT_OP(fn, devices)                                                               \
  static_assert(::tessera::kernels::op_devices::fn == ::tessera::kernels::OpDevices::devices,          \
                #fn ": kernels/op_list.h does not declare it " #devices)
#define TESSERA_CPU_KERNEL(fn, ...)                                                                   \
  do {                                                                                                \
    const ::tessera::kernels::KernelTimer timer(::tessera::kernels::kernel_kind(#fn), #fn);           \
    ::tessera::kernels::cpu::fn(__VA_ARGS__);                                                         \
  } while (0)
#ifdef TESSERA_HAVE_CUDA
#define TESSERA_CUDA_KERNEL(fn, ...)                                                                  \
  do {                                                                                                \
    const ::tessera::kernels::cuda::OpTimer timer(::tessera::kernels::kernel_kind(#fn), #fn);        \
    ::tessera::kernels::cuda::fn(__VA_ARGS__);                                                        \
  } while (0)
#else
#define TESSERA_CUDA_KERNEL(fn, ...) TESSERA_CHECK(false, #fn ": a cuda tensor in a build without CUDA")
#endif
#define TESSERA_CUDA_ONLY(fn, ...)                                                                    \
  do {                                                                                                \
    static_assert(::tessera::kernels::on_cuda(::tessera::kernels::op_devices::fn),                    \
                  #fn ": kernels/op_list.h declares no CUDA kernel of it");                           \
    TESSERA_CUDA_KERNEL(fn, __VA_ARGS__);                                                             \
  } while (0)
#define TESSERA_DISPATCH(device, fn, ...)                                                             \
  do {                                                                                                \
    TESSERA_EXPECT_OP(fn, cpu_and_cuda);                                                              \
    if ((device) == Device::cuda) {                                                                   \
      TESSERA_CUDA_KERNEL(fn, __VA_ARGS__);                                                           \
    } else {                                                                                          \
      TESSERA_CPU_KERNEL(fn, __VA_ARGS__);                                                            \
    }                                                                                                 \
  } while (0)
#define TESSERA_CPU_ONLY(device, fn, ...)                                                        \
  do {                                                                                           \
    TESSERA_EXPECT_OP(fn, cpu_only);                                                             \
    TESSERA_CHECK((device) == Device::cpu, #fn ": no CUDA kernel yet (CPU tensors only)");       \
    TESSERA_CPU_KERNEL(fn, __VA_ARGS__);                                                         \
  } while (0)

int64_t last_dim(const Tensor& t) { return t.shape().rank() ? t.shape()[-1] : 1; }
int64_t rows_of(const Tensor& t) { return last_dim(t) ? t.numel() / last_dim(t) : 0; }

void same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Device d = (*ts.begin())->device();
  for (const Tensor* t : ts)
    if (t->defined()) TESSERA_CHECK(t->device() == d, op, ": tensors on different devices");
}

void expect(bool cond, const char* op, const char* what) { TESSERA_CHECK(cond, op, ": ", what); }

}  // namespace

Operand::Operand(const Tensor& v, const Tensor& bits) : values(v) {
  TESSERA_CHECK(v.dtype() == DType::f32 && bits.dtype() == DType::bf16 && bits.numel() >= v.numel() &&
                    bits.device() == v.device(),
                "Operand: a bf16 copy of at least ", v.numel(), " elements on the values' device expected, got ",
                dtype_name(bits.dtype()), " ", bits.shape().str());
  bf16 = bits.bits16();
}

#ifdef TESSERA_HAVE_CUDA
struct RoundedOperand::DeviceBits {
  explicit DeviceBits(int64_t count) : scratch(static_cast<size_t>(count) * sizeof(uint16_t)) {}
  kernels::cuda::Scratch scratch;
};
#else
struct RoundedOperand::DeviceBits {};
#endif

namespace {
// TESSERA_SHARED_BF16_OPERANDS=0 turns the sharing off: each GEMM rounds its operands again (the
// benchmark's A/B switch; the same numbers either way).
bool sharing_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("TESSERA_SHARED_BF16_OPERANDS");
    return !(v && std::string_view(v) == "0");
  }();
  return allowed;
}

// The CPU's memory for rounded operands: grow-only buffers lent to a RoundedOperand and given
// back when it ends, so a step's backward allocates nothing once the largest operand was seen.
// Memory only: what a GEMM computes never depends on it.
class HostBitsPool {
 public:
  std::vector<uint16_t> lend(int64_t count) {
    std::vector<uint16_t> buffer;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!spare_.empty()) {
        buffer = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
    return buffer;
  }
  void give_back(std::vector<uint16_t> buffer) {
    const std::lock_guard<std::mutex> lock(mutex_);
    spare_.push_back(std::move(buffer));
  }

 private:
  std::mutex mutex_;
  std::vector<std::vector<uint16_t>> spare_;
};
HostBitsPool& host_bits_pool() {
  static HostBitsPool pool;
  return pool;
}
}  // namespace

// The rounding is timed as a GEMM's ("gemm_operand_bf16"), as gemm_bf16 times its own.
RoundedOperand::RoundedOperand(const Tensor& x, MatmulInputs inputs) : operand_(x) {
  TESSERA_EXPECT_OP(f32_to_bf16, cpu_and_cuda);
  if (inputs != MatmulInputs::bf16 || !sharing_allowed() || !x.defined() || x.numel() == 0) return;
  TESSERA_CHECK(x.dtype() == DType::f32, "RoundedOperand: an f32 tensor expected, got ", dtype_name(x.dtype()));
  const int64_t n = x.numel();
  if (x.device() == Device::cuda) {
#ifdef TESSERA_HAVE_CUDA
    device_bits_ = std::make_unique<DeviceBits>(n);
    uint16_t* bits = device_bits_->scratch.as<uint16_t>();
    const kernels::cuda::OpTimer timer(kernels::KernelKind::gemm, "gemm_operand_bf16");
    kernels::cuda::f32_to_bf16(bits, x.data<float>(), n);
    operand_.bf16 = bits;
#else
    TESSERA_CHECK(false, "RoundedOperand: a cuda tensor in a build without CUDA");
#endif
  } else {
    host_bits_ = host_bits_pool().lend(n);
    const kernels::KernelTimer timer(kernels::KernelKind::gemm, "gemm_operand_bf16");
    kernels::cpu::f32_to_bf16(host_bits_.data(), x.data<float>(), n);
    operand_.bf16 = host_bits_.data();
  }
}

RoundedOperand::~RoundedOperand() {
  if (!host_bits_.empty()) host_bits_pool().give_back(std::move(host_bits_));
}

void matmul(const Operand& a_operand, bool trans_a, const Operand& b_operand, bool trans_b, Tensor& c, float alpha,
            float beta, MatmulInputs inputs) {
  const Tensor& a = a_operand.values;
  const Tensor& b = b_operand.values;
  same_device("matmul", {&a, &b, &c});
  const int64_t m = trans_a ? last_dim(a) : rows_of(a), k = trans_a ? rows_of(a) : last_dim(a);
  const int64_t kb = trans_b ? last_dim(b) : rows_of(b), n = trans_b ? rows_of(b) : last_dim(b);
  TESSERA_CHECK(k == kb && rows_of(c) == m && last_dim(c) == n, "matmul: shapes ", a.shape().str(),
                trans_a ? "^T" : "", " @ ", b.shape().str(), trans_b ? "^T" : "", " -> ", c.shape().str(),
                " do not fit");
  if (inputs == MatmulInputs::bf16)
    TESSERA_DISPATCH(c.device(), gemm_bf16, trans_a, trans_b, m, n, k, alpha, a.data<float>(),
                     a_operand.bf16, b.data<float>(), b_operand.bf16, beta,
                     c.data<float>());
  else
    TESSERA_DISPATCH(c.device(), gemm, trans_a, trans_b, m, n, k, alpha, a.data<float>(), b.data<float>(),
                     beta, c.data<float>());
}

void linear_forward(Tensor& y, const Operand& x_operand, const Operand& w_operand, const Tensor& bias, Tensor* pre,
                    MatmulInputs inputs) {
  const Tensor& x = x_operand.values;
  const Tensor& w = w_operand.values;
  same_device("linear_forward", {&y, &x, &w, &bias});
  if (pre) same_device("linear_forward", {&y, pre});
  const int64_t m = rows_of(x), k = last_dim(x), n = rows_of(w);
  TESSERA_CHECK(last_dim(w) == k && bias.numel() == n && rows_of(y) == m && last_dim(y) == n &&
                    (!pre || pre->numel() == y.numel()),
                "linear_forward: shapes x ", x.shape().str(), ", w ", w.shape().str(), ", bias ", bias.shape().str(),
                " -> y ", y.shape().str(), " do not fit");
  const bool bf16 = inputs == MatmulInputs::bf16;
  TESSERA_DISPATCH(y.device(), gemm_bias, m, n, k, x.data<float>(), bf16 ? x_operand.bf16 : nullptr,
                   w.data<float>(), bf16 ? w_operand.bf16 : nullptr, bias.data<float>(), bf16,
                   pre ? pre->data<float>() : nullptr, y.data<float>());
}

void matmul_batched(int64_t batch, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                    float alpha, float beta, MatmulInputs inputs) {
  same_device("matmul_batched", {&a, &b, &c});
  expect(batch > 0 && a.numel() % batch == 0 && b.numel() % batch == 0 && c.numel() % batch == 0,
         "matmul_batched", "batch does not divide the tensors");
  const int64_t a_rows = rows_of(a) / batch, b_rows = rows_of(b) / batch;
  const int64_t m = trans_a ? last_dim(a) : a_rows, k = trans_a ? a_rows : last_dim(a);
  const int64_t kb = trans_b ? last_dim(b) : b_rows, n = trans_b ? b_rows : last_dim(b);
  TESSERA_CHECK(k == kb && rows_of(c) / batch == m && last_dim(c) == n, "matmul_batched: shapes ",
                a.shape().str(), " @ ", b.shape().str(), " -> ", c.shape().str(), " do not fit");
  if (inputs == MatmulInputs::bf16)
    TESSERA_DISPATCH(c.device(), gemm_batched_bf16, batch, trans_a, trans_b, m, n, k, alpha, a.data<float>(),
                     b.data<float>(), beta, c.data<float>());
  else
    TESSERA_DISPATCH(c.device(), gemm_batched, batch, trans_a, trans_b, m, n, k, alpha, a.data<float>(),
                     b.data<float>(), beta, c.data<float>());
}

void add(Tensor& out, const Tensor& a, const Tensor& b) {
  same_device("add", {&out, &a, &b});
  expect(out.numel() == a.numel() && a.numel() == b.numel(), "add", "sizes differ");
  TESSERA_DISPATCH(out.device(), add, out.data<float>(), a.data<float>(), b.data<float>(), out.numel());
}

void add_inplace(Tensor& acc, const Tensor& x) {
  same_device("add_inplace", {&acc, &x});
  expect(acc.numel() == x.numel(), "add_inplace", "sizes differ");
  TESSERA_DISPATCH(acc.device(), add_inplace, acc.data<float>(), x.data<float>(), acc.numel());
}

void scale_inplace(Tensor& x, float s) {
  TESSERA_DISPATCH(x.device(), scale_inplace, x.data<float>(), s, x.numel());
}

void broadcast_rows(Tensor& out, const Tensor& bias) {
  same_device("broadcast_rows", {&out, &bias});
  expect(bias.numel() == last_dim(out), "broadcast_rows", "bias size is not the last dimension");
  TESSERA_DISPATCH(out.device(), broadcast_rows, out.data<float>(), bias.data<float>(), rows_of(out), last_dim(out));
}

void bias_backward(Tensor& dbias, const Tensor& dout) {
  same_device("bias_backward", {&dbias, &dout});
  expect(dbias.numel() == last_dim(dout), "bias_backward", "bias size is not the last dimension");
  TESSERA_DISPATCH(dout.device(), bias_backward, dbias.data<float>(), dout.data<float>(), rows_of(dout),
                   last_dim(dout));
}

void gelu_forward(Tensor& out, const Tensor& inp) {
  same_device("gelu_forward", {&out, &inp});
  expect(out.numel() == inp.numel(), "gelu_forward", "sizes differ");
  TESSERA_DISPATCH(out.device(), gelu_forward, out.data<float>(), inp.data<float>(), out.numel());
}

void bias_gelu_forward(Tensor& out, Tensor& pre, const Tensor& bias) {
  same_device("bias_gelu_forward", {&out, &pre, &bias});
  expect(out.numel() == pre.numel() && bias.numel() == last_dim(pre), "bias_gelu_forward",
         "out and pre must have one size and bias pre's last dimension");
  TESSERA_DISPATCH(pre.device(), bias_gelu_forward, out.data<float>(), pre.data<float>(), bias.data<float>(),
                   rows_of(pre), last_dim(pre));
}

void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  same_device("gelu_backward", {&dinp, &inp, &dout});
  expect(dinp.numel() == inp.numel() && inp.numel() == dout.numel(), "gelu_backward", "sizes differ");
  TESSERA_DISPATCH(dinp.device(), gelu_backward, dinp.data<float>(), inp.data<float>(), dout.data<float>(),
                   dinp.numel());
}

double sum_squares(const Tensor& x) {
  TESSERA_EXPECT_OP(sum_squares, cpu_and_cuda);
#ifdef TESSERA_HAVE_CUDA
  if (x.device() == Device::cuda) {
    const kernels::cuda::OpTimer timer(kernels::kernel_kind("sum_squares"), "sum_squares");
    return kernels::cuda::sum_squares(x.data<float>(), x.numel());
  }
#endif
  TESSERA_CHECK(x.device() == Device::cpu, "sum_squares: a cuda tensor in a build without CUDA");
  const kernels::KernelTimer timer(kernels::kernel_kind("sum_squares"), "sum_squares");
  return kernels::cpu::sum_squares(x.data<float>(), x.numel());
}

double round_bf16_inplace_sum_squares(Tensor& values) {
  TESSERA_EXPECT_OP(round_bf16_inplace_sum_squares, cpu_and_cuda);
  expect(values.dtype() == DType::f32, "round_bf16_inplace_sum_squares", "values must be f32");
#ifdef TESSERA_HAVE_CUDA
  if (values.device() == Device::cuda) {
    const kernels::cuda::OpTimer timer(kernels::kernel_kind("round_bf16_sum_squares"), "round_bf16_sum_squares");
    return kernels::cuda::round_bf16_inplace_sum_squares(values.data<float>(), values.numel());
  }
#endif
  TESSERA_CHECK(values.device() == Device::cpu, "round_bf16_inplace_sum_squares: a cuda tensor in a build without CUDA");
  const kernels::KernelTimer timer(kernels::kernel_kind("round_bf16_sum_squares"), "round_bf16_sum_squares");
  return kernels::cpu::round_bf16_inplace_sum_squares(values.data<float>(), values.numel());
}

void cast(Tensor& out, const Tensor& inp) {
  same_device("cast", {&out, &inp});
  expect(out.numel() == inp.numel(), "cast", "sizes differ");
  const int64_t n = out.numel();
  if (out.dtype() == inp.dtype()) {
    out.copy_from(inp);
  } else if (inp.dtype() == DType::f32 && out.dtype() == DType::bf16) {
    TESSERA_DISPATCH(out.device(), f32_to_bf16, out.bits16(), inp.data<float>(), n);
  } else if (inp.dtype() == DType::bf16 && out.dtype() == DType::f32) {
    TESSERA_DISPATCH(out.device(), bf16_to_f32, out.data<float>(), inp.bits16(), n);
  } else if (inp.dtype() == DType::f32 && out.dtype() == DType::f16) {
    TESSERA_DISPATCH(out.device(), f32_to_f16, out.bits16(), inp.data<float>(), n);
  } else if (inp.dtype() == DType::f16 && out.dtype() == DType::f32) {
    TESSERA_DISPATCH(out.device(), f16_to_f32, out.data<float>(), inp.bits16(), n);
  } else {
    fail("cast: ", dtype_name(inp.dtype()), " to ", dtype_name(out.dtype()), " is not supported");
  }
}

void round_inplace(Tensor& values, DType storage, Tensor bits) {
  same_device("round_inplace", {&values, &bits});
  expect(values.dtype() == DType::f32, "round_inplace", "values must be f32");
  expect(!bits.defined() || (bits.dtype() == storage && bits.numel() >= values.numel()), "round_inplace",
         "bits must be of the storage type and hold every value");
  uint16_t* out = bits.defined() ? bits.bits16() : nullptr;
  if (storage == DType::bf16)
    TESSERA_DISPATCH(values.device(), round_bf16_inplace, values.data<float>(), out, values.numel());
  else if (storage == DType::f16)
    TESSERA_DISPATCH(values.device(), round_f16_inplace, values.data<float>(), out, values.numel());
  else
    fail("round_inplace: storage must be bf16 or f16, not ", dtype_name(storage));
}

void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps) {
  same_device("layernorm_forward", {&out, &mean, &rstd, &inp, &weight, &bias});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(out.numel() == inp.numel() && mean.numel() == rows && rstd.numel() == rows &&
             weight.numel() == cols && bias.numel() == cols,
         "layernorm_forward", "shapes do not fit");
  TESSERA_DISPATCH(out.device(), layernorm_forward, out.data<float>(), mean.data<float>(), rstd.data<float>(),
                   inp.data<float>(), weight.data<float>(), bias.data<float>(), rows, cols, eps);
}

void add_layernorm_forward(Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& a, const Tensor& b,
                           const Tensor& weight, const Tensor& bias, float eps) {
  TESSERA_EXPECT_OP(add_layernorm_forward, cuda_only);  // the CPU runs add then layernorm_forward
  same_device("add_layernorm_forward", {&sum, &out, &mean, &rstd, &a, &b, &weight, &bias});
  const int64_t rows = rows_of(a), cols = last_dim(a);
  expect(b.numel() == a.numel() && sum.numel() == a.numel() && out.numel() == a.numel() && mean.numel() == rows &&
             rstd.numel() == rows && weight.numel() == cols && bias.numel() == cols,
         "add_layernorm_forward", "shapes do not fit");
#ifdef TESSERA_HAVE_CUDA
  if (out.device() == Device::cuda) {
    const kernels::cuda::OpTimer timer(kernels::KernelKind::other, "add_layernorm_forward");
    kernels::cuda::add_layernorm_forward(sum.data<float>(), out.data<float>(), mean.data<float>(), rstd.data<float>(),
                                         a.data<float>(), b.data<float>(), weight.data<float>(), bias.data<float>(),
                                         rows, cols, eps);
    return;
  }
#endif
  // On the CPU the fused loop measured no faster (0.8-1.09x, by size): the two ops.
  add(sum, a, b);
  layernorm_forward(out, mean, rstd, sum, weight, bias, eps);
}

void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd) {
  same_device("layernorm_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == cols &&
             dbias.numel() == cols && mean.numel() == rows && rstd.numel() == rows,
         "layernorm_backward", "shapes do not fit");
  TESSERA_DISPATCH(dinp.device(), layernorm_backward, dinp.data<float>(), dweight.data<float>(),
                   dbias.data<float>(), dout.data<float>(), inp.data<float>(), weight.data<float>(),
                   mean.data<float>(), rstd.data<float>(), rows, cols);
}

// ---- Llama family: CPU only until their CUDA twins have run on a GPU --------------------------------

void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps) {
  same_device("rmsnorm_forward", {&out, &rstd, &inp, &weight});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(out.numel() == inp.numel() && rstd.numel() == rows && weight.numel() == cols, "rmsnorm_forward",
         "shapes do not fit");
  TESSERA_CPU_ONLY(out.device(), rmsnorm_forward, out.data<float>(), rstd.data<float>(), inp.data<float>(),
                   weight.data<float>(), rows, cols, eps);
}

void add_rmsnorm_forward(Tensor& sum, Tensor& out, Tensor& rstd, const Tensor& a, const Tensor& b,
                         const Tensor& weight, float eps) {
  expect(b.numel() == a.numel() && sum.numel() == a.numel(), "add_rmsnorm_forward", "shapes do not fit");
  add(sum, a, b);
  rmsnorm_forward(out, rstd, sum, weight, eps);
}

void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd) {
  same_device("rmsnorm_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == cols &&
             weight.numel() == cols && rstd.numel() == rows,
         "rmsnorm_backward", "shapes do not fit");
  TESSERA_CPU_ONLY(dinp.device(), rmsnorm_backward, dinp.data<float>(), dweight.data<float>(), dout.data<float>(),
                   inp.data<float>(), weight.data<float>(), rstd.data<float>(), rows, cols);
}

namespace {
void check_rope(const char* op, const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                const RopeShape& s) {
  same_device(op, {&qkv, &q, &k, &v});
  expect(s.head_dim > 0 && s.head_dim % 2 == 0, op, "the head size must be even");
  expect(s.heads > 0 && s.kv_heads > 0 && s.group > 0, op, "heads, kv heads and group must be positive");
  expect(s.batch >= 0 && s.seq >= 0 && s.first_head >= 0 && s.first_kv_head >= 0 && s.first_position >= 0, op,
         "batch, seq, first head, first kv head and first position must not be negative");
  expect(s.theta > 0.0f, op, "theta must be positive");
  const int64_t n = s.batch * s.seq, d = s.head_dim;
  expect(qkv.numel() == n * 3 * s.heads * d && q.numel() == n * s.heads * d && k.numel() == n * s.kv_heads * d &&
             v.numel() == k.numel(),
         op, "shapes do not fit");
  expect(s.first_head / s.group >= s.first_kv_head &&
             (s.first_head + s.heads - 1) / s.group - s.first_kv_head < s.kv_heads,
         op, "a query head's kv head is not in k and v");
  if (s.positions)  // document masking's positions, each inside the table's [0, first_position + seq)
    for (int64_t i = 0; i < n; ++i)
      expect(s.positions[i] >= 0 && s.positions[i] < s.first_position + s.seq, op,
             "a document position is outside [0, first_position + seq)");
}
}  // namespace

void rope_pack_forward(Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, const RopeShape& shape) {
  check_rope("rope_pack_forward", qkv, q, k, v, shape);
  TESSERA_CPU_ONLY(qkv.device(), rope_pack_forward, qkv.data<float>(), q.data<float>(), k.data<float>(),
                   v.data<float>(), shape);
}

void rope_pack_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dqkv, const RopeShape& shape) {
  check_rope("rope_pack_backward", dqkv, dq, dk, dv, shape);
  TESSERA_CPU_ONLY(dq.device(), rope_pack_backward, dq.data<float>(), dk.data<float>(), dv.data<float>(),
                   dqkv.data<float>(), shape);
}

void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  same_device("swiglu_forward", {&out, &gate, &up});
  expect(out.numel() == gate.numel() && up.numel() == gate.numel(), "swiglu_forward", "shapes do not fit");
  TESSERA_CPU_ONLY(out.device(), swiglu_forward, out.data<float>(), gate.data<float>(), up.data<float>(),
                   gate.numel());
}

void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& dout, const Tensor& gate, const Tensor& up) {
  same_device("swiglu_backward", {&dgate, &dup, &dout, &gate, &up});
  expect(dgate.numel() == gate.numel() && dup.numel() == gate.numel() && dout.numel() == gate.numel() &&
             up.numel() == gate.numel(),
         "swiglu_backward", "shapes do not fit");
  TESSERA_CPU_ONLY(dgate.device(), swiglu_backward, dgate.data<float>(), dup.data<float>(), dout.data<float>(),
                   gate.data<float>(), up.data<float>(), gate.numel());
}

namespace {
// The split-column layer norm and RMSNorm have CPU kernels only: a CUDA tensor throws; every tensor is f32.
void split_layernorm_checks(const char* op, std::initializer_list<const Tensor*> ts) {
  same_device(op, ts);
  for (const Tensor* t : ts) {
    TESSERA_CHECK(t->device() == Device::cpu, op, ": not implemented on CUDA (split-column norm)");
    TESSERA_CHECK(t->dtype() == DType::f32, op, ": tensors must be f32, got ", dtype_name(t->dtype()));
  }
}
}  // namespace

void layernorm_split_row_sums(Tensor& sums, const Tensor& inp) {
  TESSERA_EXPECT_OP(layernorm_split_row_sums, cpu_only);
  split_layernorm_checks("layernorm_split_row_sums", {&sums, &inp});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(sums.numel() == rows, "layernorm_split_row_sums", "shapes do not fit");
  kernels::cpu::layernorm_split_row_sums(sums.data<float>(), inp.data<float>(), rows, cols);
}

void layernorm_split_centered_squares(Tensor& sums, const Tensor& inp, const Tensor& row_sums, int64_t total_cols) {
  TESSERA_EXPECT_OP(layernorm_split_centered_squares, cpu_only);
  split_layernorm_checks("layernorm_split_centered_squares", {&sums, &inp, &row_sums});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(sums.numel() == rows && row_sums.numel() == rows && total_cols > 0 && cols <= total_cols,
         "layernorm_split_centered_squares", "shapes do not fit");
  kernels::cpu::layernorm_split_centered_squares(sums.data<float>(), inp.data<float>(), row_sums.data<float>(),
                                                 rows, cols, total_cols);
}

void layernorm_split_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                             const Tensor& bias, const Tensor& row_sums, const Tensor& squares, int64_t total_cols,
                             float eps) {
  TESSERA_EXPECT_OP(layernorm_split_forward, cpu_only);
  split_layernorm_checks("layernorm_split_forward", {&out, &mean, &rstd, &inp, &weight, &bias, &row_sums, &squares});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(out.numel() == inp.numel() && mean.numel() == rows && rstd.numel() == rows && weight.numel() == cols &&
             bias.numel() == cols && row_sums.numel() == rows && squares.numel() == rows && total_cols > 0 &&
             cols <= total_cols,
         "layernorm_split_forward", "shapes do not fit");
  kernels::cpu::layernorm_split_forward(out.data<float>(), mean.data<float>(), rstd.data<float>(), inp.data<float>(),
                                        weight.data<float>(), bias.data<float>(), row_sums.data<float>(),
                                        squares.data<float>(), rows, cols, total_cols, eps);
}

void layernorm_split_backward_sums(Tensor& sums, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd) {
  TESSERA_EXPECT_OP(layernorm_split_backward_sums, cpu_only);
  split_layernorm_checks("layernorm_split_backward_sums", {&sums, &dout, &inp, &weight, &mean, &rstd});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(sums.numel() == 2 * rows && dout.numel() == inp.numel() && weight.numel() == cols && mean.numel() == rows &&
             rstd.numel() == rows,
         "layernorm_split_backward_sums", "shapes do not fit");
  kernels::cpu::layernorm_split_backward_sums(sums.data<float>(), dout.data<float>(), inp.data<float>(),
                                              weight.data<float>(), mean.data<float>(), rstd.data<float>(), rows,
                                              cols);
}

void layernorm_split_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                              const Tensor& weight, const Tensor& mean, const Tensor& rstd, const Tensor& sums,
                              int64_t total_cols) {
  TESSERA_EXPECT_OP(layernorm_split_backward, cpu_only);
  split_layernorm_checks("layernorm_split_backward",
                         {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd, &sums});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == cols &&
             dbias.numel() == cols && weight.numel() == cols && mean.numel() == rows && rstd.numel() == rows &&
             sums.numel() == 2 * rows && total_cols > 0 && cols <= total_cols,
         "layernorm_split_backward", "shapes do not fit");
  kernels::cpu::layernorm_split_backward(dinp.data<float>(), dweight.data<float>(), dbias.data<float>(),
                                         dout.data<float>(), inp.data<float>(), weight.data<float>(),
                                         mean.data<float>(), rstd.data<float>(), sums.data<float>(), rows, cols,
                                         total_cols);
}

void rmsnorm_split_squares(Tensor& sums, const Tensor& inp) {
  TESSERA_EXPECT_OP(rmsnorm_split_squares, cpu_only);
  split_layernorm_checks("rmsnorm_split_squares", {&sums, &inp});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(sums.numel() == rows, "rmsnorm_split_squares", "shapes do not fit");
  kernels::cpu::rmsnorm_split_squares(sums.data<float>(), inp.data<float>(), rows, cols);
}

void rmsnorm_split_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, const Tensor& squares,
                           int64_t total_cols, float eps) {
  TESSERA_EXPECT_OP(rmsnorm_split_forward, cpu_only);
  split_layernorm_checks("rmsnorm_split_forward", {&out, &rstd, &inp, &weight, &squares});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(out.numel() == inp.numel() && rstd.numel() == rows && weight.numel() == cols && squares.numel() == rows &&
             total_cols > 0 && cols <= total_cols,
         "rmsnorm_split_forward", "shapes do not fit");
  kernels::cpu::rmsnorm_split_forward(out.data<float>(), rstd.data<float>(), inp.data<float>(), weight.data<float>(),
                                      squares.data<float>(), rows, cols, total_cols, eps);
}

void rmsnorm_split_backward_sums(Tensor& sums, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                                 const Tensor& rstd) {
  TESSERA_EXPECT_OP(rmsnorm_split_backward_sums, cpu_only);
  split_layernorm_checks("rmsnorm_split_backward_sums", {&sums, &dout, &inp, &weight, &rstd});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(sums.numel() == rows && dout.numel() == inp.numel() && weight.numel() == cols && rstd.numel() == rows,
         "rmsnorm_split_backward_sums", "shapes do not fit");
  kernels::cpu::rmsnorm_split_backward_sums(sums.data<float>(), dout.data<float>(), inp.data<float>(),
                                            weight.data<float>(), rstd.data<float>(), rows, cols);
}

void rmsnorm_split_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                            const Tensor& rstd, const Tensor& sums, int64_t total_cols) {
  TESSERA_EXPECT_OP(rmsnorm_split_backward, cpu_only);
  split_layernorm_checks("rmsnorm_split_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd, &sums});
  const int64_t rows = rows_of(inp), cols = last_dim(inp);
  expect(dinp.numel() == inp.numel() && dout.numel() == inp.numel() && dweight.numel() == cols &&
             weight.numel() == cols && rstd.numel() == rows && sums.numel() == rows && total_cols > 0 &&
             cols <= total_cols,
         "rmsnorm_split_backward", "shapes do not fit");
  kernels::cpu::rmsnorm_split_backward(dinp.data<float>(), dweight.data<float>(), dout.data<float>(),
                                       inp.data<float>(), weight.data<float>(), rstd.data<float>(), sums.data<float>(),
                                       rows, cols, total_cols);
}

namespace {
struct AttentionDims {
  int64_t batch, seq, heads, head_dim;
};
AttentionDims attention_dims(const Tensor& qkv, int64_t n_heads, const char* op) {
  TESSERA_CHECK(qkv.shape().rank() == 3, op, ": qkv must be [B, T, 3C], got ", qkv.shape().str());
  const int64_t c3 = qkv.shape()[2];
  TESSERA_CHECK(n_heads > 0 && c3 % (3 * n_heads) == 0, op, ": 3C = ", c3, " is not 3 x heads (", n_heads,
                ") x head_dim");
  return {qkv.shape()[0], qkv.shape()[1], n_heads, c3 / (3 * n_heads)};
}
// With bf16 inputs the CUDA attention multiplies on the tensor cores (bf16 inputs, fp32 sums, like
// the GEMMs); the CPU keeps its fp32 kernel. TESSERA_CUDA_TC_ATTENTION=0 keeps the fp32 kernel on
// CUDA too (a fallback, and the benchmark's A/B switch).
bool tensor_core_attention(const Tensor& t, MatmulInputs inputs) {
  static const bool allowed = [] {
    const char* v = std::getenv("TESSERA_CUDA_TC_ATTENTION");
    return !(v && std::string_view(v) == "0");
  }();
  return allowed && t.device() == Device::cuda && inputs == MatmulInputs::bf16;
}

// Document masking's segments: [rows, seq] int32 on the host, for tensors on the CPU (no CUDA kernel
// masks documents); nullptr when undefined.
const int32_t* segment_ids(const Tensor& segments, Device device, int64_t rows, int64_t seq, const char* op) {
  if (!segments.defined()) return nullptr;
  TESSERA_CHECK(device == Device::cpu, op, ": document masking (--document-mask) has no CUDA kernel yet: train",
                " with it on the CPU (--device cpu)");
  TESSERA_CHECK(segments.dtype() == DType::i32 && segments.device() == Device::cpu && segments.numel() == rows * seq,
                op, ": segments must be int32 [", rows, ", ", seq, "] on the host, got ", dtype_name(segments.dtype()),
                " ", segments.shape().str());
  return segments.data<int32_t>();
}

kernels::cpu::AttentionBlockShape self_attention_shape(const AttentionDims& d) {
  const int64_t c3 = 3 * d.heads * d.head_dim;
  return {d.batch, d.seq, d.seq, d.heads, d.head_dim, c3, c3, true};
}
}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int64_t n_heads, MatmulInputs inputs,
                       const Tensor& segments) {
  same_device("attention_forward", {&out, &lse, &qkv});
  const AttentionDims d = attention_dims(qkv, n_heads, "attention_forward");
  expect(out.numel() == d.batch * d.seq * d.heads * d.head_dim && lse.numel() == d.batch * d.heads * d.seq,
         "attention_forward", "out or lse has the wrong size");
  if (const int32_t* seg = segment_ids(segments, qkv.device(), d.batch, d.seq, "attention_forward")) {
    // The block kernel on the whole sequence as its diagonal block (as the CPU's attention_forward), masked.
    kernels::cpu::AttentionBlockShape s = self_attention_shape(d);
    s.q_segments = s.kv_segments = seg;
    const int64_t c = d.heads * d.head_dim;
    TESSERA_EXPECT_OP(attention_block_forward, cpu_and_cuda);
    TESSERA_CPU_KERNEL(attention_block_forward, out.data<float>(), lse.data<float>(), qkv.data<float>(),
                       qkv.data<float>() + c, qkv.data<float>() + 2 * c, s, false);
    return;
  }
  if (tensor_core_attention(out, inputs))
    TESSERA_CUDA_ONLY(attention_forward_bf16, out.data<float>(), lse.data<float>(), qkv.data<float>(), d.batch,
                      d.seq, d.heads, d.head_dim);
  else
    TESSERA_DISPATCH(out.device(), attention_forward, out.data<float>(), lse.data<float>(), qkv.data<float>(),
                     d.batch, d.seq, d.heads, d.head_dim);
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int64_t n_heads, MatmulInputs inputs, const Tensor& segments) {
  same_device("attention_backward", {&dqkv, &dout, &qkv, &out, &lse});
  const AttentionDims d = attention_dims(qkv, n_heads, "attention_backward");
  expect(dqkv.numel() == qkv.numel() && dout.numel() == out.numel() &&
             out.numel() == d.batch * d.seq * d.heads * d.head_dim && lse.numel() == d.batch * d.heads * d.seq,
         "attention_backward", "shapes do not fit");
  if (const int32_t* seg = segment_ids(segments, qkv.device(), d.batch, d.seq, "attention_backward")) {
    kernels::cpu::AttentionBlockShape s = self_attention_shape(d);
    s.q_segments = s.kv_segments = seg;
    const int64_t c = d.heads * d.head_dim;
    dqkv.zero();
    float* g = dqkv.data<float>();
    const float* x = qkv.data<float>();
    TESSERA_EXPECT_OP(attention_block_backward, cpu_and_cuda);
    TESSERA_CPU_KERNEL(attention_block_backward, g, g + c, g + 2 * c, dout.data<float>(), x, x + c, x + 2 * c,
                       out.data<float>(), lse.data<float>(), s);
    return;
  }
  if (tensor_core_attention(dqkv, inputs))
    TESSERA_CUDA_ONLY(attention_backward_bf16, dqkv.data<float>(), dout.data<float>(), qkv.data<float>(),
                      out.data<float>(), lse.data<float>(), d.batch, d.seq, d.heads, d.head_dim);
  else
    TESSERA_DISPATCH(dqkv.device(), attention_backward, dqkv.data<float>(), dout.data<float>(), qkv.data<float>(),
                     out.data<float>(), lse.data<float>(), d.batch, d.seq, d.heads, d.head_dim);
}

namespace {
// The block kernels' operands, checked: q [B, Tq, >= C], kv [B, Tk, >= 2C], out [B, Tq, C] with
// C = heads x head_dim, lse [B, H, Tq].
kernels::cpu::AttentionBlockShape attention_block_shape(const Tensor& out, const Tensor& lse, const Tensor& q,
                                                        const Tensor& kv, int64_t n_heads, bool causal,
                                                        const char* op) {
  TESSERA_CHECK(q.shape().rank() == 3 && kv.shape().rank() == 3 && out.shape().rank() == 3, op,
                ": q, kv and out must be [B, T, columns], got ", q.shape().str(), ", ", kv.shape().str(), ", ",
                out.shape().str());
  const int64_t batch = q.dim(0), tq = q.dim(1), tk = kv.dim(1), c = out.dim(2);
  TESSERA_CHECK(n_heads > 0 && c > 0 && c % n_heads == 0, op, ": out's C = ", c, " is not heads (", n_heads,
                ") x head_dim");
  TESSERA_CHECK(kv.dim(0) == batch && out.dim(0) == batch && out.dim(1) == tq, op, ": q ", q.shape().str(),
                ", kv ", kv.shape().str(), " and out ", out.shape().str(), " do not agree on B and Tq");
  TESSERA_CHECK(q.dim(2) >= c && kv.dim(2) >= 2 * c, op, ": q rows need C = ", c, " columns and kv rows 2C, got ",
                q.dim(2), " and ", kv.dim(2));
  TESSERA_CHECK(tk > 0, op, ": an empty key/value block");
  TESSERA_CHECK(!causal || tq == tk, op, ": a causal (diagonal) block needs Tq == Tk, got ", tq, " and ", tk);
  TESSERA_CHECK(lse.numel() == batch * n_heads * tq, op, ": lse has ", lse.numel(), " elements, not B x H x Tq = ",
                batch * n_heads * tq);
  return {batch, tq, tk, n_heads, c / n_heads, q.dim(2), kv.dim(2), causal};
}

// Both segment tensors or neither, each shaped as its block's rows.
void block_segments(kernels::cpu::AttentionBlockShape& s, const Tensor& q_segments, const Tensor& kv_segments,
                    Device device, const char* op) {
  TESSERA_CHECK(q_segments.defined() == kv_segments.defined(), op,
                ": document masking needs the segments of both the queries and the keys");
  s.q_segments = segment_ids(q_segments, device, s.batch, s.tq, op);
  s.kv_segments = segment_ids(kv_segments, device, s.batch, s.tk, op);
}
}  // namespace

void attention_block_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& kv, int64_t n_heads,
                             bool causal, bool merge, const Tensor& q_segments, const Tensor& kv_segments) {
  same_device("attention_block_forward", {&out, &lse, &q, &kv});
  auto s = attention_block_shape(out, lse, q, kv, n_heads, causal, "attention_block_forward");
  block_segments(s, q_segments, kv_segments, q.device(), "attention_block_forward");
  const float* k = kv.data<float>() + s.kv_stride - 2 * s.heads * s.head_dim;
  TESSERA_DISPATCH(out.device(), attention_block_forward, out.data<float>(), lse.data<float>(), q.data<float>(), k,
                   k + s.heads * s.head_dim, s, merge);
}

void attention_block_backward(Tensor& dq, Tensor& dkv, const Tensor& dout, const Tensor& q, const Tensor& kv,
                              const Tensor& out, const Tensor& lse, int64_t n_heads, bool causal,
                              const Tensor& q_segments, const Tensor& kv_segments) {
  same_device("attention_block_backward", {&dq, &dkv, &dout, &q, &kv, &out, &lse});
  auto s = attention_block_shape(out, lse, q, kv, n_heads, causal, "attention_block_backward");
  block_segments(s, q_segments, kv_segments, q.device(), "attention_block_backward");
  expect(dq.shape() == q.shape() && dkv.shape() == kv.shape() && dout.shape() == out.shape(),
         "attention_block_backward", "dq, dkv and dout must be shaped as q, kv and out");
  const int64_t c = s.heads * s.head_dim, kv_first = s.kv_stride - 2 * c;
  const float* k = kv.data<float>() + kv_first;
  float* dk = dkv.data<float>() + kv_first;
  TESSERA_DISPATCH(dq.device(), attention_block_backward, dq.data<float>(), dk, dk + c, dout.data<float>(),
                   q.data<float>(), k, k + c, out.data<float>(), lse.data<float>(), s);
}

void embedding_forward(Tensor& out, const Tensor& tokens, const Operand& wte_operand, const Tensor& wpe,
                       int64_t vocab_start) {
  const Tensor& wte = wte_operand.values;
  same_device("embedding_forward", {&out, &tokens, &wte, &wpe});
  TESSERA_CHECK(tokens.shape().rank() == 2, "embedding_forward: tokens must be [B, T], got ", tokens.shape().str());
  const int64_t batch = tokens.shape()[0], seq = tokens.shape()[1], channels = last_dim(wte);
  expect(out.numel() == batch * seq * channels, "embedding_forward", "out has the wrong size");
  if (wpe.defined()) expect(wpe.numel() >= seq * channels, "embedding_forward", "sequence longer than wpe");
  // A table given with its bf16 bits (mixed precision leaves it in fp32) is read from the bits.
  TESSERA_DISPATCH(out.device(), embedding_forward, out.data<float>(), tokens.data<int32_t>(), wte.data<float>(),
                   wte_operand.bf16,
                   wpe.defined() ? wpe.data<float>() : nullptr, batch, seq, rows_of(wte), channels, vocab_start);
}

void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) {
  same_device("embedding_backward", {&dwte, &dwpe, &dout, &tokens});
  TESSERA_CHECK(tokens.shape().rank() == 2, "embedding_backward: tokens must be [B, T]");
  const int64_t batch = tokens.shape()[0], seq = tokens.shape()[1], channels = last_dim(dwte);
  expect(dout.numel() == batch * seq * channels, "embedding_backward", "dout has the wrong size");
  if (dwpe.defined()) expect(dwpe.numel() >= seq * channels, "embedding_backward", "sequence longer than wpe");
  TESSERA_DISPATCH(dwte.device(), embedding_backward, dwte.data<float>(),
                   dwpe.defined() ? dwpe.data<float>() : nullptr, dout.data<float>(), tokens.data<int32_t>(),
                   batch, seq, rows_of(dwte), channels, vocab_start);
}

void softmax_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets,
                          int64_t valid_vocab) {
  same_device("softmax_xent_forward", {&losses, &lse, &logits, &targets});
  const int64_t rows = rows_of(logits), vp = last_dim(logits);
  expect(losses.numel() == rows && lse.numel() == rows && targets.numel() == rows && valid_vocab <= vp,
         "softmax_xent_forward", "shapes do not fit");
  TESSERA_DISPATCH(logits.device(), softmax_xent_forward, losses.data<float>(), lse.data<float>(),
                   logits.data<float>(), targets.data<int32_t>(), rows, vp, valid_vocab);
}

void softmax_xent_backward(Tensor& dlogits, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                           int64_t valid_vocab, float scale, int64_t vocab_start) {
  same_device("softmax_xent_backward", {&dlogits, &logits, &targets, &lse});
  const int64_t rows = rows_of(logits), vp = last_dim(logits);
  expect(dlogits.numel() == logits.numel() && lse.numel() == rows && targets.numel() == rows &&
             valid_vocab <= vp,
         "softmax_xent_backward", "shapes do not fit");
  TESSERA_DISPATCH(logits.device(), softmax_xent_backward, dlogits.data<float>(), logits.data<float>(),
                   targets.data<int32_t>(), lse.data<float>(), rows, vp, valid_vocab, scale, vocab_start);
}

void softmax_xent_row_max(Tensor& row_max, const Tensor& logits, int64_t valid_vocab) {
  same_device("softmax_xent_row_max", {&row_max, &logits});
  const int64_t rows = rows_of(logits), vp = last_dim(logits);
  expect(row_max.numel() == rows && valid_vocab >= 0 && valid_vocab <= vp, "softmax_xent_row_max",
         "shapes do not fit");
  TESSERA_DISPATCH(logits.device(), softmax_xent_row_max, row_max.data<float>(), logits.data<float>(), rows, vp,
                   valid_vocab);
}

void softmax_xent_partial(Tensor& sums, const Tensor& logits, const Tensor& targets, const Tensor& max,
                          int64_t valid_vocab, int64_t vocab_start, int64_t vocab) {
  same_device("softmax_xent_partial", {&sums, &logits, &targets, &max});
  const int64_t rows = rows_of(logits), vp = last_dim(logits);
  expect(sums.numel() == 2 * rows && targets.numel() == rows && max.numel() == rows && valid_vocab >= 0 &&
             valid_vocab <= vp && vocab_start >= 0 && (valid_vocab == 0 || vocab_start + valid_vocab <= vocab),
         "softmax_xent_partial", "shapes do not fit");
  TESSERA_DISPATCH(logits.device(), softmax_xent_partial, sums.data<float>(), logits.data<float>(),
                   targets.data<int32_t>(), max.data<float>(), rows, vp, valid_vocab, vocab_start, vocab);
}

namespace {
// [B, T, C] dimensions of a rank-3 tensor, named in the error otherwise.
struct Dims3 {
  int64_t b, t, c;
};
Dims3 dims3(const Tensor& x, const char* op, const char* what) {
  TESSERA_CHECK(x.shape().rank() == 3, op, ": ", what, " must be [B, T, C], got ", x.shape().str());
  return {x.dim(0), x.dim(1), x.dim(2)};
}
}  // namespace

void image_to_patches(Tensor& patches, const Tensor& images, int64_t patch) {
  same_device("image_to_patches", {&patches, &images});
  TESSERA_CHECK(images.shape().rank() == 4, "image_to_patches: images must be [B, H, W, C], got ",
                images.shape().str());
  const int64_t b = images.dim(0), h = images.dim(1), w = images.dim(2), c = images.dim(3);
  TESSERA_CHECK(patch > 0 && h % patch == 0 && w % patch == 0, "image_to_patches: patch ", patch,
                " does not divide the image size ", h, " x ", w);
  const int64_t count = (h / patch) * (w / patch), width = patch * patch * c;
  TESSERA_CHECK(patches.numel() == b * count * width && last_dim(patches) == width, "image_to_patches: patches ",
                patches.shape().str(), " is not [", b, ", ", count, ", ", width, "]");
  TESSERA_DISPATCH(images.device(), image_to_patches, patches.data<float>(), images.data<float>(), b, h, w, c, patch);
}

void image_tokens_forward(Tensor& out, const Tensor& proj, const Tensor& cls, const Tensor& pos) {
  same_device("image_tokens_forward", {&out, &proj, &cls, &pos});
  const Dims3 d = dims3(proj, "image_tokens_forward", "proj");
  const int64_t tokens = d.t + (cls.defined() ? 1 : 0);
  expect(out.numel() == d.b * tokens * d.c && pos.numel() == tokens * d.c && (!cls.defined() || cls.numel() == d.c),
         "image_tokens_forward", "out must be [B, T, C], pos [T, C] and cls [C] (T = P + 1 with a class token)");
  TESSERA_DISPATCH(out.device(), image_tokens_forward, out.data<float>(), proj.data<float>(),
                   cls.defined() ? cls.data<float>() : nullptr, pos.data<float>(), d.b, d.t, d.c);
}

void image_tokens_backward(Tensor& dproj, Tensor& dcls, Tensor& dpos, const Tensor& dout) {
  same_device("image_tokens_backward", {&dproj, &dcls, &dpos, &dout});
  const Dims3 d = dims3(dproj, "image_tokens_backward", "dproj");
  const int64_t tokens = d.t + (dcls.defined() ? 1 : 0);
  expect(dout.numel() == d.b * tokens * d.c && dpos.numel() == tokens * d.c &&
             (!dcls.defined() || dcls.numel() == d.c),
         "image_tokens_backward", "dout must be [B, T, C], dpos [T, C] and dcls [C] (T = P + 1 with a class token)");
  TESSERA_DISPATCH(dout.device(), image_tokens_backward, dproj.data<float>(),
                   dcls.defined() ? dcls.data<float>() : nullptr, dpos.data<float>(), dout.data<float>(), d.b, d.t,
                   d.c);
}

void token_pool_forward(Tensor& pooled, const Tensor& x, TokenPool pool) {
  same_device("token_pool_forward", {&pooled, &x});
  const Dims3 d = dims3(x, "token_pool_forward", "x");
  expect(d.t > 0 && pooled.numel() == d.b * d.c, "token_pool_forward", "pooled must be [B, C] of x [B, T > 0, C]");
  TESSERA_DISPATCH(x.device(), token_pool_forward, pooled.data<float>(), x.data<float>(), d.b, d.t, d.c,
                   pool == TokenPool::mean);
}

void token_pool_backward(Tensor& dx, const Tensor& dpooled, TokenPool pool) {
  same_device("token_pool_backward", {&dx, &dpooled});
  const Dims3 d = dims3(dx, "token_pool_backward", "dx");
  expect(d.t > 0 && dpooled.numel() == d.b * d.c, "token_pool_backward", "dpooled must be [B, C] of dx [B, T > 0, C]");
  TESSERA_DISPATCH(dx.device(), token_pool_backward, dx.data<float>(), dpooled.data<float>(), d.b, d.t, d.c,
                   pool == TokenPool::mean);
}

namespace {
void check_smoothing(float smoothing, const char* op) {
  TESSERA_CHECK(smoothing >= 0.0f && smoothing < 1.0f, op, ": label smoothing must be in [0, 1), got ", smoothing);
}
}  // namespace

void classifier_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& labels,
                             float smoothing) {
  same_device("classifier_xent_forward", {&losses, &lse, &logits, &labels});
  check_smoothing(smoothing, "classifier_xent_forward");
  const int64_t rows = rows_of(logits), classes = last_dim(logits);
  expect(classes > 0 && losses.numel() == rows && lse.numel() == rows && labels.numel() == rows,
         "classifier_xent_forward", "shapes do not fit (logits [N, K], labels, losses and lse [N])");
  TESSERA_DISPATCH(logits.device(), classifier_xent_forward, losses.data<float>(), lse.data<float>(),
                   logits.data<float>(), labels.data<int32_t>(), rows, classes, smoothing);
}

void classifier_xent_backward(Tensor& dlogits, const Tensor& logits, const Tensor& labels, const Tensor& lse,
                              float smoothing, float scale) {
  same_device("classifier_xent_backward", {&dlogits, &logits, &labels, &lse});
  check_smoothing(smoothing, "classifier_xent_backward");
  const int64_t rows = rows_of(logits), classes = last_dim(logits);
  expect(classes > 0 && dlogits.numel() == logits.numel() && lse.numel() == rows && labels.numel() == rows,
         "classifier_xent_backward", "shapes do not fit (logits and dlogits [N, K], labels and lse [N])");
  TESSERA_DISPATCH(logits.device(), classifier_xent_backward, dlogits.data<float>(), logits.data<float>(),
                   labels.data<int32_t>(), lse.data<float>(), rows, classes, smoothing, scale);
}

void adamw(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWArgs& args) {
  same_device("adamw", {&param, &grad, &exp_avg, &exp_avg_sq});
  expect(grad.numel() == param.numel() && exp_avg.numel() == param.numel() &&
             exp_avg_sq.numel() == param.numel(),
         "adamw", "sizes differ");
  TESSERA_DISPATCH(param.device(), adamw, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                   exp_avg_sq.data<float>(), param.numel(), args);
}

void adamw_spans(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const std::vector<AdamWSpan>& spans, const AdamWArgs& args, Tensor param_bits) {
  same_device("adamw_spans", {&param, &grad, &exp_avg, &exp_avg_sq, &param_bits});
  const int64_t n = param.numel();
  expect(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n, "adamw_spans", "sizes differ");
  expect(!param_bits.defined() || (param_bits.dtype() == DType::bf16 && param_bits.numel() == n), "adamw_spans",
         "param_bits must be bf16, one per parameter");
  uint16_t* bits = param_bits.defined() ? param_bits.bits16() : nullptr;
  for (size_t i = 0; i < spans.size(); ++i)
    expect(spans[i].begin >= 0 && spans[i].begin <= spans[i].end && spans[i].end <= n &&
               (i == 0 || spans[i - 1].end <= spans[i].begin),
           "adamw_spans", "spans must lie in the buffers, in order, without overlapping");
  TESSERA_DISPATCH(param.device(), adamw_spans, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                   exp_avg_sq.data<float>(), spans.data(), static_cast<int64_t>(spans.size()), args, bits);
}

void synchronize(Device device) {
#ifdef TESSERA_HAVE_CUDA
  if (device == Device::cuda) kernels::cuda::wait_for_ops("synchronize");
#else
  (void)device;
#endif
}

}  // namespace tessera::ops
