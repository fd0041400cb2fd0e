// The time model (plan/time_model.h) on a hand-written machine file: a pure compute layout takes
// its FLOPs over the rate exactly, doubling the bandwidth halves the communication, the pipeline's
// time is the schedule's simulated makespan with each stage's own times; a ViT's step counted by
// hand; machine files are checked before they are trusted; the calibration window that measures a
// waiting rank's share keeps half of each CPU's ranks computing.
// On ranks sharing cores (cores_per_node below the ranks), nothing overlaps and the bubble is filled.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>
#include <string>

#include "core/error.h"
#include "plan/calibration.h"
#include "plan/machine_model.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"
#include "plan/time_model.h"

using namespace tessera;

namespace {

std::string num(double x) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

// One GEMM class at `rate` FLOP/s, attention at the same rate, free kernels, collectives of
// latency 0 and `per_byte` seconds per byte on groups of 2 and 4.
std::string machine_json(double rate, double per_byte, double latency = 0, double operand_bytes_per_s = 0) {
  const std::string fit = "\"latency_s\": " + num(latency) + ", \"seconds_per_byte\": " +
                          num(per_byte);
  std::string colls;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}) {
    colls += std::string(colls.empty() ? "" : ", ") + "\"" + op + "\": [{\"group_size\": 2, " + fit +
             "}, {\"group_size\": 4, " + fit + "}]";
  }
  const std::string r = num(rate);
  return "{\"format\": \"tessera-machine\", \"format_version\": 1,"
         " \"machine\": {\"host\": \"test\", \"cpu\": \"hand-written\", \"gemm_library\": \"none\", \"created\": \"now\","
         " \"threads_per_rank\": 1, \"ranks\": 4, \"ranks_per_node\": 4, \"nodes\": 1},"
         " \"gemm\": {\"f32\": [{\"class\": \"all\", \"max_flops\": 1e30, \"flops_per_s\": " + r + "}]},"
         " \"attention_flops_per_s\": " + r + ", \"copy_bytes_per_s\": 1e9, \"kernel_call_s\": 0," +
         (operand_bytes_per_s > 0 ? " \"operand_bytes_per_s\": " + num(operand_bytes_per_s) + "," : "") +
         " \"kernel_seconds_per_element\": {\"norm\": 0, \"softmax\": 0, \"elementwise\": 0, \"adamw\": 0},"
         " \"collectives\": {\"intra_node\": {" + colls + "}}}";
}

// `m` with cores_per_node set (as a calibration records it).
plan::MachineModel with_cores(plan::MachineModel m, int cores) {
  m.cores_per_node = cores;
  return m;
}

plan::GptRun tiny_run(int layers, int pp, int tp, int64_t micro_batches) {
  plan::GptRun run;
  run.model.layers = layers;
  run.model.hidden = 64;
  run.model.heads = 4;
  run.model.vocab = 64;
  run.model.max_seq = 32;
  run.seq = 32;
  run.micro_batch = 2;
  run.micro_batches = micro_batches;
  run.mesh.pp = pp;
  run.mesh.tp = tp;
  run.mesh.dp = 1;
  return run;
}

}  // namespace

TEST(TimeModel, PureComputeIsFlopsOverTheRatePlusOperandTraffic) {
  const double rate = 1e10, operand_rate = 2e9;
  const plan::MachineModel m = plan::parse_machine_json(machine_json(rate, 1e-9, 0, operand_rate), "test");
  const plan::GptRun run = tiny_run(3, 1, 1, 1);
  const plan::StepTime t = plan::predict_step(run, m, 1);
  // By hand: N = B T = 64 rows, C = 64, V = 64 (already a multiple of 64). Forward GEMMs: each
  // block 2 N (3C + C + 4C + 4C) C = 24 N C^2, the head 2 N C V; backward twice that. Causal
  // attention forward 2 B T^2 C per block, backward 2.5 times that.
  const double n = 64, c = 64, v = 64, layers = 3;
  const double gemm = layers * 24 * n * c * c + 2 * n * c * v;
  const double attention = layers * 2 * 2 * 32.0 * 32.0 * c;
  const double flops = 3 * gemm + (1 + plan::kAttentionBackward) * attention;
  EXPECT_DOUBLE_EQ(t.flops, flops);
  // Each product [m, k] x [k, n] also reads and writes its three operands once (f32, 4 bytes) at
  // operand_bytes_per_s, forward and twice backward.
  const auto operands = [](double rows, double in, double out) { return rows * in + in * out + rows * out; };
  const double block = operands(n, c, 3 * c) + operands(n, c, c) + operands(n, c, 4 * c) + operands(n, 4 * c, c);
  const double traffic = 3 * 4 * (layers * block + operands(n, c, v)) / operand_rate;
  EXPECT_NEAR(t.step_s, flops / rate + traffic, 1e-12 * flops / rate);
  EXPECT_EQ(t.comm.size(), 0u);
  EXPECT_EQ(t.bubble_s, 0.0);
}

