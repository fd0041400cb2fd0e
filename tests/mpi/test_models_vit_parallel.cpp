// models::Vit on real ranks against the one-rank model built in the same process: under 1D tensor
// parallelism over the world (every rank the whole batch) the loss, each rank's gradient slices
// and the evaluation equal the serial ones; under ZeRO-3 over the world (each rank a slice of the
// batch) the loss shares and each rank's gradient shard sum to the serial full-batch values.
// Both poolings.
// ranks: 2 4
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/philox.h"
#include "models/vit/vit.h"
#include "parallel/tensor_parallel.h"

using namespace tessera;
using models::Vit;
using models::VitConfig;

namespace {

VitConfig small(const std::string& pool) {
  VitConfig c;
  c.image = 8;
  c.patch = 4;
  c.hidden = 16;
  c.layers = 2;
  c.heads = 4;  // divides by tp 2 and 4
  c.classes = 5;
  c.pool = pool;
  return c;
}

struct Batch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Batch batch_of(const VitConfig& c, int64_t rows) {
  Batch b;
  b.images.resize(rows * c.image * c.image * c.channels);
  philox_fill_normal(b.images.data(), static_cast<int64_t>(b.images.size()), 3, stream_id("images"), 0, 0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) b.labels.push_back(static_cast<int32_t>(philox_bits(3, 9, r)[0] % c.classes));
  b.labels[1] = -1;  // an ignored row
  return b;
}

// max |a - b| over the elements, relative to max |b|.
double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return den > 0 ? num / den : num;
}

class VitParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(VitParallel, TensorParallelEqualsOneRank) {
  comm::Communicator world = comm::Communicator::world();
  parallel::TensorParallel1D tp(world);
  models::ModelLayout layout;
  layout.tensor = &tp;
  const VitConfig cfg = small(GetParam());
  const int64_t rows = 4;
  const Batch b = batch_of(cfg, rows);
  Vit serial(cfg, Device::cpu, 19, rows), split(cfg, Device::cpu, 19, rows, layout);
  const float ls = serial.forward_backward(b.images.data(), b.labels.data(), 1.0f);
  const float lt = split.forward_backward(b.images.data(), b.labels.data(), 1.0f);
  EXPECT_NEAR(lt, ls, 1e-5 * ls);

  const nn::ParamStore& s = serial.params();
  const nn::ParamStore& t = split.params();
  for (int id = 0; id < t.size(); ++id) {
    const nn::ParamSpec& spec = t.spec(id);
    const int sid = s.find(spec.name);
    ASSERT_GE(sid, 0) << spec.name;
    std::vector<double> got, want;
    nn::for_each_logical(spec, [&](int64_t local, int64_t global) {
      got.push_back(t.grad(id).data<float>()[local]);
      want.push_back(s.grad(sid).data<float>()[global]);
    });
    EXPECT_LT(max_rel(got, want), 1e-5) << spec.name << (spec.shard.split() ? " (split)" : " (replicated)");
  }
  const Vit::Eval es = serial.evaluate(b.images.data(), b.labels.data());
  const Vit::Eval et = split.evaluate(b.images.data(), b.labels.data());
  EXPECT_NEAR(et.loss_sum, es.loss_sum, 1e-5 * es.loss_sum);
  EXPECT_EQ(et.correct, es.correct);
  EXPECT_EQ(et.count, es.count);
}

TEST_P(VitParallel, ZeroThreeShardsEqualOneRank) {
  comm::Communicator world = comm::Communicator::world();
  const int n = world.size(), r = world.rank();
  models::ModelLayout layout;
  layout.zero3 = &world;
  const VitConfig cfg = small(GetParam());
  const int64_t rows = 2, image = cfg.image * cfg.image * cfg.channels;
  Batch b = batch_of(cfg, rows * n);
  b.labels[1] = 0;  // every row valid: the mean of the ranks' means is the mean
  Vit serial(cfg, Device::cpu, 23, rows * n), sharded(cfg, Device::cpu, 23, rows, layout);
  const float ls = serial.forward_backward(b.images.data(), b.labels.data(), 1.0f);
  const float mine = sharded.forward_backward(b.images.data() + r * rows * image, b.labels.data() + r * rows,
                                              1.0f / static_cast<float>(n));
  EXPECT_NEAR(world.all_reduce_sum(static_cast<double>(mine) / n), ls, 1e-5 * ls);

  nn::ParamStore& t = sharded.params();
  const int64_t begin = t.shard_begin(), count = t.shard_grads().numel();
  const float* g = t.shard_grads().data<float>();
  const float* want = serial.params().flat_grads().data<float>() + begin;
  std::vector<double> got_v(g, g + count), want_v(want, want + count);
  EXPECT_LT(max_rel(got_v, want_v), 1e-5) << "rank " << r << "'s shard [" << begin << ", " << begin + count << ")";
}

INSTANTIATE_TEST_SUITE_P(Pools, VitParallel, ::testing::Values("cls", "mean"),
                         [](const auto& info) { return info.param; });

}  // namespace
