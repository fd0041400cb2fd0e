// Unit tests of optim::MixedPrecision's weight round trip: under bf16 a parameter rounded on read
// (a linear layer's weight, an unsplit token table) keeps its fp32 values and its readers (GEMMs,
// the lookup) read its bits; the others are rounded in place; restore_weights brings every held
// value back bit for bit. fp16 rounds everything in place. Rounding the gradients under bf16 also
// sums their squares; bits the update wrote replace the next cast.
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
// of squares (the norm's local sum, from the same pass) unless told not to, under fp16 and fp32
// nothing.
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
  // Not asked for (tp or ep: the norm sums per parameter): rounded, no sum.
  ParamStore store;
  build(store);
  Tensor grads = store.flat_grads();
  for (int64_t i = 0; i < grads.numel(); ++i) grads.data<float>()[i] = 0.3f * static_cast<float>(i % 11) - 1.1f;
  Tensor want = grads.clone();
  ops::round_inplace(want, DType::bf16);
  MixedPrecision precision(store, Precision::bf16);
  EXPECT_FALSE(precision.round_gradients(grads, /*sum_squares=*/false).has_value());
  EXPECT_EQ(0, std::memcmp(grads.raw(), want.raw(), want.nbytes()));
}

// The update may write the weights' bits (weight_bits_for_update, then note_weight_bits_written):
// the next round_weights takes them and does not cast the weights again (a weight changed behind
// its back keeps its old bits: the proof no cast ran), for that round trip only; weights_changed
// withdraws them. fp16 offers no bits.
TEST(MixedPrecision, Bf16TakesTheBitsTheUpdateWrote) {
  ParamStore store;
  build(store);
  const ops::MatmulInputsScope bf16(ops::MatmulInputs::bf16);
  MixedPrecision precision(store, Precision::bf16);
  EXPECT_FALSE(precision.weight_bits_for_update().defined()) << "no copy before the first round trip";
  precision.round_weights();
  precision.restore_weights();
  Tensor bits = precision.weight_bits_for_update();
  ASSERT_TRUE(bits.defined());
  ASSERT_EQ(bits.numel(), store.numel());
  Tensor& w2 = store.value(store.find("w2"));
  const Tensor w2_product = product(w2);
  // The update's writes: new values and their bits; then a value changed without its bits.
  for (int64_t i = 0; i < w2.numel(); ++i) w2.data<float>()[i] *= 2.0f;  // exact: the bits double too
  Tensor flat = store.flat_values();
  ops::cast(bits, flat);
  precision.note_weight_bits_written();
  w2.data<float>()[0] += 1.0f;  // behind the copy's back
  precision.round_weights();
  Tensor doubled = w2.clone();
  doubled.data<float>()[0] -= 1.0f;
  const Tensor from_bits = product(w2), want = product(doubled);  // both read w2's registered bits...
  precision.restore_weights();
  const Tensor want_direct = product(doubled);  // ...which are the doubled values' (no copy registered here)
  for (int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_TRUE(same_bits(from_bits.data<float>()[i], want_direct.data<float>()[i])) << "element " << i;
    EXPECT_FALSE(same_bits(from_bits.data<float>()[i], w2_product.data<float>()[i])) << "element " << i;
  }
  precision.round_weights();  // the bits were for one round trip: now cast from the values
  const Tensor recast = product(w2);
  precision.restore_weights();
  EXPECT_FALSE(same_bits(recast.data<float>()[0], from_bits.data<float>()[0])) << "w2[0] += 1 now reaches the product";
  precision.note_weight_bits_written();
  precision.weights_changed();
  precision.round_weights();
  const Tensor after_change = product(w2);
  precision.restore_weights();
  EXPECT_TRUE(same_bits(after_change.data<float>()[0], recast.data<float>()[0])) << "weights_changed: cast again";

  ParamStore fp16_store;
  build(fp16_store);
  MixedPrecision fp16(fp16_store, Precision::fp16);
  fp16.round_weights();
  fp16.restore_weights();
  EXPECT_FALSE(fp16.weight_bits_for_update().defined());
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
