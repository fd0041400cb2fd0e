// Unit tests of nn::ParamStore: flat-buffer layout, layout-independent Philox initialisation of sharded and padded parameters (the same on any thread count), and the logical_copy / assign_logical round trip.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "nn/param_store.h"

using tessera::DType;
using tessera::Device;
using tessera::Shape;
using tessera::Tensor;
using tessera::nn::Init;
using tessera::nn::ParamStore;
using tessera::nn::Shard;

namespace {

constexpr uint64_t kSeed = 1337;

// The serial value of element `global` of parameter `name` under Init::Normal(std).
float serial_value(const std::string& name, float std, int64_t global) {
  return std * tessera::philox_normal(kSeed, tessera::stream_id(name), static_cast<uint64_t>(global));
}

TEST(ParamStore, FlatLayoutIsContiguousInRegistrationOrder) {
  ParamStore s;
  const int a = s.add("a.weight", {3, 4}, Init::Normal(0.5f), true);
  const int b = s.add("a.bias", {5}, Init::Zeros(), false);
  const int c = s.add("ln.weight", {2, 3, 2}, Init::Ones(), false);
  const int d = s.add("emb.weight", {5, 2}, Init::Normal(1.0f), true, Shard{0, 0, 8});  // padded rows
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(c, 2);
  EXPECT_EQ(d, 3);
  EXPECT_EQ(s.size(), 4);
  EXPECT_EQ(s.spec(a).offset, 0);
  EXPECT_EQ(s.spec(b).offset, 12);
  EXPECT_EQ(s.spec(c).offset, 17);
  EXPECT_EQ(s.spec(d).offset, 29);
  EXPECT_EQ(s.numel(), 29 + 16);
  EXPECT_EQ(s.logical_numel(), 29 + 10);
  EXPECT_EQ(s.spec(d).global_shape, Shape({5, 2}));
  EXPECT_EQ(s.spec(d).local_shape, Shape({8, 2}));
  EXPECT_EQ(s.logical_local_shape(d), Shape({5, 2}));
  EXPECT_EQ(s.spec(a).name, "a.weight");
  EXPECT_TRUE(s.spec(a).weight_decay);
  EXPECT_FALSE(s.spec(b).weight_decay);
  EXPECT_EQ(s.find("ln.weight"), c);
  EXPECT_EQ(s.find("nope"), -1);
  EXPECT_THROW(s.add("a.bias", {1}, Init::Zeros(), false), tessera::Error);  // registered twice
  EXPECT_THROW(s.add("x", {2, 2}, Init::Zeros(), false, Shard{2, 0, 1}), tessera::Error);  // shard dim

  s.allocate(Device::cpu, kSeed);
  EXPECT_EQ(s.flat_values().numel(), s.numel());
  EXPECT_EQ(s.flat_grads().numel(), s.numel());
  const char* vbase = static_cast<const char*>(s.flat_values().raw());
  const char* gbase = static_cast<const char*>(s.flat_grads().raw());
  for (int id = 0; id < s.size(); ++id) {
    EXPECT_EQ(s.value(id).shape(), s.spec(id).local_shape) << s.spec(id).name;
    EXPECT_EQ(static_cast<const char*>(s.value(id).raw()) - vbase, s.spec(id).offset * 4) << s.spec(id).name;
    EXPECT_EQ(static_cast<const char*>(s.grad(id).raw()) - gbase, s.spec(id).offset * 4) << s.spec(id).name;
    if (id + 1 < s.size()) {
      EXPECT_EQ(s.spec(id).offset + s.spec(id).local_shape.numel(), s.spec(id + 1).offset) << "gap after " << id;
    }
  }
  // Grads start at zero; the views write into the flat buffers; zero_grads clears them all.
  for (int64_t i = 0; i < s.numel(); ++i) ASSERT_EQ(s.flat_grads().data<float>()[i], 0.0f);
  s.grad(c).data<float>()[1] = 3.0f;
  EXPECT_EQ(s.flat_grads().data<float>()[18], 3.0f);
  s.value(b).data<float>()[4] = 2.0f;
  EXPECT_EQ(s.flat_values().data<float>()[16], 2.0f);
  s.zero_grads();
  EXPECT_EQ(s.grad(c).data<float>()[1], 0.0f);
  EXPECT_THROW(s.add("late", {1}, Init::Zeros(), false), tessera::Error);  // after allocate
}

TEST(ParamStore, InitKindsAndSeeds) {
  ParamStore s, t;
  for (ParamStore* p : {&s, &t}) {
    p->add("w", {4, 3}, Init::Normal(0.02f), true);
    p->add("ones", {7}, Init::Ones(), false);
    p->add("zeros", {6}, Init::Zeros(), false);
  }
  s.allocate(Device::cpu, kSeed);
  t.allocate(Device::cpu, kSeed + 1);
  int same = 0;
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(s.value(0).data<float>()[i], serial_value("w", 0.02f, i)) << i;
    same += s.value(0).data<float>()[i] == t.value(0).data<float>()[i];
  }
  EXPECT_EQ(same, 0) << "another seed gives other values";
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(s.value(1).data<float>()[i], 1.0f);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(s.value(2).data<float>()[i], 0.0f);
}

