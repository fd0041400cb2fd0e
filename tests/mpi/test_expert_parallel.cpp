// Expert parallelism (parallel/expert_parallel.h) on real ranks: the world is the ep group; each
// rank routes its share of the same global tokens through an MoE layer whose experts are split
// over the ranks, and its output, loss share, statistics and every gradient (gathered to global
// shape) must equal the one-rank layer's on all the tokens. Also: an expert no token chooses, a
// router crowding one expert with capacity dropping, the bytes CommStats counts against the
// formula of expert_parallel.h, no allocation on a second call, experts that do not split, and
// ep x token shards (sequence parallelism's, split_gather's) against the one-rank layer.
// ranks: 1 2 4
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "../unit/gradcheck.h"
#include "../unit/kernel_test_util.h"
#include "comm/communicator.h"
#include "core/allocator.h"
#include "nn/moe.h"
#include "parallel/expert_parallel.h"
#include "split_comm.h"

using namespace tessera;
using tessera::testing::max_rel_error;

namespace {

constexpr int64_t kChannels = 8, kHidden = 12, kTokens = 24;  // tokens over the group: any of 1, 2, 4 ranks
constexpr double kTol = 1e-5;

enum class Router { random, starve_last_expert, crowd_first_expert };

struct Case {
  const char* name;
  int k;
  float capacity_factor;
  int64_t experts;
  Router router;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

nn::MoeConfig config(const Case& c) {
  nn::MoeConfig m;
  m.channels = kChannels;
  m.hidden = kHidden;
  m.experts = c.experts;
  m.router = {c.k, c.capacity_factor, 0.1f, 0.05f, 0.02f};
  return m;
}

// Gives every parameter the values of one global tensor (the same on every rank and layout),
// each rank taking its slice: biases nonzero, and the router biased as the case asks (with x's
// column 0 set to 1, the router weight's column 0 acts as a per-expert bias).
void set_parameters(nn::ParamStore& store, const Case& c) {
  for (int id = 0; id < store.size(); ++id) {
    const nn::ParamSpec& spec = store.spec(id);
    Tensor global = tessera::testing::normal(spec.global_shape, "param." + spec.name, 0.4f);
    if (spec.name.ends_with("router.weight")) {
      const int64_t e = c.experts;
      if (c.router == Router::starve_last_expert) global.data<float>()[(e - 1) * kChannels] = -40.0f;
      if (c.router == Router::crowd_first_expert) global.data<float>()[0] = 6.0f;
    }
    float* local = store.value(id).data<float>();
    nn::for_each_logical(spec, [&](int64_t l, int64_t g) { local[l] = global.data<float>()[g]; });
  }
}

// One layer with its buffers for `rows` token rows.
struct Layer {
  nn::ParamStore store;
  nn::MoeFeedForward moe;
  nn::MoeFeedForward::Saved saved;
  nn::MoeFeedForward::Scratch scratch;
  Tensor y, dx;
  float loss = 0;

  Layer(const Case& c, const nn::ExpertLayout& layout, int64_t rows, int64_t sequences = 1) {
    moe = nn::MoeFeedForward(store, "blocks.0.moe", config(c), layout);
    store.allocate(Device::cpu, 11);
    set_parameters(store, c);
    saved = moe.allocate(rows, Device::cpu, sequences);
    scratch = moe.allocate_scratch(rows);
    y = Tensor::empty({rows, kChannels});
    dx = Tensor::empty({rows, kChannels});
  }
  void step(const Tensor& x, const Tensor& dy) {
    store.zero_grads();
    loss = moe.forward(y, x, saved, scratch);
    moe.backward(dx, dy, x, saved, scratch, 0.7f);
  }
};

struct Inputs {
  Tensor x, dy;  // global [kTokens, C], the same on every rank
};

Inputs make_inputs(const Case& c) {
  Inputs in{tessera::testing::random_tensor({kTokens, kChannels}, 13, 1),
            tessera::testing::random_tensor({kTokens, kChannels}, 13, 2)};
  if (c.router != Router::random)
    for (int64_t t = 0; t < kTokens; ++t) in.x.data<float>()[t * kChannels] = 1.0f;
  return in;
}

class ExpertParallelParity : public ::testing::TestWithParam<Case> {};

TEST_P(ExpertParallelParity, MatchesTheOneRankLayerOnAllTokens) {
  const Case c = GetParam();
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const int64_t rows = kTokens / n;
  const Inputs in = make_inputs(c);
  const Tensor my_x = in.x.rows(r * rows, rows).clone(), my_dy = in.dy.rows(r * rows, rows).clone();

  Layer ref(c, nn::ExpertLayout::single(), kTokens);
  ref.step(in.x, in.dy);
  parallel::ExpertParallel ep(world);
  Layer par(c, ep, rows);
  ASSERT_EQ(par.moe.local_experts(), c.experts / n);
  ASSERT_EQ(par.moe.first_local_expert(), r * (c.experts / n));
  par.step(my_x, my_dy);

  // Statistics: the whole group's, on every rank.
  const nn::MoeStats &want = ref.saved.stats, &got = par.saved.stats;
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.capacity, want.capacity);
  EXPECT_EQ(got.dropped, want.dropped);
  EXPECT_EQ(got.routed, want.routed);
  EXPECT_EQ(got.kept, want.kept);
  if (c.capacity_factor > 0) {
    EXPECT_GT(want.dropped, 0) << "the case should drop tokens";
  }
  if (c.router == Router::starve_last_expert) {
    EXPECT_EQ(want.routed[c.experts - 1], 0) << "no token should choose the last expert";
  }
  if (c.router == Router::crowd_first_expert) {
    EXPECT_GT(want.routed[0], kTokens / 2) << "most tokens should choose expert 0";
  }