// A ViT's step by hand: its blocks' GEMMs as a GPT's (MLP ratio 2), attention over the whole square
// (no causal mask), the patch embedding's GEMM over the patches and the classifier over the pooled
// rows; at sp 2 the pooled rows are all-reduced once per micro-batch.
TEST(TimeModel, VitIsItsBlocksWithoutTheMaskPatchEmbeddingAndClassifier) {
  const double rate = 1e10;
  const plan::MachineModel m = plan::parse_machine_json(machine_json(rate, 1e-9), "test");  // no operand traffic
  plan::VitRun run;
  run.model.image = 16;  // 4 x 4 patches of 4 x 4 x 3 pixels, and the class token: T = 17
  run.model.channels = 3;
  run.model.patch = 4;
  run.model.hidden = 64;
  run.model.heads = 4;
  run.model.layers = 3;
  run.model.mlp_ratio = 2;
  run.model.classes = 10;
  run.micro_batch = 2;
  run.mesh.dp = 1;
  const plan::StepTime t = plan::predict_step(run, m, 1);
  const double b = 2, tokens = 17, n = b * tokens, c = 64, layers = 3;
  // Per block 2 N (3C + C + 2C + 2C) C = 16 N C^2; the embedding 2 (B x 16) C (48); the head 2 B 10 C.
  const double gemm = layers * 16 * n * c * c + 2 * b * 16 * c * 48 + 2 * b * 10 * c;
  const double attention = layers * 4 * b * tokens * tokens * c;
  const double flops = 3 * gemm + (1 + plan::kAttentionBackward) * attention;
  EXPECT_DOUBLE_EQ(t.flops, flops);
  EXPECT_NEAR(t.step_s, flops / rate, 1e-12 * flops / rate);
  EXPECT_EQ(t.comm.size(), 0u);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, n / t.step_s);
}

// A ViT under grid tensor parallelism moves the bytes its runs count (the metrics' comm_bytes at
// step 2 of tests/parity/memory_planner_vit.sh's model: 4 layers, hidden 32, 4 heads, 12 x 12 x 3
// images in 4 x 4 patches with the class token, 5 classes, global batch 8), less the 24 bytes of
// per-step scalars the model leaves out (the loss, 8, and the trainer's step figures, 16; the
// gradient norm's 8 it counts): the blocks' grid linears and split norms as a GPT's, the
// head's partial logits all-reduced over the feature ranks, the final norm split like a block's, the
// vectors' gradients summed over the grid's rows. 2d at tp 4 (516804 measured), 2.5d at tp 8 depth 2
// (393052), 3d at tp 8 (405340).
TEST(TimeModel, VitGridMovesTheBytesTheRunsCount) {
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-9), "test");
  struct Case {
    comm::TpMode mode;
    int tp, depth, batch_parts;
    double comm_bytes;
  };
  for (const Case& c : {Case{comm::TpMode::d2, 4, 1, 2, 516804}, Case{comm::TpMode::d25, 8, 2, 4, 393052},
                        Case{comm::TpMode::d3, 8, 1, 4, 405340}}) {
    plan::VitRun run;
    run.model.image = 12;
    run.model.channels = 3;
    run.model.patch = 4;
    run.model.hidden = 32;
    run.model.heads = 4;
    run.model.layers = 4;
    run.model.mlp_ratio = 2;
    run.model.classes = 5;
    run.mesh.dp = 1;
    run.mesh.tp = c.tp;
    run.mesh.tp_mode = c.mode;
    run.mesh.tp_depth = c.depth;
    run.micro_batch = 8 / c.batch_parts;
    const plan::StepTime t = plan::predict_step(run, m, 8);
    double bytes = 0;
    for (const plan::CommTerm& term : t.comm) bytes += term.calls * term.bytes;
    EXPECT_DOUBLE_EQ(bytes, c.comm_bytes - 24) << comm::tp_mode_name(c.mode) << "\n" << plan::describe(t);
    EXPECT_DOUBLE_EQ(t.tokens_per_s * t.step_s, 8 * 10);  // the global batch's tokens
  }
}

TEST(TimeModel, DoublingTheBandwidthHalvesTheCommunication) {
  const plan::GptRun run = tiny_run(2, 1, 2, 2);
  const auto comm = [&](double per_byte) {
    const plan::StepTime t = plan::predict_step(run, plan::parse_machine_json(machine_json(1e10, per_byte), "t"), 4);
    double s = 0;
    for (const plan::CommTerm& c : t.comm) s += c.seconds;
    return s;
  };
  const double slow = comm(2e-9), fast = comm(1e-9);
  EXPECT_GT(slow, 0.0);
  EXPECT_NEAR(fast, slow / 2, 1e-12);
}

