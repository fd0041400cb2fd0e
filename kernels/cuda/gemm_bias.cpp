// cuBLASLt GEMMs with fused epilogues (gemm_bias of cuda_ops.h): a linear layer's forward with its
// bias, or its bias and GELU (keeping the GELU input for the backward), in one kernel instead of a
// GEMM and a pass over its output. Row-major as column-major: out^T [n, m] = w^T' @ a^T, where w
// (row-major [n, k]) is column-major [k, n] used transposed and a (row-major [m, k]) is
// column-major [k, m]; the bias runs along out^T's rows, which is how cuBLASLt applies it.
// cuBLASLt's heuristic picks an algorithm once per shape and operand alignment (cached; tensors
// may be views at any 4-byte offset, and the heuristic assumes 256-byte operands unless told);
// a case it has none for falls back to cuBLAS and the bias kernels, the same numbers up to
// rounding.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/bf16_operand.h"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"

namespace tessera::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

class LtHandle {
 public:
  LtHandle() { TESSERA_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
  ~LtHandle() { (void)cublasLtDestroy(handle_); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// The descriptors of one call, destroyed with it.
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  MatmulDesc() { TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~MatmulDesc() { (void)cublasLtMatmulDescDestroy(desc); }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
  }
};

struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                static_cast<uint64_t>(cols), ld));
  }
  ~Layout() { (void)cublasLtMatrixLayoutDestroy(layout); }
};

// The largest power of two up to 256 that divides p's address (what cuBLASLt's alignment
// preferences and checks speak of).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// What an algorithm choice depends on: the device, the problem and the operands' alignments.
struct Plan {
  int device;
  int64_t m, n, k;
  bool gelu, bf16;
  uint32_t align_w, align_a, align_out, align_bias, align_pre;
  auto key() const { return std::tie(device, m, n, k, gelu, bf16, align_w, align_a, align_out, align_bias, align_pre); }
  bool operator<(const Plan& o) const { return key() < o.key(); }
};

// One per process: the handles per device and each plan's algorithm (nullopt: none, fall back).
struct LtCache {
  std::mutex mutex;
  std::vector<std::unique_ptr<LtHandle>> handles;
  std::map<Plan, std::optional<cublasLtMatmulAlgo_t>> algos;
  int64_t fallbacks = 0;
};

LtCache& cache() {
  static LtCache c;
  return c;
}

// out (and pre) through one cuBLASLt call; false when cuBLASLt has no algorithm for the plan.
bool lt_gemm_bias(int64_t m, int64_t n, int64_t k, const void* a, const void* w, bool bf16, const float* bias,
                  float* pre, float* out) {
  Plan plan{0, m, n, k, pre != nullptr, bf16, alignment_of(w), alignment_of(a), alignment_of(out),
            alignment_of(bias), pre ? alignment_of(pre) : 256u};
  TESSERA_CUDA_CHECK(cudaGetDevice(&plan.device));
  // The epilogue's vectors are read whole: keep them to 16-byte alignment (views rarely are not).
  if (plan.align_bias < 16 || plan.align_pre < 16) return false;
  const cudaDataType_t input_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;

  MatmulDesc desc;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, plan.gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS);
  desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias));
  if (plan.gelu) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(pre));
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, n);
  }
  const Layout w_layout(input_type, k, n, k), a_layout(input_type, k, m, k), out_layout(CUDA_R_32F, n, m, n);

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulAlgo_t algo{};
  {
    LtCache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.handles.size() <= static_cast<size_t>(plan.device)) c.handles.resize(plan.device + 1);
    if (!c.handles[plan.device]) c.handles[plan.device] = std::make_unique<LtHandle>();
    handle = c.handles[plan.device]->get();
    auto found = c.algos.find(plan);
    if (found == c.algos.end()) {
      cublasLtMatmulPreference_t preference = nullptr;
      TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
      auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
        (void)cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value);
      };
      prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kWorkspaceBytes});
      prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, plan.align_w);  // cuBLASLt's A is w
      prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, plan.align_a);
      prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, plan.align_out);
      prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, plan.align_out);
      cublasLtMatmulHeuristicResult_t result{};
      int count = 0;
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(handle, desc.desc, w_layout.layout, a_layout.layout, out_layout.layout,
                                         out_layout.layout, preference, 1, &result, &count);
      (void)cublasLtMatmulPreferenceDestroy(preference);
      std::optional<cublasLtMatmulAlgo_t> choice;
      if (status == CUBLAS_STATUS_SUCCESS && count > 0) choice = result.algo;
      found = c.algos.emplace(plan, choice).first;
    }
    if (!found->second) return false;
    algo = *found->second;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const Scratch workspace(kWorkspaceBytes);
  const cublasStatus_t status =
      cublasLtMatmul(handle, desc.desc, &alpha, w, w_layout.layout, a, a_layout.layout, &beta, out,
                     out_layout.layout, out, out_layout.layout, &algo, workspace.as<void>(), kWorkspaceBytes,
                     op_stream());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {  // the cached choice does not take this call: stop offering it
    std::lock_guard<std::mutex> lock(cache().mutex);
    cache().algos[plan] = std::nullopt;
    return false;
  }
  check_cublas(status, "cublasLtMatmul");
  return true;
}

// The unfused path, as cpu::gemm_bias's without oneDNN (a_bits, w_bits: bf16 copies or nullptr).
void gemm_then_bias(int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
                    const uint16_t* w_bits, const float* bias, bool bf16, float* pre, float* out) {
  {
    std::lock_guard<std::mutex> lock(cache().mutex);
    ++cache().fallbacks;
  }
  auto product = [&](float beta, float* c) {
    if (bf16) gemm_bf16(false, true, m, n, k, 1.0f, a, a_bits, w, w_bits, beta, c);
    else gemm(false, true, m, n, k, 1.0f, a, w, beta, c);
  };
  if (pre) {
    product(0.0f, pre);
    bias_gelu_forward(out, pre, bias, m, n);
  } else {
    broadcast_rows(out, bias, m, n);
    product(1.0f, out);
  }
}

}  // namespace

void gemm_bias(int64_t m, int64_t n, int64_t k, const float* a, const uint16_t* a_bits, const float* w,
               const uint16_t* w_bits, const float* bias, bool bf16, float* pre, float* out) {
  if (m <= 0 || n <= 0) return;
  // The GELU input's leading dimension must be a multiple of 8; an empty product has no GEMM.
  if (k <= 0 || (pre && n % 8 != 0)) {
    gemm_then_bias(m, n, k, a, a_bits, w, w_bits, bias, bf16, pre, out);
    return;
  }
  if (bf16) {
    const Bf16Operand a16(a, a_bits, m * k), w16(w, w_bits, n * k);  // rounded once, for either path
    if (!lt_gemm_bias(m, n, k, a16.bits(), w16.bits(), true, bias, pre, out))
      gemm_then_bias(m, n, k, a, a16.bits(), w, w16.bits(), bias, true, pre, out);
  } else if (!lt_gemm_bias(m, n, k, a, w, false, bias, pre, out)) {
    gemm_then_bias(m, n, k, a, nullptr, w, nullptr, bias, false, pre, out);
  }
  finish("gemm_bias");
}

int64_t gemm_bias_fallbacks() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().fallbacks;
}

}  // namespace tessera::kernels::cuda
