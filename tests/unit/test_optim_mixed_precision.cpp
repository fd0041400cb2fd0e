// Unit tests of optim::MixedPrecision's weight round trip: under bf16 a parameter rounded on read
// (a linear layer's weight, an unsplit token table) keeps its fp32 values and its readers (GEMMs,
// the lookup) read its bits; the others are rounded in place; restore_weights brings every held
// value back bit for bit. fp16 rounds everything in place. Rounding the gradients under bf16 also
// sums their squares.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "kernels/ops.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/param_store.h"
#include "optim/mixed_precision.h"

using tessera::Device;
using tessera::DType;
using tessera::Tensor;
using tessera::nn::Init;
using tessera::nn::ParamStore;
using tessera::optim::MixedPrecision;
using tessera::optim::Precision;
using tessera::optim::precision_name;
namespace ops = tessera::ops;

namespace {

// Parameters rounded on read and others interleaved, as a transformer's weights and biases are.
void build(ParamStore& s) {
  s.set_rounded_on_read(s.add("w1", {4, 6}, Init::Normal(0.5f), true));
  s.add("b1", {4}, Init::Normal(0.5f), false);
  s.set_rounded_on_read(s.add("w2", {6, 4}, Init::Normal(0.5f), true));
  s.set_rounded_on_read(s.add("w3", {3, 4}, Init::Normal(0.5f), true));
  s.add("ln", {5}, Init::Normal(0.5f), false);
  s.allocate(Device::cpu, 5);
}

std::vector<float> values_of(ParamStore& s) {
  const float* v = s.flat_values().data<float>();
  return {v, v + s.numel()};
}

float rounded(float x, DType storage) {
  Tensor v = Tensor::empty({1}, DType::f32, Device::cpu);
  v.data<float>()[0] = x;
  ops::round_inplace(v, storage);
  return v.data<float>()[0];
}

bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// y = x w^T under bf16 GEMM inputs, x [2, in].
Tensor product(const Tensor& w) {
  Tensor x = Tensor::empty({2, w.shape()[1]}, DType::f32, Device::cpu);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  Tensor y = Tensor::empty({2, w.shape()[0]}, DType::f32, Device::cpu);
  ops::matmul(x, false, w, true, y);
  return y;
}

// round_weights leaves each held value as `storage` rounds it (under bf16 those rounded on read
// untouched), and restore_weights brings back every value bit for bit.
void expect_round_trip(Precision precision_kind, DType storage) {
  ParamStore store;
  build(store);
  const std::vector<float> before = values_of(store);
  MixedPrecision precision(store, precision_kind);
  precision.round_weights();
  const float* held = store.flat_values().data<float>();
  int changed = 0;
  for (const auto& s : store.specs())
    for (int64_t i = s.offset; i < s.offset + s.local_shape.numel(); ++i) {
      const bool kept = s.rounded_on_read && precision_kind == Precision::bf16;
      EXPECT_TRUE(same_bits(held[i], kept ? before[i] : rounded(before[i], storage))) << s.name << " element "
                                                                                        << i - s.offset;
      changed += !same_bits(held[i], before[i]);
    }
  EXPECT_GT(changed, 0) << "no value was rounded: the test's values are all representable already";
  precision.restore_weights();
  for (int64_t i = 0; i < store.numel(); ++i) EXPECT_TRUE(same_bits(held[i], before[i])) << "element " << i;
}

}  // namespace

TEST(MixedPrecision, Bf16KeepsWhatIsRoundedOnReadInFp32AndRoundsTheRest) {
  expect_round_trip(Precision::bf16, DType::bf16);
}

// The GEMMs read the registered bits, not the held values: changing a weight rounded on read
// after rounding does not reach a product until the next round trip.
TEST(MixedPrecision, Bf16GemmsReadTheBitsOfTheRoundTrip) {
  ParamStore store;
  build(store);
  const ops::MatmulInputsScope bf16(ops::MatmulInputs::bf16);
  Tensor& w2 = store.value(store.find("w2"));
  const Tensor expected = product(w2);  // the GEMM rounds w2 itself: no copy is registered yet
  MixedPrecision precision(store, Precision::bf16);
  precision.round_weights();
  for (int64_t i = 0; i < w2.numel(); ++i) w2.data<float>()[i] *= 3.0f;
  const Tensor during = product(w2);
  for (int64_t i = 0; i < expected.numel(); ++i)
    EXPECT_TRUE(same_bits(during.data<float>()[i], expected.data<float>()[i])) << "element " << i;
  precision.restore_weights();  // not restored: they were never rounded
  const Tensor after = product(w2);
  for (int64_t i = 0; i < expected.numel(); ++i)
    EXPECT_FALSE(same_bits(after.data<float>()[i], expected.data<float>()[i])) << "element " << i;
}

// fp16's GEMMs do not round their operands: every parameter is rounded in place.
TEST(MixedPrecision, Fp16RoundsEveryParameterAndRestoresIt) { expect_round_trip(Precision::fp16, DType::f16); }

// round_gradients rounds the gradients as the storage does; under bf16 it also returns their sum
// of squares (the norm's local sum, from the same pass), under fp16 and fp32 nothing.
TEST(MixedPrecision, RoundingTheGradientsSumsTheirSquaresUnderBf16) {
  for (const auto [kind, storage] : {std::pair{Precision::bf16, DType::bf16}, std::pair{Precision::fp16, DType::f16},
                                      std::pair{Precision::fp32, DType::f32}}) {
    ParamStore store;
    build(store);
    Tensor grads = store.flat_grads();
    for (int64_t i = 0; i < grads.numel(); ++i) grads.data<float>()[i] = 0.3f * static_cast<float>(i % 11) - 1.1f;
    Tensor want = grads.clone();
    if (storage != DType::f32) ops::round_inplace(want, storage);
    MixedPrecision precision(store, kind);
    const std::optional<double> squares = precision.round_gradients(grads);
    EXPECT_EQ(0, std::memcmp(grads.raw(), want.raw(), want.nbytes())) << precision_name(kind);
    EXPECT_EQ(squares.has_value(), kind == Precision::bf16) << precision_name(kind);
    if (squares) EXPECT_NEAR(*squares, ops::sum_squares(want), 1e-12 * ops::sum_squares(want));
  }
}

TEST(MixedPrecision, ALinearLayersWeightIsRoundedOnRead) {
  ParamStore store;
  const tessera::nn::Linear layer(store, "fc", 4, 3, tessera::nn::LinearOptions{});
  EXPECT_TRUE(store.spec(store.find("fc.weight")).rounded_on_read);
  EXPECT_FALSE(store.spec(store.find("fc.bias")).rounded_on_read) << "the bias is read by the epilogue in fp32";
}

TEST(MixedPrecision, AnUnsplitTokenTableIsRoundedOnReadItsPositionsAreNot) {
  ParamStore store;
  const tessera::nn::Embedding embed(store, "embed", 50, 16, 8, 1, 0.02f);
  EXPECT_TRUE(store.spec(store.find("embed.tokens.weight")).rounded_on_read) << "its lookup reads the bf16 copy";
  EXPECT_FALSE(store.spec(store.find("embed.positions.weight")).rounded_on_read);
}
