// QuantizedMatrix: loading a quantised tensor's pieces from a checkpoint (checked against each
// other and the root attributes), quantising in memory, and the product on the CPU kernels.
#include "quant/quantized_matrix.h"

#include <cstring>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quant_paths.h"
#include "quant/quantized_checkpoint.h"

namespace tessera::quant {

QuantizedMatrix QuantizedMatrix::quantize(const float* w, int64_t rows, int64_t cols, int64_t group_size, int bits,
                                          bool bf16_scales) {
  QuantizedMatrix m;
  m.rows_ = rows, m.cols_ = cols, m.group_ = group_size, m.bits_ = bits;
  TESSERA_CHECK(bits == 8 || bits == 4, "quantize: bits must be 8 or 4, not ", bits);
  TESSERA_CHECK(group_size > 0 && cols % group_size == 0, "quantize: group size ", group_size,
                " does not divide the ", cols, " columns");
  m.q_.resize(static_cast<size_t>(bits == 8 ? rows * cols : rows * cols / 2));
  m.scales_.resize(static_cast<size_t>(rows * (cols / group_size)));
  if (bits == 4) m.zeros_.resize(m.scales_.size());
  kernels::cpu::quantize_weights(m.q_.data(), m.scales_.data(), bits == 4 ? m.zeros_.data() : nullptr, w, rows, cols,
                                 group_size, bits, bf16_scales);
  return m;
}

QuantizedMatrix QuantizedMatrix::load(const io::CheckpointReader& r, const std::string& name) {
  const std::string where = r.path() + ": tensor " + name;
  TESSERA_CHECK(is_quantized(r), r.path(), " is not a quantised checkpoint (no root attribute quantized = 1)");
  const std::string q_path = quantized_path(name, "q"), s_path = quantized_path(name, "scales");
  TESSERA_CHECK(r.has(q_path) && r.has(s_path), where, " is not quantised there (no ", q_path, " and ", s_path, ")");
  QuantizedMatrix m;
  m.bits_ = static_cast<int>(r.attr_int("bits"));
  m.group_ = r.attr_int("group_size");
  TESSERA_CHECK((m.bits_ == 8 || m.bits_ == 4) && m.group_ > 0, r.path(), ": bits ", m.bits_, " and group_size ",
                m.group_, " are not a quantisation tessera writes");
  const Shape qs = r.shape(q_path), ss = r.shape(s_path);
  TESSERA_CHECK(qs.rank() == 2 && ss.rank() == 2 && qs[0] == ss[0], where, ": q ", qs.str(), " and scales ", ss.str(),
                " do not describe one matrix");
  m.rows_ = qs[0];
  m.cols_ = ss[1] * m.group_;
  TESSERA_CHECK(qs[1] == (m.bits_ == 8 ? m.cols_ : m.cols_ / 2), where, ": q ", qs.str(), " does not hold ", m.cols_,
                " columns of ", m.bits_, "-bit values (scales ", ss.str(), ", group size ", m.group_, ")");
  m.q_.resize(static_cast<size_t>(qs.numel()));
  if (m.bits_ == 8)
    r.read_range(q_path, 0, qs.numel(), reinterpret_cast<int8_t*>(m.q_.data()));
  else
    r.read_range(q_path, 0, qs.numel(), m.q_.data());
  m.scales_.resize(static_cast<size_t>(ss.numel()));
  if (r.type(s_path) == io::TensorType::u16) {  // bf16 bits: widened exactly
    std::vector<uint16_t> bits(m.scales_.size());
    r.read_range(s_path, 0, ss.numel(), bits.data());
    for (size_t i = 0; i < bits.size(); ++i) {
      const uint32_t wide = static_cast<uint32_t>(bits[i]) << 16;
      std::memcpy(&m.scales_[i], &wide, 4);
    }
  } else {
    r.read_range(s_path, 0, ss.numel(), m.scales_.data());
  }
  if (m.bits_ == 4) {
    const std::string z_path = quantized_path(name, "zeros");
    TESSERA_CHECK(r.has(z_path) && r.shape(z_path) == ss, where, ": int4 needs zero points ", z_path, " ", ss.str());
    m.zeros_.resize(m.scales_.size());
    r.read_range(z_path, 0, ss.numel(), m.zeros_.data());
    for (uint8_t z : m.zeros_) TESSERA_CHECK(z <= 15, where, ": a zero point ", int(z), " outside [0, 15]");
  }
  kernels::cpu::check_quant_view(m.view(), where.c_str());
  return m;
}

int64_t QuantizedMatrix::bytes() const {
  return static_cast<int64_t>(q_.size() + zeros_.size() + scales_.size() * sizeof(float));
}

kernels::QuantMatrixView QuantizedMatrix::view() const {
  return kernels::QuantMatrixView{q_.data(), scales_.data(), bits_ == 4 ? zeros_.data() : nullptr, rows_, cols_, group_,
                                  bits_};
}

void QuantizedMatrix::dequantize(float* w) const { kernels::cpu::dequantize_weights(w, view()); }

QuantizedMatrix QuantizedMatrix::rows_of(const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  QuantizedMatrix m;
  m.cols_ = cols_, m.group_ = group_, m.bits_ = bits_;
  const int64_t q_row = bits_ == 8 ? cols_ : cols_ / 2, groups = cols_ / group_;
  auto append = [](auto& to, const auto& from, int64_t first, int64_t count, int64_t width) {
    to.insert(to.end(), from.begin() + first * width, from.begin() + (first + count) * width);
  };
  for (const auto& [first, count] : ranges) {
    TESSERA_CHECK(first >= 0 && count >= 0 && first + count <= rows_, "quantised matrix: rows [", first, ", ",
                  first + count, ") outside its ", rows_);
    append(m.q_, q_, first, count, q_row);
    append(m.scales_, scales_, first, count, groups);
    if (bits_ == 4) append(m.zeros_, zeros_, first, count, groups);
    m.rows_ += count;
  }
  return m;
}

QuantizedMatrix QuantizedMatrix::columns_of(int64_t first, int64_t count) const {
  TESSERA_CHECK(first >= 0 && count > 0 && first + count <= cols_, "quantised matrix: columns [", first, ", ",
                first + count, ") outside its ", cols_);
  TESSERA_CHECK(first % group_ == 0 && count % group_ == 0, "quantised matrix: columns [", first, ", ", first + count,
                ") do not fall on whole groups of ", group_,
                " (quantise with a --group-size that divides the columns each tensor-parallel rank holds)");
  QuantizedMatrix m;
  m.rows_ = rows_, m.cols_ = count, m.group_ = group_, m.bits_ = bits_;
  const int64_t per_byte = bits_ == 8 ? 1 : 2, q_row = cols_ / per_byte, groups = cols_ / group_;
  for (int64_t r = 0; r < rows_; ++r) {
    const auto q = q_.begin() + r * q_row + first / per_byte;
    m.q_.insert(m.q_.end(), q, q + count / per_byte);
    const int64_t g = r * groups + first / group_;
    m.scales_.insert(m.scales_.end(), scales_.begin() + g, scales_.begin() + g + count / group_);
    if (bits_ == 4) m.zeros_.insert(m.zeros_.end(), zeros_.begin() + g, zeros_.begin() + g + count / group_);
  }
  return m;
}

void matmul(const float* x, int64_t M, const QuantizedMatrix& W, float* y) {
  if (M == 1)
    kernels::cpu::quant_gemv(y, x, W.view());
  else
    kernels::cpu::quant_gemm(y, x, M, W.view());
}

}  // namespace tessera::quant