// ZeRO-3 overlapped (--zero3-overlap on): each unit's gather hides behind the unit before it, so
// with gathers shorter than a block's compute only the first of forward and of backward is waited
// for; blocking, every gather is. The bytes moved are the same.
TEST(TimeModel, OverlappedZero3WaitsOnlyForTheGathersComputeCannotHide) {
  plan::GptRun run = tiny_run(4, 1, 1, 1);
  run.mesh.dp = 4;
  run.zero_stage = 3;
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-12), "t");
  const auto gathers = [&](bool overlap) {
    run.zero3_overlap = overlap;
    for (const plan::CommTerm& c : plan::predict_step(run, m, 4).comm)
      if (c.what.starts_with("ZeRO-3")) return c;
    ADD_FAILURE() << "no ZeRO-3 term";
    return plan::CommTerm{};
  };
  const plan::CommTerm blocking = gathers(false), overlapped = gathers(true);
  const double units = 4 + 2;  // the blocks, the embedding and the head
  EXPECT_DOUBLE_EQ(blocking.calls, 2 * units);
  EXPECT_DOUBLE_EQ(overlapped.calls, blocking.calls);
  EXPECT_DOUBLE_EQ(overlapped.seconds, blocking.seconds);
  EXPECT_DOUBLE_EQ(blocking.exposed, blocking.seconds);
  EXPECT_NEAR(overlapped.exposed, 2 * blocking.seconds / blocking.calls, 1e-15);  // the first of each pass
  // Gathers slower than any block's compute: each later one waits for its excess only.
  const plan::MachineModel slow = plan::parse_machine_json(machine_json(1e10, 1e-6), "t");
  run.zero3_overlap = true;
  double exposed = 0, seconds = 0;
  for (const plan::CommTerm& c : plan::predict_step(run, slow, 4).comm)
    if (c.what.starts_with("ZeRO-3")) exposed = c.exposed, seconds = c.seconds;
  EXPECT_GT(exposed, 2 * seconds / (2 * units));
  EXPECT_LT(exposed, seconds);
}

TEST(TimeModel, HalfPrecisionOnTheWireHalvesTheCommunicatedBytes) {
  const plan::GptRun run = tiny_run(2, 2, 2, 2);
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-9), "t");
  const plan::StepTime fp32 = plan::predict_step(run, m, 4), half = plan::predict_step(run, m, 4, 2);
  ASSERT_EQ(fp32.comm.size(), half.comm.size());
  ASSERT_FALSE(fp32.comm.empty());
  for (size_t i = 0; i < fp32.comm.size(); ++i) {
    EXPECT_EQ(half.comm[i].what, fp32.comm[i].what);
    if (fp32.comm[i].what == "the gradient norm") {  // one double, whatever the values' width
      EXPECT_EQ(half.comm[i].bytes, 8.0);
      continue;
    }
    EXPECT_DOUBLE_EQ(half.comm[i].bytes, fp32.comm[i].bytes / 2) << fp32.comm[i].what;
  }
  EXPECT_DOUBLE_EQ(half.flops, fp32.flops);  // the compute is the same
  EXPECT_LT(half.step_s, fp32.step_s);
  EXPECT_THROW(plan::predict_step(run, m, 4, 0), Error);
}

TEST(TimeModel, ModelFlopsAreTheMegatronPaperFormula) {
  // 96 B s l h^2 (1 + s / 6h + V / (16 l h)) under full recomputation (Narayanan et al. 2021, eq. 3),
  // B the global batch: here micro-batch 2 x 3 micro-batches x dp 2.
  plan::GptRun run = tiny_run(3, 1, 1, 3);
  run.mesh.dp = 2;
  const double b = 12, s = 32, l = 3, h = 64, v = 64;
  run.checkpointing.recompute = nn::Recompute::forward;
  EXPECT_NEAR(plan::megatron_model_flops(run), 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)), 1e-3);
  // Without recomputation three passes: 72 B s l h^2 (1 + s / 6h + V / (12 l h)).
  run.checkpointing.recompute = nn::Recompute::nothing;
  EXPECT_NEAR(plan::megatron_model_flops(run), 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)), 1e-3);
}

