// oneDNN's matmul primitive, cached per shape (see onednn_matmul.h). Compiled only with oneDNN.
#ifdef TESSERA_HAVE_ONEDNN
#include "kernels/cpu/onednn_matmul.h"

#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "core/error.h"

namespace tessera::kernels::cpu {
namespace {

// All row-major: a transposed operand is a column-major view of its storage.
class Matmuls {
 public:
  bool run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a, const void* b,
           bool bf16_inputs, float beta, float* c, const float* bias) {
    using dnnl::memory;
    const memory::data_type in = bf16_inputs ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc a_desc({m, k}, in, trans_a ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc b_desc({k, n}, in, trans_b ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc c_desc({m, n}, memory::data_type::f32, memory::dims{n, 1});
    const memory::desc bias_desc =
        bias ? memory::desc({1, n}, memory::data_type::f32, memory::dims{n, 1}) : memory::desc();
    const Key key{trans_a, trans_b, m, n, k, alpha, beta, bf16_inputs, bias != nullptr};
    const dnnl::matmul* primitive = find(key, a_desc, b_desc, bias_desc, c_desc);
    if (!primitive) return false;
    thread_local dnnl::stream stream(engine_);
    memory a_mem(a_desc, engine_, const_cast<void*>(a)), b_mem(b_desc, engine_, const_cast<void*>(b));
    memory c_mem(c_desc, engine_, c);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(bias_desc, engine_, const_cast<float*>(bias)));
    primitive->execute(stream, args);
    stream.wait();
    return true;
  }

 private:
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, float, float, bool, bool>;  // ..., bf16, bias

  static constexpr size_t kMaxPrimitives = 1024;

  const dnnl::matmul* find(const Key& key, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                           const dnnl::memory::desc& bias, const dnnl::memory::desc& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = primitives_.find(key);
    if (it == primitives_.end()) {
      if (primitives_.size() >= kMaxPrimitives) return nullptr;
      dnnl::primitive_attr attr;
      const float alpha = std::get<5>(key), beta = std::get<6>(key);
      if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
      if (beta != 0.0f) {  // c = alpha a b + beta c; without the post-op c is overwritten
        dnnl::post_ops sum;
        sum.append_sum(beta);
        attr.set_post_ops(sum);
      }
      const dnnl::matmul::desc desc =
          std::get<8>(key) ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c);
      const dnnl::matmul::primitive_desc pd(desc, attr, engine_);
      it = primitives_.emplace(key, dnnl::matmul(pd)).first;
    }
    return &it->second;  // std::map: pointers stay valid as others are added
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  std::mutex mutex_;
  std::map<Key, dnnl::matmul> primitives_;
};

}  // namespace

bool onednn_matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
                   const void* b, bool bf16_inputs, float beta, float* c, const float* bias) {
  static Matmuls matmuls;
  try {
    return matmuls.run(trans_a, trans_b, m, n, k, alpha, a, b, bf16_inputs, beta, c, bias);
  } catch (const dnnl::error& e) {
    fail("oneDNN matmul failed (", e.what(), ") for ", m, "x", n, "x", k, bf16_inputs ? " with bf16 inputs" : "");
  }
}

bool onednn_has_bf16_dot_products() {
  const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const unsigned bf16 = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & bf16) == bf16;  // the ISA values are nested bit sets; AMX includes this one
}

}  // namespace tessera::kernels::cpu
#endif