// Values depend on (seed, name, global index) only: not on what else is registered, nor where.
TEST(ParamStore, InitIsIndependentOfOffsetAndNeighbours) {
  ParamStore s, t;
  s.add("blocks.0.w", {5, 4}, Init::Normal(0.3f), true);
  t.add("other", {13}, Init::Normal(0.3f), true);
  t.add("blocks.1.w", {5, 4}, Init::Normal(0.3f), true);
  t.add("blocks.0.w", {5, 4}, Init::Normal(0.3f), true);
  s.allocate(Device::cpu, kSeed);
  t.allocate(Device::cpu, kSeed);
  const int ts = t.find("blocks.0.w");
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(s.value(0).data<float>()[i], t.value(ts).data<float>()[i]) << i;
  int same = 0;
  for (int64_t i = 0; i < 20; ++i) same += t.value(ts).data<float>()[i] == t.value(1).data<float>()[i];
  EXPECT_EQ(same, 0) << "another name gives other values";
}

// Shard{0, start, extent} holds exactly rows start.. of the unsharded parameter; rows past the global
// extent are padding (zero).
TEST(ParamStore, RowShardsHoldTheSerialRowsAndZeroPadding) {
  const int64_t rows = 10, cols = 3;
  ParamStore full;
  full.add("w", {rows, cols}, Init::Normal(0.5f), true);
  full.allocate(Device::cpu, kSeed);
  const float* f = full.value(0).data<float>();
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(f[i], serial_value("w", 0.5f, i));

  for (const int64_t start : {0, 4, 8}) {
    ParamStore s;
    s.add("pad_before", {3}, Init::Normal(1.0f), true);  // a neighbour, so offsets differ from `full`
    const int id = s.add("w", {rows, cols}, Init::Normal(0.5f), true, Shard{0, start, 4});
    s.allocate(Device::cpu, kSeed);
    EXPECT_EQ(s.value(id).shape(), Shape({4, cols}));
    const int64_t valid = std::min<int64_t>(4, rows - start);
    EXPECT_EQ(s.logical_local_shape(id), Shape({valid, cols}));
    const float* p = s.value(id).data<float>();
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        if (r < valid)
          EXPECT_EQ(p[r * cols + c], f[(start + r) * cols + c]) << "start " << start << " row " << r;
        else
          EXPECT_EQ(p[r * cols + c], 0.0f) << "padding row " << r << " of the shard at " << start;
      }
    // Shards of a row tensor with Ones init: padding still zero.
    ParamStore o;
    const int oid = o.add("ones", {rows}, Init::Ones(), false, Shard{0, start, 4});
    o.allocate(Device::cpu, kSeed);
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(o.value(oid).data<float>()[r], r < valid ? 1.0f : 0.0f);
  }
}

// A shard along an inner dimension: columns [start, start + extent) of every row.
TEST(ParamStore, ColumnShardsHoldTheSerialColumns) {
  ParamStore full, s;
  full.add("w", {4, 6}, Init::Normal(1.0f), true);
  const int id = s.add("w", {4, 6}, Init::Normal(1.0f), true, Shard{1, 4, 2, 1, 3});  // cols 4, 5
  full.allocate(Device::cpu, kSeed);
  s.allocate(Device::cpu, kSeed);
  EXPECT_EQ(s.value(id).shape(), Shape({4, 2}));
  EXPECT_EQ(s.logical_local_shape(id), Shape({4, 2}));
  const float* f = full.value(0).data<float>();
  const float* p = s.value(id).data<float>();
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(p[r * 2 + 0], f[r * 6 + 4]) << r;
    EXPECT_EQ(p[r * 2 + 1], f[r * 6 + 5]) << r;
  }
  // In the global flattening the slice is one run per row.
  const auto runs = tessera::nn::logical_runs(s.spec(id), 1, 7);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].global_begin, 5);   // row 0, column 5 (local element 1)
  EXPECT_EQ(runs[0].length, 1);
  EXPECT_EQ(runs[1].global_begin, 10);  // row 1, columns 4, 5
  EXPECT_EQ(runs[1].length, 2);
  EXPECT_EQ(runs[3].global_begin, 22);  // row 3, column 4 (local element 6)
  EXPECT_EQ(runs[3].length, 1);
  // Only a first-dimension shard may be padded: a checkpoint takes the logical part as a prefix.
  ParamStore bad;
  EXPECT_THROW(bad.add("w", {4, 6}, Init::Normal(1.0f), true, Shard{1, 4, 3}), tessera::Error);
}