  // Output and dx: this rank's rows of the one-rank layer's.
  EXPECT_LT(max_rel_error(par.y, ref.y.rows(r * rows, rows).clone()), kTol) << "y, rank " << r;
  EXPECT_LT(max_rel_error(par.dx, ref.dx.rows(r * rows, rows).clone()), kTol) << "dx, rank " << r;
  // The loss: shares over the group add up to the one-rank loss.
  const double loss = world.all_reduce_sum(static_cast<double>(par.loss));
  EXPECT_NEAR(loss, ref.loss, kTol * std::max(1.0, std::fabs(static_cast<double>(ref.loss))));

  // Gradients in global shape: the router's summed over the group (each rank saw its tokens), the
  // experts' gathered (each rank holds a block of experts, complete over the group).
  for (int id = 0; id < par.store.size(); ++id) {
    const nn::ParamSpec& spec = par.store.spec(id);
    const int ref_id = ref.store.find(spec.name);
    Tensor grad = par.store.grad(id).clone();
    Tensor global = Tensor::empty(spec.global_shape);
    if (spec.expert && n > 1) {  // split over the ep group along the expert dimension
      world.all_gather(grad, global);
    } else {
      world.all_reduce_sum(grad);
      global.copy_from(grad);
    }
    EXPECT_LT(max_rel_error(global.reshape({spec.global_shape.numel() / spec.global_shape[-1], spec.global_shape[-1]}),
                            ref.store.grad(ref_id).reshape(
                                {spec.global_shape.numel() / spec.global_shape[-1], spec.global_shape[-1]})),
              kTol)
        << spec.name << ", rank " << r;
  }