TEST(TimeModel, MixtureOfExpertsBlocksComputeTheirRoutedRowsAndExchangeThem) {
  const double rate = 1e10;
  plan::GptRun run = tiny_run(2, 1, 1, 1);  // N = B T = 64 rows, C = 64
  run.model.moe_every = 2;                  // block 1 has experts
  run.model.moe.experts = 4;
  run.model.moe.hidden = 96;
  run.model.moe.router.top_k = 2;
  const plan::MachineModel m = plan::parse_machine_json(machine_json(rate, 1e-9), "test");
  const plan::StepTime one = plan::predict_step(run, m, 1);
  // By hand: both blocks' attention GEMMs 8 N C^2; block 0's MLP 16 N C^2; block 1's router 2 N E C
  // and its experts over N k routed rows, 2 x 2 (N k) H C; the head 2 N C V. Backward twice.
  const double n = 64, c = 64, v = 64, e = 4, h = 96, k = 2;
  const double gemm = 2 * 8 * n * c * c + 16 * n * c * c + 2 * n * e * c + 4 * n * k * h * c + 2 * n * c * v;
  const double attention = 2 * 2 * 2 * 32.0 * 32.0 * c;
  EXPECT_DOUBLE_EQ(one.flops, 3 * gemm + (1 + plan::kAttentionBackward) * attention);
  EXPECT_EQ(one.comm.size(), 0u);
  // ep 2: the same rows per rank (ep splits the batch like dp), each MoE block's dispatch and
  // combine all-to-all forward and backward over the ep group, and the non-expert gradients summed over it.
  run.mesh.ep = 2;
  const plan::StepTime two = plan::predict_step(run, m, 4);
  bool exchanged = false, reduced = false;
  for (const plan::CommTerm& t : two.comm) {
    if (t.what == "ep: each MoE block's dispatch and combine") {
      exchanged = true;
      EXPECT_EQ(t.op, "all_to_all");
      EXPECT_EQ(t.group, 2);
      EXPECT_DOUBLE_EQ(t.calls, 4);
      EXPECT_DOUBLE_EQ(t.bytes, n * k * c * 4);
    }
    if (t.what == "ep: the non-expert gradients all-reduced") {
      reduced = true;
      EXPECT_EQ(t.group, 2);
    }
  }
  EXPECT_TRUE(exchanged);
  EXPECT_TRUE(reduced);
  EXPECT_DOUBLE_EQ(two.flops, one.flops);
}

TEST(TimeModel, ThePipelineIsTheSimulatedSchedule) {
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-9), "test");
  for (const char* schedule : {"gpipe", "1f1b"}) {
    plan::GptRun run = tiny_run(4, 2, 1, 4);
    run.pp_schedule = schedule;
    const plan::StepTime t = plan::predict_step(run, m, 4);
    // Two stages, the last (it holds the head) the slower: the first's forward of micro-batch 0,
    // then the last stage busy with every micro-batch, then the first's backward of the last one.
    ASSERT_EQ(t.stage_forward_s.size(), 2u);
    ASSERT_GT(t.stage_forward_s[1], t.stage_forward_s[0]);
    const double expected = t.stage_forward_s[0] + 4 * (t.stage_forward_s[1] + t.stage_backward_s[1]) + t.stage_backward_s[0];
    EXPECT_NEAR(t.pipeline_s, expected, 2e-3 * expected) << schedule;
    EXPECT_NEAR(t.bubble_s, t.pipeline_s - 4 * (t.forward_s + t.backward_s), 1e-12) << schedule;
    // The same as the verifier's makespan with these stages' costs in microseconds.
    const auto us = [](double s) { return static_cast<int>(std::lround(s * 1e6)); };
    std::vector<parallel::StepCosts> costs;
    for (int s = 0; s < 2; ++s)
      costs.push_back({us(t.stage_forward_s[s]), us(t.stage_backward_s[s]), 0});
    const parallel::PipelineReport r = parallel::verify_schedule(parallel::make_schedule(schedule, 2, 4), costs);
    EXPECT_NEAR(t.pipeline_s, static_cast<double>(r.makespan) * 1e-6, 1e-3 * t.pipeline_s) << schedule;
  }
  plan::GptRun zb = tiny_run(4, 2, 1, 4), one = zb;
  zb.pp_schedule = "zb";
  one.pp_schedule = "1f1b";
  EXPECT_LT(plan::predict_step(zb, m, 4).bubble_s, plan::predict_step(one, m, 4).bubble_s);
}