// A fused QKV weight [3C, C] split over 2 ranks inside each of its 3 blocks: rank 1 holds rows
// [g*C + C/2, (g+1)*C) for g = q, k, v, stored block after block, with their serial values.
TEST(ParamStore, BlockShardsHoldTheSameSliceOfEveryBlock) {
  constexpr int64_t c = 4;
  ParamStore full, s;
  full.add("qkv", {3 * c, c}, Init::Normal(1.0f), true);
  const int id = s.add("qkv", {3 * c, c}, Init::Normal(1.0f), true, Shard{0, c / 2, c / 2, 3, 2});
  full.allocate(Device::cpu, kSeed);
  s.allocate(Device::cpu, kSeed);
  EXPECT_EQ(s.value(id).shape(), Shape({3 * c / 2, c}));
  EXPECT_TRUE(s.spec(id).shard.split());
  const float* f = full.value(0).data<float>();
  const float* p = s.value(id).data<float>();
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t j = 0; j < c / 2; ++j)
      for (int64_t k = 0; k < c; ++k)
        EXPECT_EQ(p[(g * c / 2 + j) * c + k], f[(g * c + c / 2 + j) * c + k]) << g << " " << j << " " << k;
  const auto runs = tessera::nn::logical_runs(s.spec(id), 0, s.value(id).numel());
  ASSERT_EQ(runs.size(), 3u);
  for (int64_t g = 0; g < 3; ++g) {
    EXPECT_EQ(runs[g].global_begin, (g * c + c / 2) * c);
    EXPECT_EQ(runs[g].local_begin, g * c / 2 * c);
    EXPECT_EQ(runs[g].length, c / 2 * c);
  }
  // A dimension that does not split into the blocks is refused.
  ParamStore bad;
  EXPECT_THROW(bad.add("qkv", {10, c}, Init::Normal(1.0f), true, Shard{0, 0, 1, 3, 2}), tessera::Error);
}

// A block of a matrix (the grid layouts' weights): rows [2, 4) of each of 2 row blocks (dim 0,
// groups 2) and columns [3, 6) (dim2 = 1) of an [8, 6] weight: the serial values, one run per row.
TEST(ParamStore, MatrixBlocksHoldTheSerialBlockAndWriteOneRunPerRow) {
  ParamStore full, s;
  full.add("w", {8, 6}, Init::Normal(1.0f), true);
  Shard block{0, 2, 2, 2, 4};
  block.dim2 = 1;
  block.start2 = 3;
  block.local_extent2 = 3;
  const int id = s.add("w", {8, 6}, Init::Normal(1.0f), true, block);
  full.allocate(Device::cpu, kSeed);
  s.allocate(Device::cpu, kSeed);
  EXPECT_EQ(s.value(id).shape(), Shape({4, 3}));
  EXPECT_EQ(s.logical_local_shape(id), Shape({4, 3}));
  const float* f = full.value(0).data<float>();
  const float* p = s.value(id).data<float>();
  const int64_t rows[] = {2, 3, 6, 7};  // global rows of the local rows, block after block
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(p[r * 3 + c], f[rows[r] * 6 + 3 + c]) << r << " " << c;
  const auto runs = tessera::nn::logical_runs(s.spec(id), 1, 12);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].global_begin, 2 * 6 + 4);  // local element 1: row 2, column 4
  EXPECT_EQ(runs[0].local_begin, 1);
  EXPECT_EQ(runs[0].length, 2);
  for (int64_t r = 1; r < 4; ++r) {
    EXPECT_EQ(runs[r].global_begin, rows[r] * 6 + 3) << r;
    EXPECT_EQ(runs[r].local_begin, r * 3) << r;
    EXPECT_EQ(runs[r].length, 3) << r;
  }
  // The second split must lie inside its dimension.
  ParamStore bad;
  block.start2 = 4;
  EXPECT_THROW(bad.add("w", {8, 6}, Init::Normal(1.0f), true, block), tessera::Error);
}