  // An expert nobody chose: zero gradient on the rank that holds it (and its rows received: 0).
  if (c.router == Router::starve_last_expert) {
    const int64_t last_local = par.moe.local_experts() - 1;
    if (r == n - 1) {
      EXPECT_EQ(par.saved.plan.traffic.expert_rows(r, last_local), 0);
      if (par.moe.local_experts() == 1) {
        EXPECT_EQ(par.saved.plan.traffic.received_by(r), 0) << "this rank's only expert receives nothing";
      }
      for (int id : par.moe.expert_param_ids()) {
        const Tensor& g = par.store.grad(id);
        const int64_t per_expert = g.numel() / par.moe.local_experts();
        for (int64_t i = last_local * per_expert; i < g.numel(); ++i)
          ASSERT_EQ(g.data<float>()[i], 0.0f) << par.store.spec(id).name << " of the unchosen expert";
      }
    }
  }
}

// All-to-all bytes per pass = 4 C (S + R) on each rank (S rows it routes, R rows its experts
// receive), 8 C K over the group (K kept assignments); the counts all-gather: ep (k E + 1) int32.
TEST_P(ExpertParallelParity, CommunicatesTheBytesOfTheFormula) {
  const Case c = GetParam();
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const int64_t rows = kTokens / n;
  const Inputs in = make_inputs(c);
  const Tensor my_x = in.x.rows(r * rows, rows).clone(), my_dy = in.dy.rows(r * rows, rows).clone();
  parallel::ExpertParallel ep(world);
  Layer par(c, ep, rows);
  const comm::OpStats &a2a = world.stats().op(comm::CommOp::all_to_all),
                      &gather = world.stats().op(comm::CommOp::all_gather);

  world.stats().reset();
  par.loss = par.moe.forward(par.y, my_x, par.saved, par.scratch);
  const nn::ExpertTraffic& t = par.saved.plan.traffic;
  const int64_t sent = t.sent_by(r), received = t.received_by(r);
  const int64_t forward_a2a = a2a.bytes, forward_calls = a2a.calls, gather_bytes = gather.bytes,
                gather_calls = gather.calls, forward_total = world.stats().total_bytes();
  world.stats().reset();
  par.moe.backward(par.dx, my_dy, my_x, par.saved, par.scratch, 0.7f);
  const int64_t backward_a2a = a2a.bytes, backward_calls = a2a.calls, backward_total = world.stats().total_bytes();

  const int64_t per_pass = 4 * kChannels * (sent + received);
  if (n == 1) {
    EXPECT_EQ(forward_total + backward_total, 0) << "a group of one exchanges nothing";
    return;
  }
  EXPECT_EQ(forward_calls, 2) << "dispatch and combine";
  EXPECT_EQ(backward_calls, 2);
  EXPECT_EQ(forward_a2a, per_pass) << "rank " << r << ": S = " << sent << ", R = " << received;
  EXPECT_EQ(backward_a2a, per_pass) << "rank " << r;
  EXPECT_EQ(gather_calls, 1) << "one counts exchange per forward";
  EXPECT_EQ(gather_bytes, n * (c.k * c.experts + 1) * 4);
  EXPECT_EQ(forward_total, per_pass + gather_bytes) << "nothing else is sent forward";
  EXPECT_EQ(backward_total, per_pass) << "backward sends rows only";
  // Over the group: every kept assignment crosses twice per pass.
  int64_t kept = 0;
  for (int64_t k : par.saved.stats.kept) kept += k;
  const double group = world.all_reduce_sum(static_cast<double>(forward_a2a));
  EXPECT_EQ(static_cast<int64_t>(group), 8 * kChannels * kept);
}

// A second step allocates nothing, and gives the same results.
TEST_P(ExpertParallelParity, SecondStepAllocatesNothing) {
  const Case c = GetParam();
  comm::Communicator world = comm::Communicator::world();
  const int r = world.rank(), n = world.size();
  const int64_t rows = kTokens / n;
  const Inputs in = make_inputs(c);
  const Tensor my_x = in.x.rows(r * rows, rows).clone(), my_dy = in.dy.rows(r * rows, rows).clone();
  parallel::ExpertParallel ep(world);
  Layer par(c, ep, rows);
  par.step(my_x, my_dy);
  const Tensor y1 = par.y.clone(), g1 = par.store.flat_grads().clone();
  const int64_t allocations = memory_stats(Device::cpu).allocations;
  par.step(my_x, my_dy);
  EXPECT_EQ(memory_stats(Device::cpu).allocations, allocations);
  EXPECT_EQ(max_rel_error(par.y, y1), 0.0);
  EXPECT_EQ(max_rel_error(par.store.flat_grads().reshape({1, g1.numel()}), g1.reshape({1, g1.numel()})), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Routers, ExpertParallelParity,
    ::testing::Values(Case{"top1_8experts", 1, 0.0f, 8, Router::random},
                      Case{"top2_8experts", 2, 0.0f, 8, Router::random},
                      Case{"top1_capacity", 1, 1.0f, 4, Router::random},
                      Case{"top2_capacity", 2, 1.0f, 8, Router::random},
                      Case{"top2_starved_expert", 2, 0.0f, 4, Router::starve_last_expert},
                      Case{"top1_starved_expert_capacity", 1, 1.25f, 8, Router::starve_last_expert},
                      Case{"top1_crowded_expert_capacity", 1, 1.0f, 4, Router::crowd_first_expert},
                      Case{"top2_crowded_expert_capacity", 2, 1.0f, 4, Router::crowd_first_expert}),
    case_name);

// Token shards (nn/expert_layout.h): the world as ep x 2 shards (shards inner, as the mesh puts sp
// inside ep), 4 sequences of 6 positions over the ep group. Shards of each sequence (sp: rank
// (i, s) holds positions [3 s, 3 s + 3) of ep rank i's sequences) or of the rows (split_gather:
// a contiguous quarter or half). Output, dx, statistics, the loss shares and every gradient (the
// experts' summed over the shards and gathered over ep) equal the one-rank layer's on all tokens.
TEST_P(ExpertParallelParity, TokenShardsMatchTheOneRankLayer) {
  const Case c = GetParam();
  comm::Communicator world = comm::Communicator::world();
  if (world.size() == 1) GTEST_SKIP() << "token shards need 2 or 4 ranks (ep 1 or 2 x 2 shards)";
  const int shards = 2, ep_size = world.size() / shards, i = world.rank() / shards, s = world.rank() % shards;
  ASSERT_EQ(ep_size * shards, world.size());
  const int64_t seq = 6, sequences = 4 / ep_size, half = seq / shards, rows = sequences * half;
  ASSERT_EQ(ep_size * sequences * seq, kTokens);
  SplitComm ep_comm(s, i), shard_comm(100 + i, s);
  comm::Communicator ep_group(ep_comm.get(), "ep"), shard_group(shard_comm.get(), "sp");
  const Inputs in = make_inputs(c);
  Layer ref(c, nn::ExpertLayout::single(), kTokens);
  ref.step(in.x, in.dy);

  for (bool each_sequence : {true, false}) {
    SCOPED_TRACE(each_sequence ? "sp shards" : "split_gather shards");
    auto global_row = [&](int64_t t) -> int64_t {
      if (!each_sequence) return (i * shards + s) * rows + t;
      return (i * sequences + t / half) * seq + s * half + t % half;
    };
    Tensor my_x = Tensor::empty({rows, kChannels}), my_dy = Tensor::empty({rows, kChannels});
    Tensor want_y = Tensor::empty({rows, kChannels}), want_dx = Tensor::empty({rows, kChannels});
    for (int64_t t = 0; t < rows; ++t) {
      my_x.rows(t, 1).copy_from(in.x.rows(global_row(t), 1));
      my_dy.rows(t, 1).copy_from(in.dy.rows(global_row(t), 1));
      want_y.rows(t, 1).copy_from(ref.y.rows(global_row(t), 1));
      want_dx.rows(t, 1).copy_from(ref.dx.rows(global_row(t), 1));
    }
    parallel::ExpertParallel layout(ep_group, &shard_group, each_sequence);
    ASSERT_EQ(layout.group_size(), world.size());
    Layer par(c, layout, rows, sequences);
    par.step(my_x, my_dy);

    const nn::MoeStats &want = ref.saved.stats, &got = par.saved.stats;
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.capacity, want.capacity);
    EXPECT_EQ(got.dropped, want.dropped);
    EXPECT_EQ(got.routed, want.routed);
    EXPECT_EQ(got.kept, want.kept);
    EXPECT_LT(max_rel_error(par.y, want_y), kTol) << "y, rank " << world.rank();
    EXPECT_LT(max_rel_error(par.dx, want_dx), kTol) << "dx, rank " << world.rank();
    const double loss = world.all_reduce_sum(static_cast<double>(par.loss));
    EXPECT_NEAR(loss, ref.loss, kTol * std::max(1.0, std::fabs(static_cast<double>(ref.loss))));
    for (int id = 0; id < par.store.size(); ++id) {
      const nn::ParamSpec& spec = par.store.spec(id);
      Tensor grad = par.store.grad(id).clone();
      Tensor global = Tensor::empty(spec.global_shape);
      if (spec.expert && ep_size > 1) {  // this shard's tokens' share of this ep rank's experts
        shard_group.all_reduce_sum(grad);
        ep_group.all_gather(grad, global);
      } else {
        world.all_reduce_sum(grad);
        global.copy_from(grad);
      }
      const int64_t last = spec.global_shape[-1], rows_of = spec.global_shape.numel() / last;
      EXPECT_LT(max_rel_error(global.reshape({rows_of, last}),
                              ref.store.grad(ref.store.find(spec.name)).reshape({rows_of, last})),
                kTol)
          << spec.name << ", rank " << world.rank();
    }
  }
}

TEST(ExpertParallel, ExpertsThatDoNotSplitAreRefusedNamingBothNumbers) {
  comm::Communicator world = comm::Communicator::world();
  if (world.size() == 1) GTEST_SKIP() << "any expert count splits over one rank";
  parallel::ExpertParallel ep(world);
  const int64_t experts = 2 * world.size() + 1;
  Case c{"odd", 1, 0.0f, experts, Router::random};
  nn::ParamStore store;
  try {
    nn::MoeFeedForward moe(store, "blocks.2.moe", config(c), ep);
    ADD_FAILURE() << "no error for " << experts << " experts over " << world.size() << " ranks";
  } catch (const Error& e) {
    const std::string want = "MoE layer blocks.2.moe: " + std::to_string(experts) +
                             " experts do not split evenly over --ep " + std::to_string(world.size());
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

}  // namespace