TEST(TimeModel, MachineFilesAreCheckedBeforeUse) {
  const auto error_of = [](const std::string& text) {
    try {
      plan::parse_machine_json(text, "m.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("{not json").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("{\"format\": \"other\"}").find("not a tessera machine file"), std::string::npos);
  std::string bad = machine_json(1e10, 1e-9);
  bad.replace(bad.find("\"format_version\": 1"), 19, "\"format_version\": 9");
  EXPECT_NE(error_of(bad).find("format_version 9"), std::string::npos);
  std::string negative = machine_json(1e10, 1e-9);
  negative.replace(negative.find("\"copy_bytes_per_s\": 1e9"), 23, "\"copy_bytes_per_s\": -1");
  EXPECT_NE(error_of(negative).find("copy_bytes_per_s must be positive"), std::string::npos);
  std::string operand = machine_json(1e10, 1e-9, 0, 5e9);  // the optional operand bandwidth is checked too
  operand.replace(operand.find("\"operand_bytes_per_s\": 5000000000"), 33, "\"operand_bytes_per_s\": 0");
  EXPECT_NE(error_of(operand).find("operand_bytes_per_s must be positive"), std::string::npos);
  // What a machine file written by to_json holds reads back the same.
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-9), "test");
  const plan::MachineModel back = plan::parse_machine_json(plan::to_json(m), "again");
  EXPECT_EQ(back.gemm.at("f32").front().flops_per_s, 1e10);
  EXPECT_EQ(back.collective("all_reduce", 2, false).seconds_per_byte, m.collective("all_reduce", 2, false).seconds_per_byte);
  // A group size not measured is the nearest one rescaled as a ring; across nodes is refused.
  EXPECT_GT(m.collective("all_reduce", 8, false).seconds_per_byte, 0.0);
  EXPECT_THROW(m.collective("all_reduce", 2, true), Error);
}

// Zigzag balances the causal ring: its compute is all_to_all's (the balanced share), while the
// contiguous ring's waits for its last rank's (2 sp - 1) / sp share of the attention; its messages
// are the ring's.
TEST(TimeModel, ZigzagRingComputesTheBalancedShare) {
  plan::GptRun run = tiny_run(2, 1, 1, 1);
  run.mesh.sp = 4;
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-9), "t");
  const plan::StepTime all_to_all = plan::predict_step(run, m, 4);
  run.ring = true;
  const plan::StepTime ring = plan::predict_step(run, m, 4);
  run.zigzag = true;
  const plan::StepTime zigzag = plan::predict_step(run, m, 4);
  EXPECT_DOUBLE_EQ(zigzag.compute_s, all_to_all.compute_s);
  // The balanced attention of a step: 2 blocks x 2 B T^2 C / sp forward, (1 + backward) passes.
  const double balanced = 2 * 2 * 2 * 32.0 * 32.0 * 64 / 4 * (1 + plan::kAttentionBackward);
  EXPECT_NEAR(ring.compute_s - zigzag.compute_s, balanced * 3 / 4 / 1e10, 1e-9 * ring.compute_s);
  ASSERT_EQ(zigzag.comm.size(), ring.comm.size());
  for (size_t i = 0; i < ring.comm.size(); ++i) {
    EXPECT_EQ(zigzag.comm[i].what, ring.comm[i].what);
    EXPECT_DOUBLE_EQ(zigzag.comm[i].bytes, ring.comm[i].bytes);
  }
  EXPECT_LT(zigzag.step_s, ring.step_s);
}

// cores_per_node is optional: a file without it (older calibrations, a100_megatron.json) reads as a
// core per thread; one with it says how many times over the node's ranks subscribe its cores, and
// to_json keeps it. A value that is not a whole number >= 1 is refused.
TEST(TimeModel, CoresPerNodeIsOptionalAndSetsTheOversubscription) {
  const plan::MachineModel unrecorded = plan::parse_machine_json(machine_json(1e10, 1e-9), "test");
  EXPECT_EQ(unrecorded.cores_per_node, 0);
  EXPECT_DOUBLE_EQ(unrecorded.oversubscription(64), 1.0);
  const plan::MachineModel two = with_cores(unrecorded, 2);
  EXPECT_DOUBLE_EQ(two.oversubscription(8), 4.0);
  EXPECT_DOUBLE_EQ(two.oversubscription(2), 1.0);
  EXPECT_DOUBLE_EQ(two.oversubscription(1), 1.0);  // idle cores never make a rank faster than its own
  EXPECT_EQ(plan::parse_machine_json(plan::to_json(two), "again").cores_per_node, 2);
  std::string bad = plan::to_json(two);
  bad.replace(bad.find("\"cores_per_node\": 2"), 19, "\"cores_per_node\": 0");
  EXPECT_THROW(plan::parse_machine_json(bad, "bad"), Error);
}

// Ranks sharing cores (4 ranks on 2 cores): no idle core moves ZeRO-3's gathers or the gradient
// reduction while a rank computes, so they are waited for in full, overlapped or not. With a core per
// rank (the same machine with 4 cores) the overlap hides them as before.
TEST(TimeModel, OnSharedCoresCommunicationDoesNotOverlapCompute) {
  plan::GptRun run = tiny_run(4, 1, 1, 2);
  run.mesh.dp = 4;
  run.zero_stage = 3;
  run.zero3_overlap = true;
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-12), "t");
  const plan::MachineModel two_cores = with_cores(m, 2), four_cores = with_cores(m, 4);
  const auto exposed_and_seconds = [&](const plan::MachineModel& machine, const std::string& what) {
    for (const plan::CommTerm& c : plan::predict_step(run, machine, 4).comm)
      if (c.what.starts_with(what)) return std::pair{c.exposed, c.seconds};
    ADD_FAILURE() << "no " << what << " term";
    return std::pair{0.0, 0.0};
  };
  const auto [shared, shared_seconds] = exposed_and_seconds(two_cores, "ZeRO-3");
  const auto [own, own_seconds] = exposed_and_seconds(four_cores, "ZeRO-3");
  EXPECT_DOUBLE_EQ(shared, shared_seconds);
  EXPECT_DOUBLE_EQ(own_seconds, shared_seconds);
  EXPECT_LT(own, shared_seconds);
  EXPECT_DOUBLE_EQ(own, exposed_and_seconds(m, "ZeRO-3").first);  // cores not recorded: a core per rank
  run.zero_stage = 0;
  const auto [reduce_shared, reduce_seconds] = exposed_and_seconds(two_cores, "dp: gradients all-reduced");
  EXPECT_DOUBLE_EQ(reduce_shared, reduce_seconds);  // (here one bucket holds every gradient: exposed with a core per rank too)
  EXPECT_EQ(plan::predict_step(run, two_cores, 4).oversubscription, 2.0);
  EXPECT_EQ(plan::predict_step(run, four_cores, 4).oversubscription, 1.0);
}