// Parameters past fill_init's parallel threshold (2^16 elements) are filled on the OpenMP threads:
// whole, padded row shards, block shards and matrix blocks hold the serial values on 1 and 3
// threads, and the padding stays zero.
TEST(ParamStore, InitIsTheSameOnAnyThreadCount) {
  constexpr int64_t rows = 301, cols = 1024;  // 301 rows split unevenly; every local tensor >= 2^16
  auto build = [&](int threads) {
    const int previous = omp_get_max_threads();
    omp_set_num_threads(threads);
    ParamStore s;
    s.add("whole", {rows, cols}, Init::Normal(0.02f), true);
    s.add("rows", {rows, cols}, Init::Normal(0.5f), true, Shard{0, 200, 128});  // 101 valid rows, 27 padding
    s.add("blocks", {3 * 128, cols}, Init::Normal(1.0f), true, Shard{0, 64, 64, 3, 2});
    s.add("matrix", {rows, cols}, Init::Normal(1.0f), true, Shard{0, 100, 151, 1, 2, 1, 256, 512});
    s.allocate(Device::cpu, kSeed);
    omp_set_num_threads(previous);
    return s;
  };
  ParamStore one = build(1), three = build(3);
  ASSERT_EQ(one.numel(), three.numel());
  const float* a = one.flat_values().data<float>();
  const float* b = three.flat_values().data<float>();
  for (int64_t i = 0; i < one.numel(); ++i) ASSERT_EQ(a[i], b[i]) << "flat element " << i;
  // Spot checks against the serial definition, including a padding row of the row shard.
  EXPECT_EQ(a[rows * cols - 1], serial_value("whole", 0.02f, rows * cols - 1));
  const int64_t row_shard = one.spec(1).offset;
  EXPECT_EQ(a[row_shard + 5 * cols + 7], serial_value("rows", 0.5f, (200 + 5) * cols + 7));
  EXPECT_EQ(a[row_shard + 110 * cols], 0.0f);
  const int64_t matrix = one.spec(3).offset;
  EXPECT_EQ(a[matrix + 2 * 512 + 3], serial_value("matrix", 1.0f, (100 + 2) * cols + 256 + 3));
}

TEST(ParamStore, LogicalCopyAndAssignRoundTrip) {
  ParamStore s;
  const int w = s.add("emb", {5, 2}, Init::Normal(1.0f), true, Shard{0, 0, 8});
  const int b = s.add("b", {3}, Init::Zeros(), false);
  s.allocate(Device::cpu, kSeed);

  Tensor l = s.logical_copy(s.value(w), w);
  EXPECT_EQ(l.shape(), Shape({5, 2}));
  EXPECT_NE(l.raw(), s.value(w).raw()) << "a copy, not a view";
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(l.data<float>()[i], serial_value("emb", 1.0f, i));

  // New logical values in; garbage in the padding rows is cleared by assign_logical.
  for (int64_t i = 0; i < 10; ++i) l.data<float>()[i] = 0.25f * static_cast<float>(i) - 1.0f;
  for (int64_t i = 10; i < 16; ++i) s.value(w).data<float>()[i] = 7.0f;
  s.assign_logical(s.value(w), w, l);
  const float* p = s.value(w).data<float>();
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(p[i], 0.25f * static_cast<float>(i) - 1.0f);
  for (int64_t i = 10; i < 16; ++i) EXPECT_EQ(p[i], 0.0f) << "padding element " << i;
  Tensor back = s.logical_copy(s.value(w), w);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(back.data<float>()[i], l.data<float>()[i]);

  // The same on the gradient buffer, and an unsharded parameter.
  Tensor gb = Tensor::empty({3});
  for (int i = 0; i < 3; ++i) gb.data<float>()[i] = static_cast<float>(i + 1);
  s.assign_logical(s.grad(b), b, gb);
  EXPECT_EQ(s.flat_grads().data<float>()[16 + 2], 3.0f);
  EXPECT_EQ(s.logical_copy(s.grad(b), b).data<float>()[1], 2.0f);
  EXPECT_EQ(s.flat_values().data<float>()[16], 0.0f) << "grad assignment leaves values alone";

  EXPECT_THROW(s.assign_logical(s.value(w), w, Tensor::zeros({8, 2})), tessera::Error) << "padded shape";
  EXPECT_THROW(s.assign_logical(s.value(b), b, Tensor::zeros({4})), tessera::Error);
}

}  // namespace
