// The loss scaler on real MPI ranks: an inf or NaN in one rank's gradients makes every rank's
// update() skip the same steps, and the scales stay equal on every rank, step after step.
// ranks: 1 2 4
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "comm/communicator.h"
#include "comm/process_mesh.h"
#include "optim/loss_scaler.h"

using namespace tessera;
using namespace tessera::comm;
using tessera::optim::any_nonfinite;
using tessera::optim::DynamicLossScaler;
using tessera::optim::LossScalerConfig;
using tessera::optim::overflow_anywhere;

namespace {

// This rank's gradients: finite, except element 3 set to `poison` when `poisoned`.
Tensor gradients(bool poisoned, float poison = std::numeric_limits<float>::infinity()) {
  Tensor g = Tensor::zeros({32}, DType::f32);
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = 0.01f * static_cast<float>(i);
  if (poisoned) g.data<float>()[3] = poison;
  return g;
}

// Every rank's value of x, in rank order.
std::vector<float> gathered(Communicator& group, double x) {
  Tensor mine = Tensor::zeros({1}, DType::f32), all = Tensor::zeros({group.size()}, DType::f32);
  mine.data<float>()[0] = static_cast<float>(x);
  group.all_gather(mine, all);
  return std::vector<float>(all.data<float>(), all.data<float>() + group.size());
}

void expect_equal_everywhere(Communicator& group, double x) {
  for (float v : gathered(group, x)) EXPECT_EQ(v, static_cast<float>(x));
}

}  // namespace

TEST(LossScalerAgreement, OneRanksInfSkipsTheStepEverywhere) {
  Communicator world = Communicator::world();
  const int last = world.size() - 1;
  LossScalerConfig c;
  c.hysteresis = 1;
  DynamicLossScaler scaler(c);

  const bool skipped = scaler.update(overflow_anywhere(any_nonfinite(gradients(world.rank() == last)), world));
  EXPECT_TRUE(skipped) << "rank " << world.rank();
  EXPECT_EQ(scaler.scale(), 32768.0);
  expect_equal_everywhere(world, scaler.scale());
  expect_equal_everywhere(world, skipped ? 1.0 : 0.0);
}

TEST(LossScalerAgreement, ScalesStayEqualOverASequenceOfPoisonedSteps) {
  Communicator world = Communicator::world();
  LossScalerConfig c;
  c.hysteresis = 2;
  c.growth_interval = 3;
  DynamicLossScaler scaler(c);
  // Which rank holds a bad gradient at each step (-1: none); ranks beyond the world wrap around.
  const std::vector<int> poisoned_rank = {-1, 3, 0, -1, 1, -1, -1, -1, 2, 2, 2, -1};
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  int64_t skipped = 0;
  for (size_t step = 0; step < poisoned_rank.size(); ++step) {
    const int bad = poisoned_rank[step];
    const bool mine = bad >= 0 && bad % world.size() == world.rank();
    const bool skip = scaler.update(overflow_anywhere(any_nonfinite(gradients(mine, step % 2 ? inf : nan)), world));
    EXPECT_EQ(skip, bad >= 0) << "step " << step << " rank " << world.rank();
    skipped += skip;
    expect_equal_everywhere(world, scaler.scale());
  }
  EXPECT_EQ(scaler.skipped_steps(), skipped);
  // Hand-worked: 1 overflow (kept), 1 more (back-off to 32768), good, 1 tolerated, 3 good (growth
  // to 65536), 3 in a row (back-off twice: 16384), good.
  EXPECT_EQ(scaler.scale(), 16384.0);
}

// The overflow must be agreed over the world, not one mesh axis: a tp group's own check leaves
// the other groups unaware, the world's reaches every rank.
TEST(LossScalerAgreement, TheWorldCheckReachesEveryAxisGroup) {
  Communicator world = Communicator::world();
  const int tp = world.size() >= 2 ? 2 : 1;
  ProcessMesh mesh(MeshShape{1, 0, 1, 1, tp}.resolved(world.size()));
  const int last = world.size() - 1;
  const bool local = any_nonfinite(gradients(world.rank() == last));
  const bool in_poisoned_tp_group = world.rank() / tp == last / tp;
  EXPECT_EQ(overflow_anywhere(local, mesh.group(Axis::tp)), in_poisoned_tp_group);
  EXPECT_TRUE(overflow_anywhere(local, mesh.world()));
}