// Ranks sharing cores: a pipeline stage idling in the bubble hands its cores to the stages that
// compute. Two stages, one micro-batch (half the stages' slots busy): on 2 ranks per core the
// makespan halves (the node's total work over its cores); with many micro-batches (nearly every
// slot busy) it is still the total work over the cores, now close to the schedule's makespan. With a
// core per rank it is the schedule's.
TEST(TimeModel, OnSharedCoresThePipelineBubbleIsFilled) {
  const plan::MachineModel own = plan::parse_machine_json(machine_json(1e10, 1e-12), "t");
  const plan::MachineModel one_core = with_cores(own, 1);
  plan::GptRun run = tiny_run(4, 2, 1, 1);
  const plan::StepTime dedicated = plan::predict_step(run, own, 2), shared = plan::predict_step(run, one_core, 2);
  double work = 0;
  for (size_t s = 0; s < 2; ++s) work += dedicated.stage_forward_s[s] + dedicated.stage_backward_s[s];
  EXPECT_NEAR(shared.pipeline_s, work / 2, 2e-3 * work);  // total work over the stages (all ranks' cores)
  EXPECT_LT(shared.pipeline_s, 0.6 * dedicated.pipeline_s);
  EXPECT_NEAR(dedicated.pipeline_s, work, 2e-3 * work);  // one micro-batch through both stages in turn
  // Many micro-batches: the bubble is small, and filling it saves little.
  run.micro_batches = 16;
  const plan::StepTime many_dedicated = plan::predict_step(run, own, 2), many_shared = plan::predict_step(run, one_core, 2);
  double many_work = 0;
  for (size_t s = 0; s < 2; ++s) many_work += 16 * (many_dedicated.stage_forward_s[s] + many_dedicated.stage_backward_s[s]);
  EXPECT_NEAR(many_shared.pipeline_s, many_work / 2, 2e-3 * many_work);
  EXPECT_LT(many_shared.pipeline_s, many_dedicated.pipeline_s);
  EXPECT_GT(many_shared.pipeline_s, 0.5 * many_dedicated.pipeline_s);
  // Without a pipeline nothing idles: the same step, shared or not (no communication in this layout).
  const plan::GptRun flat = tiny_run(4, 1, 1, 4);
  EXPECT_DOUBLE_EQ(plan::predict_step(flat, one_core, 2).step_s, plan::predict_step(flat, own, 2).step_s);
}

// A waiting rank that still takes its share of the cores (waiting_rank_share 1: it spins as hard as
// a computing rank) leaves nothing to the stages that compute: the bubble stays, as with a core per
// rank. Half of that (0.5) with half the slots busy: (0.5 + 0.5 x 0.5) of the schedule's makespan.
// The field is optional, kept by to_json, and refused outside [0, 1].
TEST(TimeModel, OnSharedCoresAWaitingRankKeepsItsShareOfTheCores) {
  const plan::MachineModel own = plan::parse_machine_json(machine_json(1e10, 1e-12), "t");
  EXPECT_DOUBLE_EQ(own.waiting_rank_share, 0.0);
  plan::MachineModel spinning = with_cores(own, 1), half = with_cores(own, 1);
  spinning.waiting_rank_share = 1.0;
  half.waiting_rank_share = 0.5;
  const plan::GptRun run = tiny_run(4, 2, 1, 1);
  const plan::StepTime dedicated = plan::predict_step(run, own, 2);
  EXPECT_NEAR(plan::predict_step(run, spinning, 2).pipeline_s, dedicated.pipeline_s, 1e-9);
  EXPECT_NEAR(plan::predict_step(run, half, 2).pipeline_s, 0.75 * dedicated.pipeline_s, 2e-3 * dedicated.pipeline_s);
  EXPECT_DOUBLE_EQ(plan::parse_machine_json(plan::to_json(half), "again").waiting_rank_share, 0.5);
  std::string bad = plan::to_json(half);
  bad.replace(bad.find("\"waiting_rank_share\": 0.5"), 25, "\"waiting_rank_share\": 1.5");
  EXPECT_THROW(plan::parse_machine_json(bad, "bad"), Error);
}

