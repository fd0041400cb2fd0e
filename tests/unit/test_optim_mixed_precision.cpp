// Unit tests of optim::MixedPrecision's weight round trip and the store's bf16 copy: under bf16 a
// parameter rounded on read (a linear layer's weight, an unsplit token table) keeps its fp32 values
// and its readers (GEMMs, the lookup) read the store's copy of its bits, current by the values'
// version; the others are rounded in place; restore_weights brings every held value back bit for
// bit. fp16 rounds everything in place. Rounding the gradients under bf16 also sums their squares;
// bits the update wrote replace the next cast.
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

// y = x w^T under bf16 GEMM inputs, x [2, in] (w: a tensor, or a store's operand with its copy).
Tensor product(const ops::Operand& w) {
  const Tensor& values = w.values;
  Tensor x = Tensor::empty({2, values.shape()[1]}, DType::f32, Device::cpu);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  Tensor y = Tensor::empty({2, values.shape()[0]}, DType::f32, Device::cpu);
  ops::matmul(x, false, w, true, y, 1.0f, 0.0f, ops::MatmulInputs::bf16);
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

// The layers' GEMMs read the store's bf16 copy, not the held values: changing a weight rounded on
// read behind the store's back does not reach a product (the proof the copy is read) until the
// store's values version moves; then the copy is rounded again from the values.
TEST(MixedPrecision, Bf16GemmsReadTheStoresCopyUntilTheValuesVersionMoves) {
  ParamStore store;
  build(store);
  const int id = store.find("w2");
  Tensor& w2 = store.value(id);
  const Tensor expected = product(w2);  // the GEMM rounds w2 itself
  EXPECT_EQ(store.operand(id).bf16, nullptr) << "an fp32 store keeps no copy";
  MixedPrecision precision(store, Precision::bf16);
  EXPECT_EQ(store.matmul_inputs(), ops::MatmulInputs::bf16) << "mixed precision tells the store its products' precision";
  precision.round_weights();
  const Tensor first = product(store.operand(id));  // the copy is made here
  for (int64_t i = 0; i < w2.numel(); ++i) w2.data<float>()[i] *= 3.0f;
  const Tensor during = product(store.operand(id));
  for (int64_t i = 0; i < expected.numel(); ++i) {
    EXPECT_TRUE(same_bits(first.data<float>()[i], expected.data<float>()[i])) << "element " << i;
    EXPECT_TRUE(same_bits(during.data<float>()[i], expected.data<float>()[i])) << "element " << i;
  }
  precision.restore_weights();  // not restored: they were never rounded
  store.values_written();       // the write is announced: the copy is stale
  const Tensor after = product(store.operand(id));
  for (int64_t i = 0; i < expected.numel(); ++i)
    EXPECT_FALSE(same_bits(after.data<float>()[i], expected.data<float>()[i])) << "element " << i;
}

// A lookup (the token table's) reads what it is given: the store's copy during a round trip, the
// fp32 value outside it (an evaluation reads the master values), so its numbers follow the step.
TEST(MixedPrecision, ALookupReadsTheCopyOnlyDuringTheRoundTrip) {
  ParamStore store;
  build(store);
  MixedPrecision precision(store, Precision::bf16);
  const int id = store.find("w1");
  EXPECT_EQ(store.lookup_operand(id).bf16, nullptr);
  precision.round_weights();
  EXPECT_NE(store.lookup_operand(id).bf16, nullptr);
  precision.restore_weights();
  EXPECT_EQ(store.lookup_operand(id).bf16, nullptr);
  EXPECT_NE(store.operand(id).bf16, nullptr) << "products read the copy either way (the same numbers)";
}

// fp16's GEMMs do not round their operands: every parameter is rounded in place.
TEST(MixedPrecision, Fp16RoundsEveryParameterAndRestoresIt) { expect_round_trip(Precision::fp16, DType::f16); }

// round_gradients rounds the gradients as the storage does; under bf16 it also returns their sum
// of squares (the norm's local sum, from the same pass) unless told not to, under fp16 and fp32
// nothing.
TEST(MixedPrecision, RoundingTheGradientsSumsTheirSquaresUnderBf16) {
  for (const auto& [kind, storage] : {std::pair{Precision::bf16, DType::bf16}, std::pair{Precision::fp16, DType::f16},
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
    if (squares) {
      EXPECT_NEAR(*squares, ops::sum_squares(want), 1e-12 * ops::sum_squares(want));
    }
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

// The update may write the copy's bits as it writes the values (bf16_copy_for_update, then
// values_updated(true)): the next read takes them and does not cast the weights again (a weight
// changed behind the store's back keeps its old bits: the proof no cast ran), until the values
// change again; an update that wrote no bits (values_updated(false)) or any other write
// (values_written) makes the next read cast again. A store multiplying in fp32 offers no copy.
TEST(MixedPrecision, Bf16TakesTheBitsTheUpdateWrote) {
  ParamStore store;
  build(store);
  EXPECT_FALSE(store.bf16_copy_for_update().defined()) << "an fp32 store keeps no copy";
  MixedPrecision precision(store, Precision::bf16);
  const int id = store.find("w2");
  Tensor& w2 = store.value(id);
  const Tensor w2_product = product(store.operand(id));
  Tensor bits = store.bf16_copy_for_update();
  ASSERT_TRUE(bits.defined());
  ASSERT_EQ(bits.numel(), store.numel());
  // The update's writes: new values and their bits; then a value changed without its bits.
  for (int64_t i = 0; i < w2.numel(); ++i) w2.data<float>()[i] *= 2.0f;  // exact: the bits double too
  Tensor flat = store.flat_values();
  ops::cast(bits, flat);
  store.values_updated(/*copy_written=*/true);
  w2.data<float>()[0] += 1.0f;  // behind the copy's back
  precision.round_weights();
  Tensor doubled = w2.clone();
  doubled.data<float>()[0] -= 1.0f;
  const Tensor from_bits = product(store.operand(id));  // reads w2's copy...
  precision.restore_weights();
  const Tensor want_direct = product(doubled);  // ...which is the doubled values' rounding
  for (int64_t i = 0; i < want_direct.numel(); ++i) {
    EXPECT_TRUE(same_bits(from_bits.data<float>()[i], want_direct.data<float>()[i])) << "element " << i;
    EXPECT_FALSE(same_bits(from_bits.data<float>()[i], w2_product.data<float>()[i])) << "element " << i;
  }
  store.values_updated(/*copy_written=*/false);  // an update that wrote no bits: cast from the values
  const Tensor recast = product(store.operand(id));
  EXPECT_FALSE(same_bits(recast.data<float>()[0], from_bits.data<float>()[0])) << "w2[0] += 1 now reaches the product";
  ops::cast(bits, Tensor::zeros({store.numel()}));  // bits that are not the values'...
  store.values_updated(/*copy_written=*/true);
  store.values_written();  // ...withdrawn by a later write
  const Tensor after_change = product(store.operand(id));
  EXPECT_TRUE(same_bits(after_change.data<float>()[0], recast.data<float>()[0])) << "values_written: cast again";

  ParamStore fp16_store;
  build(fp16_store);
  MixedPrecision fp16(fp16_store, Precision::fp16);
  fp16.round_weights();
  fp16.restore_weights();
  EXPECT_FALSE(fp16_store.bf16_copy_for_update().defined());
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