// Where ranks share cores, the step-end synchronisation adds the slowest rank's lag once and a
// wake-up per collective outside the layers (here dp 4, ZeRO 0: the gradients' all-reduce and the
// gradient norm's); with a core per rank it adds nothing. The fields are optional, kept by to_json,
// and a negative one is refused.
TEST(TimeModel, OnSharedCoresTheStepWaitsForItsSlowestRank) {
  const plan::MachineModel own = plan::parse_machine_json(machine_json(1e10, 1e-12), "t");
  EXPECT_DOUBLE_EQ(own.sync_lag_s, 0.0);
  plan::MachineModel synced = own;
  synced.sync_lag_s = 2e-3;
  synced.sync_wake_s = 5e-4;
  plan::GptRun flat = tiny_run(4, 1, 1, 4);
  flat.mesh.dp = 4;
  const plan::StepTime dedicated = plan::predict_step(flat, synced, 4);
  EXPECT_DOUBLE_EQ(dedicated.sync_s, 0.0);
  const plan::MachineModel shared = with_cores(synced, 1);
  const plan::StepTime step = plan::predict_step(flat, shared, 4);
  int step_end_calls = 0;
  for (const plan::CommTerm& c : step.comm) step_end_calls += c.in_layers ? 0 : 1;
  EXPECT_EQ(step_end_calls, 2);
  EXPECT_NEAR(step.sync_s, 2e-3 + 2 * 5e-4, 1e-12);
  const plan::StepTime unsynced = plan::predict_step(flat, with_cores(own, 1), 4);
  EXPECT_NEAR(step.step_s - unsynced.step_s, step.sync_s, 1e-12);
  const plan::MachineModel again = plan::parse_machine_json(plan::to_json(synced), "again");
  EXPECT_DOUBLE_EQ(again.sync_lag_s, 2e-3);
  EXPECT_DOUBLE_EQ(again.sync_wake_s, 5e-4);
  std::string bad = plan::to_json(synced);
  bad.replace(bad.find("\"sync_lag_s\": 0.002"), 20, "\"sync_lag_s\": -0.002");
  EXPECT_THROW(plan::parse_machine_json(bad, "bad"), Error);
}

// The slowest rank's lag comes from ranks computing on one core at once: a pipeline of 2 stages and
// one micro-batch on 2 ranks sharing a core computes one stage at a time, so with a waiting rank
// that gives its share away (waiting_rank_share 0) no lag is added, only the wake-ups; with one that
// spins (1) both ranks want the core throughout and the whole lag is added; half-way (0.5: 3 of 4
// slots wanting the core) half of it.
TEST(TimeModel, OnSharedCoresAPipelineTakingTurnsLagsLess) {
  plan::MachineModel model = with_cores(plan::parse_machine_json(machine_json(1e10, 1e-12), "t"), 1);
  model.sync_lag_s = 2e-3;
  model.sync_wake_s = 5e-4;
  const plan::GptRun run = tiny_run(4, 2, 1, 1);
  const auto sync = [&](double w) {
    model.waiting_rank_share = w;
    const plan::StepTime step = plan::predict_step(run, model, 2);
    int step_end_calls = 0;
    for (const plan::CommTerm& c : step.comm) step_end_calls += c.in_layers ? 0 : 1;
    return step.sync_s - step_end_calls * model.sync_wake_s;
  };
  EXPECT_NEAR(sync(0.0), 0.0, 1e-5);
  EXPECT_NEAR(sync(1.0), 2e-3, 1e-12);
  EXPECT_NEAR(sync(0.5), 1e-3, 1e-5);
}

// Zero-bubble's deferred weight gradients fill the bubble where every rank has a core; where ranks
// share cores a waiting rank's share already goes to the ranks that compute, so the deferred work
// only competes with the critical path (campaigns measured zb 1.16-1.32x its split-backward
// prediction): there its backward counts whole, and zb is predicted no faster than 1F1B.
TEST(TimeModel, OnSharedCoresZeroBubbleFillsNoBubble) {
  const plan::MachineModel own = plan::parse_machine_json(machine_json(1e10, 1e-12), "t");
  // pp 4, two micro-batches (the campaign's case), 4 ranks on 2 cores.
  plan::GptRun zb = tiny_run(4, 4, 1, 2), one = zb;
  zb.pp_schedule = "zb";
  one.pp_schedule = "1f1b";
  EXPECT_LT(plan::predict_step(zb, own, 4).pipeline_s, plan::predict_step(one, own, 4).pipeline_s);
  const plan::MachineModel shared = with_cores(own, 2);
  const double zb_shared = plan::predict_step(zb, shared, 4).pipeline_s;
  EXPECT_GE(zb_shared, (1 - 1e-3) * plan::predict_step(one, shared, 4).pipeline_s);
}

// Grid tensor parallelism: the model's bytes per step are what the metrics' comm_bytes count on
// tests/parity/tensor_grid.sh's model (layers 2, hidden 32, heads 4, vocabulary 61, sequence 16,
// global batch 8), less the 32 bytes of per-step scalars the model leaves out (the loss and the
// trainer's step figures; the gradient norm's 8 it counts): 2d at tp 4 (582184 measured), 2.5d at
// tp 8 depth 2 (415400), 3d at tp 8 (464552). Each rank multiplies 1/q of every product of its own
// sequences (the grid's side q = 2 throughout).
TEST(TimeModel, GridTensorParallelismMovesTheBytesTheRunsCount) {
  const plan::MachineModel m = plan::parse_machine_json(machine_json(1e10, 1e-9), "test");
  struct Case {
    comm::TpMode mode;
    int tp, depth, batch_parts;
    double comm_bytes;
  };
  for (const Case& c : {Case{comm::TpMode::d2, 4, 1, 2, 582184}, Case{comm::TpMode::d25, 8, 2, 4, 415400},
                        Case{comm::TpMode::d3, 8, 1, 4, 464552}}) {
    plan::GptRun run = tiny_run(2, 1, c.tp, 1);
    run.model.hidden = 32;
    run.model.vocab = 61;
    run.model.max_seq = 16;
    run.seq = 16;
    run.mesh.tp_mode = c.mode;
    run.mesh.tp_depth = c.depth;
    run.micro_batch = 8 / c.batch_parts;
    const plan::StepTime t = plan::predict_step(run, m, 8);
    double bytes = 0;
    for (const plan::CommTerm& term : t.comm) bytes += term.calls * term.bytes;
    EXPECT_DOUBLE_EQ(bytes, c.comm_bytes - 32) << comm::tp_mode_name(c.mode) << "\n" << plan::describe(t);
    // By hand, per rank: N = B T rows of its B sequences, every product's 1/q (C = 32; the
    // vocabulary padded to 64 q, V/q = 64 rows each).
    const double q = 2, b = 8.0 / c.batch_parts, n = b * 16, ch = 32;
    const double gemm = 2 * 24 * n * ch * ch / q + 2 * n * ch * 64;
    const double attention = 2 * 2 * b * 16 * 16 * ch / q;
    EXPECT_DOUBLE_EQ(t.flops, 3 * gemm + (1 + plan::kAttentionBackward) * attention) << comm::tp_mode_name(c.mode);
    EXPECT_DOUBLE_EQ(t.tokens_per_s * t.step_s, 8 * 16);  // the global batch's tokens
  }
}

// The waiting share's calibration window: whatever the binding, every CPU keeps half its ranks
// computing (rounded up), and each waiting rank waits for a computing rank on its own CPU that
// names it back as the rank it sends to.
TEST(Calibration, HalfWindowKeepsHalfOfEachCpusRanksComputing) {
  const std::vector<std::vector<int>> bindings = {
      {0, 1, 0, 1, 0, 1, 0, 1},          // mpirun --bind-to core, 8 ranks on 2 cores (round-robin)
      {0, 0, 0, 0, 1, 1, 1, 1},          // bound in blocks
      {-1, -1, -1, -1, -1, -1, -1, -1},  // unbound: the scheduler places them
      {0, 1, 0},                         // a CPU with one rank: it computes alone
      {3, 3, 3, 3, 3}};
  for (const std::vector<int>& cpus : bindings) {
    std::vector<plan::HalfWindowPart> parts;
    for (int r = 0; r < static_cast<int>(cpus.size()); ++r) parts.push_back(plan::half_window_part(cpus, r));
    for (int cpu : cpus) {
      int ranks = 0, computing = 0;
      for (size_t r = 0; r < cpus.size(); ++r)
        if (cpus[r] == cpu) {
          ++ranks;
          computing += parts[r].computes ? 1 : 0;
        }
      EXPECT_EQ(computing, (ranks + 1) / 2) << "CPU " << cpu;
    }
    for (size_t r = 0; r < cpus.size(); ++r) {
      const plan::HalfWindowPart& p = parts[r];
      if (p.partner < 0) {
        EXPECT_TRUE(p.computes) << "rank " << r << " waits for nobody";
        continue;
      }
      const plan::HalfWindowPart& q = parts[static_cast<size_t>(p.partner)];
      EXPECT_NE(p.computes, q.computes) << "rank " << r << " and its partner";
      EXPECT_EQ(q.partner, static_cast<int>(r)) << "rank " << r << "'s partner names another";
      EXPECT_EQ(cpus[static_cast<size_t>(p.partner)], cpus[r]) << "rank " << r << "'s partner on another CPU";
    }
  }
  // Round-robin binding: ranks 0, 1, 4, 5 compute (two on each core), not the even ranks.
  const std::vector<int> round_robin = {0, 1, 0, 1, 0, 1, 0, 1};
  std::vector<int> computing;
  for (int r = 0; r < 8; ++r)
    if (plan::half_window_part(round_robin, r).computes) computing.push_back(r);
  EXPECT_EQ(computing, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_THROW(plan::half_window_part(round_robin, 8), Error);
}
