// Pipeline schedules and their verifier: every generated schedule runs without deadlock, with each
// micro-batch's forward, backward (and W) once per stage and chunk, and the bubble and peak memory
// that theory gives for the verifier's cost model (F = B = W = 1; unsplit backward = 2); broken
// programs are caught naming the stage and instruction.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_verifier.h"

using namespace tessera::parallel;
using Kind = PipelineProblem::Kind;

namespace {

PipelineInstruction in(PipelineOp op, int mb, int chunk = 0) { return {op, mb, chunk}; }

// Index of `want` in the stage's program (it must be there).
int index_of(const PipelineSchedule& s, int stage, const PipelineInstruction& want) {
  const auto& prog = s.programs[static_cast<size_t>(stage)];
  const auto at = std::find(prog.begin(), prog.end(), want);
  EXPECT_NE(at, prog.end()) << s.describe(want) << " not on stage " << stage;
  return static_cast<int>(at - prog.begin());
}

// The first problem, which must name `stage` and `instruction`, have `kind` and contain `words`.
void expect_first_problem(const PipelineSchedule& s, Kind kind, int stage, int instruction, const std::string& words) {
  const PipelineReport r = verify_schedule(s);
  ASSERT_FALSE(r.ok());
  const PipelineProblem& p = r.problems.front();
  EXPECT_EQ(p.kind, kind) << p.message;
  EXPECT_EQ(p.stage, stage) << p.message;
  EXPECT_EQ(p.instruction, instruction) << p.message;
  const std::string where = "stage " + std::to_string(stage) + ", instruction " + std::to_string(instruction) + " (";
  EXPECT_NE(p.message.find(where), std::string::npos) << p.message;
  EXPECT_NE(p.message.find(words), std::string::npos) << p.message;
  try {
    check_schedule(s);
    ADD_FAILURE() << "check_schedule accepted a broken schedule";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.message), std::string::npos) << e.what();
  }
}

bool has_problem(const PipelineReport& r, Kind kind, int stage, int instruction, const std::string& words) {
  return std::any_of(r.problems.begin(), r.problems.end(), [&](const PipelineProblem& p) {
    return p.kind == kind && p.stage == stage && p.instruction == instruction &&
           p.message.find(words) != std::string::npos;
  });
}

// Every (chunk, micro-batch) on every stage: forward once, then backward once, then (split) W once.
void expect_each_step_once_in_order(const PipelineSchedule& s, const PipelineReport& r) {
  for (int stage = 0; stage < s.stages; ++stage) {
    std::map<std::pair<int, int>, std::string> seen;  // (chunk, mb) -> the steps' letters in time order
    for (const TimedStep& t : r.stages[static_cast<size_t>(stage)].timeline)
      seen[{t.step.chunk, t.step.micro_batch}] += t.step.op == PipelineOp::forward    ? "F"
                                                  : t.step.op == PipelineOp::backward ? "B"
                                                                                      : "W";
    ASSERT_EQ(seen.size(), static_cast<size_t>(s.chunks * s.micro_batches)) << s.name << " stage " << stage;
    for (const auto& [key, steps] : seen) EXPECT_EQ(steps, s.split_backward ? "FBW" : "FB") << s.name << " stage " << stage;
  }
}

// The exact bubble of each schedule under the unit costs, as (idle per stage, makespan).
struct Theory {
  int64_t idle_per_stage, makespan;
};
Theory theory(const std::string& name, int p, int m, int v) {
  // GPipe, 1F1B: a micro-batch costs 3 per stage and the pipeline fills and drains once: p-1 micro-
  // batch slots idle per stage, so bubble = (p-1)/(m+p-1). Interleaved: the same fill and drain in
  // chunk-sized steps over v*m chunk micro-batches: (p-1)/(v*m+p-1).
  if (name == "gpipe" || name == "1f1b") return {3 * (p - 1), 3 * (m + p - 1)};
  if (name == "interleaved") return {3 * (p - 1), 3 * (v * m + p - 1)};
  // ZB-H1 with m >= p: the paper's (p-1)(F+B-W) = p-1 idle per stage, makespan 3m + p - 1,
  // bubble (p-1)/(3m+p-1), about a third of 1F1B's. With m < p stage 0 waits for each B to travel
  // back over the p stages: makespan 2m + 2p - 1.
  if (m >= p) return {p - 1, 3 * m + p - 1};
  return {2 * m + 2 * p - 1 - 3 * m, 2 * m + 2 * p - 1};
}

void expect_theory(const PipelineSchedule& s, const PipelineReport& r) {
  const Theory t = theory(s.name, s.stages, s.micro_batches, s.chunks);
  EXPECT_EQ(r.makespan, t.makespan) << s.name;
  EXPECT_EQ(r.idle, t.idle_per_stage * s.stages) << s.name;
  EXPECT_DOUBLE_EQ(r.bubble_fraction, static_cast<double>(t.idle_per_stage) / static_cast<double>(t.makespan));
}

// Peak live activations per stage (chunk micro-batches whose forward ran and backward, or W for
// ZB-H1, has not finished), and how many await their backward (B).
void expect_peaks(const PipelineSchedule& s, const PipelineReport& r) {
  const int p = s.stages, m = s.micro_batches, v = s.chunks;
  for (int st = 0; st < p; ++st) {
    const StageReport& got = r.stages[static_cast<size_t>(st)];
    int live = 0, awaiting = 0;
    if (s.name == "gpipe") live = awaiting = m;
    if (s.name == "1f1b") live = awaiting = std::min(p - st, m);
    if (s.name == "zb") {
      awaiting = std::min(p - st, m);  // as 1F1B: B runs where 1F1B runs the backward
      live = std::min(p, m);           // W deferred: every stage holds as many as 1F1B's stage 0
    }
    if (s.name == "interleaved") live = awaiting = std::min(v * m, (p - 1 - st) * 2 + (v - 1) * p + 1);
    EXPECT_EQ(got.peak_live, live) << s.name << " stage " << st;
    EXPECT_EQ(got.peak_awaiting_backward, awaiting) << s.name << " stage " << st;
  }
}

}  // namespace

TEST(PipelineSchedule, EveryScheduleMatchesTheoryOverSizes) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      std::vector<PipelineSchedule> schedules{gpipe(p, m), one_f_one_b(p, m), zero_bubble_h1(p, m)};
      if (m % p == 0)
        for (int v = 2; v <= 4; ++v) schedules.push_back(interleaved(p, m, v));
      for (const PipelineSchedule& s : schedules) {
        SCOPED_TRACE(s.name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(s.chunks));
        const PipelineReport r = verify_schedule(s);
        ASSERT_TRUE(r.ok()) << r.problems.front().message;
        expect_each_step_once_in_order(s, r);
        expect_theory(s, r);
        expect_peaks(s, r);
      }
    }
  }
}

TEST(PipelineSchedule, ZeroBubbleBeatsOneFOneBWithItsMemory) {
  for (int p = 2; p <= 8; ++p) {
    for (int m = 1; m <= 32; ++m) {
      const PipelineReport zb = verify_schedule(zero_bubble_h1(p, m));
      const PipelineReport base = verify_schedule(one_f_one_b(p, m));
      EXPECT_LT(zb.bubble_fraction, base.bubble_fraction) << "p=" << p << " m=" << m;
      int zb_peak = 0, base_peak = 0;
      for (int st = 0; st < p; ++st) {
        zb_peak = std::max(zb_peak, zb.stages[static_cast<size_t>(st)].peak_live);
        base_peak = std::max(base_peak, base.stages[static_cast<size_t>(st)].peak_live);
      }
      EXPECT_EQ(zb_peak, base_peak) << "p=" << p << " m=" << m;
    }
  }
  // p = 8, m = 24: 1F1B idles 3 x 7 of 3 x 31 per stage, ZB-H1 7 of 79: 0.2258 against 0.0886.
  EXPECT_DOUBLE_EQ(verify_schedule(zero_bubble_h1(8, 24)).bubble_fraction, 7.0 / 79.0);
  EXPECT_DOUBLE_EQ(verify_schedule(one_f_one_b(8, 24)).bubble_fraction, 7.0 / 31.0);
  // One stage has no bubble at all.
  EXPECT_EQ(verify_schedule(zero_bubble_h1(1, 5)).idle, 0);
}

TEST(PipelineSchedule, ZeroBubbleFollowsThePapersFormulaForOtherCosts) {
  // Qi et al.: ZB-H1 idles (p-1)(F+B-W) per stage against 1F1B's (p-1)(F+B+W), for W <= F, m >= p.
  for (const StepCosts c : {StepCosts{2, 2, 1}, StepCosts{1, 2, 1}, StepCosts{2, 3, 2}}) {
    for (int p = 2; p <= 6; ++p) {
      for (int m = p; m <= 3 * p; m += p) {
        const PipelineReport zb = verify_schedule(zero_bubble_h1(p, m), c);
        const PipelineReport base = verify_schedule(one_f_one_b(p, m), c);
        ASSERT_TRUE(zb.ok() && base.ok());
        EXPECT_EQ(zb.idle, int64_t{p} * (p - 1) * (c.forward + c.backward_input - c.backward_weight));
        EXPECT_EQ(base.idle, int64_t{p} * (p - 1) * (c.forward + c.backward_input + c.backward_weight));
      }
    }
  }
}

TEST(PipelineSchedule, PeersFollowTheVirtualStages) {
  const PipelineSchedule s = interleaved(4, 8, 2);  // chunk c of stage s is virtual stage 4c + s
  EXPECT_EQ(peer(s, 3, in(PipelineOp::send_fwd, 0, 0)), (StageChunk{0, 1}));
  EXPECT_EQ(peer(s, 0, in(PipelineOp::recv_fwd, 0, 1)), (StageChunk{3, 0}));
  EXPECT_EQ(peer(s, 0, in(PipelineOp::send_bwd, 0, 1)), (StageChunk{3, 0}));
  EXPECT_EQ(peer(s, 1, in(PipelineOp::recv_bwd, 5, 1)), (StageChunk{2, 1}));
  EXPECT_FALSE(peer(s, 0, in(PipelineOp::recv_fwd, 0, 0)));  // the data feeds the first
  EXPECT_FALSE(peer(s, 3, in(PipelineOp::send_fwd, 0, 1)));  // the loss ends the last
  EXPECT_FALSE(peer(s, 2, in(PipelineOp::forward, 0, 0)));
  // The first virtual stage has no receive of activations, the last no receive of gradients.
  const PipelineSchedule f = one_f_one_b(3, 2);
  EXPECT_EQ(f.programs[0].front(), in(PipelineOp::forward, 0));
  EXPECT_EQ(f.programs[2][0], in(PipelineOp::recv_fwd, 0));
  EXPECT_EQ(f.programs[2][1], in(PipelineOp::forward, 0));
  EXPECT_EQ(f.programs[2][2], in(PipelineOp::backward, 0));
}

TEST(PipelineSchedule, MakeScheduleRefusesBadChoices) {
  auto refused = [](const std::string& name, int p, int m, int v, const std::string& words) {
    try {
      make_schedule(name, p, m, v);
      ADD_FAILURE() << name << " p=" << p << " m=" << m << " v=" << v << " was accepted";
    } catch (const tessera::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused("pipedream", 4, 8, 1, "unknown pipeline schedule 'pipedream' (expected gpipe|1f1b|interleaved|zb)");
  refused("1f1b", 0, 8, 1, "stages must be at least 1 (got 0)");
  refused("gpipe", 4, 0, 1, "micro-batches must be at least 1 (got 0)");
  refused("interleaved", 4, 8, 0, "chunks per stage must be at least 1 (got 0)");
  refused("1f1b", 4, 8, 2, "'1f1b' runs one chunk per stage");
  refused("zb", 4, 8, 3, "only 'interleaved' runs several");
  refused("interleaved", 4, 6, 2, "multiple of the stages (6 micro-batches, 4 stages)");
  refused("interleaved", 4, 8, 1, "at least 2 chunks per stage");
  refused("gpipe", 1 << 12, 1 << 12, 1, "too large");
  EXPECT_EQ(make_schedule("zb", 2, 3).name, "zb");
  EXPECT_TRUE(make_schedule("zb", 2, 3).split_backward);
  EXPECT_EQ(make_schedule("interleaved", 2, 4, 3).chunks, 3);
}

TEST(PipelineSchedule, TimelineText) {
  const PipelineSchedule s = one_f_one_b(2, 2);
  EXPECT_EQ(timeline_text(s, verify_schedule(s)),
            "time    0  1  2  3  4  5  6  7  8\n"
            "stage 0 F0 F1 .  .  B0 B0 .  B1 B1\n"
            "stage 1 .  F0 B0 B0 F1 B1 B1 .  .\n");
  const PipelineSchedule v = interleaved(1, 1, 2);  // one stage, two chunks: cells name the chunk
  EXPECT_EQ(timeline_text(v, verify_schedule(v)),
            "time    0    1    2    3    4    5\n"
            "stage 0 F0:0 F0:1 B0:1 B0:1 B0:0 B0:0\n");
}

// Broken programs: each is caught, naming the stage and the instruction.

TEST(PipelineVerifier, SwappedSend) {
  PipelineSchedule s = one_f_one_b(4, 8);
  auto& prog = s.programs[1];
  const int first = index_of(s, 1, in(PipelineOp::send_fwd, 0));
  const int second = index_of(s, 1, in(PipelineOp::send_fwd, 1));
  std::swap(prog[static_cast<size_t>(first)], prog[static_cast<size_t>(second)]);
  expect_first_problem(s, Kind::order, 1, first, "send_fwd mb 1): order: sends the activation of a forward that has not run");
}

TEST(PipelineVerifier, SendPastTheLastStageOrToTheWrongChunk) {
  PipelineSchedule s = one_f_one_b(3, 4);
  const int at = index_of(s, 2, in(PipelineOp::forward, 0)) + 1;
  s.programs[2].insert(s.programs[2].begin() + at, in(PipelineOp::send_fwd, 0));
  expect_first_problem(s, Kind::mismatch, 2, at, "there is no next virtual stage");

  PipelineSchedule v = interleaved(2, 2, 2);
  const int send = index_of(v, 0, in(PipelineOp::send_fwd, 1, 0));
  v.programs[0][static_cast<size_t>(send)].chunk = 1;  // chunk 1's forward of mb 1 has not run yet
  expect_first_problem(v, Kind::order, 0, send, "send_fwd mb 1 chunk 1): order: sends the activation");
}

TEST(PipelineVerifier, MissingReceive) {
  PipelineSchedule s = one_f_one_b(4, 8);
  const int recv = index_of(s, 2, in(PipelineOp::recv_fwd, 3));
  s.programs[2].erase(s.programs[2].begin() + recv);
  // The forward now at that index has no input; stage 1's message is never received.
  expect_first_problem(s, Kind::order, 2, recv, "forward mb 3): order: forward before its input was received");
  const PipelineReport r = verify_schedule(s);
  EXPECT_TRUE(has_problem(r, Kind::mismatch, 1, index_of(s, 1, in(PipelineOp::send_fwd, 3)),
                          "its message to stage 2 is never received (no recv_fwd mb 3 there)"));
}

TEST(PipelineVerifier, ReceiveWhoseSenderNeverSends) {
  PipelineSchedule s = one_f_one_b(3, 2);
  const int send = index_of(s, 2, in(PipelineOp::send_bwd, 1));
  s.programs[2].erase(s.programs[2].begin() + send);
  const int recv = index_of(s, 1, in(PipelineOp::recv_bwd, 1));
  expect_first_problem(s, Kind::mismatch, 1, recv, "waits for send_bwd mb 1 from stage 2, which stage 2 never sends");
}

TEST(PipelineVerifier, BackwardBeforeForward) {
  PipelineSchedule s = one_f_one_b(3, 4);
  auto& prog = s.programs[2];
  const int f = index_of(s, 2, in(PipelineOp::forward, 1));
  const int b = index_of(s, 2, in(PipelineOp::backward, 1));
  std::swap(prog[static_cast<size_t>(f)], prog[static_cast<size_t>(b)]);
  expect_first_problem(s, Kind::order, 2, f, "backward mb 1): order: backward before its forward");

  PipelineSchedule z = zero_bubble_h1(2, 2);
  const int w = index_of(z, 1, in(PipelineOp::backward_w, 0));
  const int bz = index_of(z, 1, in(PipelineOp::backward, 0));
  std::swap(z.programs[1][static_cast<size_t>(w)], z.programs[1][static_cast<size_t>(bz)]);
  expect_first_problem(z, Kind::order, 1, bz, "backward_w mb 0): order: backward_w before its backward");
}

TEST(PipelineVerifier, DeadlockCycle) {
  // Stage 2 waits for stage 3's gradient of mb 0 before sending it mb 0's activation.
  PipelineSchedule s = one_f_one_b(4, 8);
  auto& prog = s.programs[2];
  const int send = index_of(s, 2, in(PipelineOp::send_fwd, 0));
  const PipelineInstruction moved = prog[static_cast<size_t>(send)];
  prog.erase(prog.begin() + send);
  const int recv = index_of(s, 2, in(PipelineOp::recv_bwd, 0));
  prog.insert(prog.begin() + recv + 1, moved);
  // The cycle comes first, then the stages stalled behind it: every blocked stage is named.
  expect_first_problem(s, Kind::deadlock, 2, recv,
                       "(recv_bwd mb 0): deadlock: waits for send_bwd mb 0 from stage 3 (its instruction 3), but "
                       "stage 3 is blocked at instruction 0 (recv_fwd mb 0) (cycle: stage 2 -> stage 3 -> stage 2)");
  const PipelineReport r = verify_schedule(s);
  ASSERT_EQ(r.problems.size(), 4u);
  EXPECT_TRUE(has_problem(r, Kind::deadlock, 3, 0, "waits for send_fwd mb 0 from stage 2 (its instruction " +
                                                       std::to_string(recv + 1) + "), but stage 2 is blocked at instruction " +
                                                       std::to_string(recv) + " (recv_bwd mb 0)"));
  EXPECT_TRUE(has_problem(r, Kind::deadlock, 1, index_of(s, 1, in(PipelineOp::recv_bwd, 0)), "from stage 2"));
  EXPECT_TRUE(has_problem(r, Kind::deadlock, 0, index_of(s, 0, in(PipelineOp::recv_bwd, 0)), "from stage 1"));
  EXPECT_EQ(r.problems[2].message.find("cycle"), std::string::npos) << r.problems[2].message;
  try {
    check_schedule(s);
    ADD_FAILURE() << "deadlock not thrown";
  } catch (const tessera::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pipeline schedule '1f1b' (p=4, m=8, v=1): stage "), std::string::npos) << what;
    EXPECT_NE(what.find("more problems"), std::string::npos) << what;
  }
}

TEST(PipelineVerifier, MissingAndDuplicatedSteps) {
  PipelineSchedule s = gpipe(1, 3);
  s.programs[0].erase(s.programs[0].begin() + index_of(s, 0, in(PipelineOp::backward, 2)));
  const PipelineReport r = verify_schedule(s);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0].message, "stage 0 (backward mb 2): order: never runs");
  EXPECT_EQ(r.problems[0].instruction, -1);

  PipelineSchedule d = gpipe(2, 2);
  d.programs[0].push_back(in(PipelineOp::forward, 1));
  expect_first_problem(d, Kind::order, 0, static_cast<int>(d.programs[0].size()) - 1, "forward run twice");

  PipelineSchedule w = one_f_one_b(1, 1);
  w.programs[0].push_back(in(PipelineOp::backward_w, 0));
  expect_first_problem(w, Kind::order, 0, 2, "backward is not split");

  PipelineSchedule o = one_f_one_b(2, 2);
  o.programs[1][0].micro_batch = 7;
  expect_first_problem(o, Kind::order, 1, 0, "no such micro-batch (the schedule has 2)");
}

// Stages with their own costs (the time model's per-stage times): equal costs give the scalar
// form's makespan; a slower last stage paces 1F1B: the first forward, every micro-batch on the last
// stage, the first stage's last backward.
TEST(PipelineSchedule, PerStageCosts) {
  const PipelineSchedule s = one_f_one_b(2, 4);
  const StepCosts even{1, 1, 1};
  EXPECT_EQ(verify_schedule(s, std::vector<StepCosts>{even, even}).makespan, verify_schedule(s, even).makespan);
  const PipelineReport r = verify_schedule(s, std::vector<StepCosts>{{1, 1, 1}, {2, 2, 2}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.makespan, 1 + 4 * (2 + 4) + 2);
  EXPECT_THROW(verify_schedule(s, std::vector<StepCosts>{even}), tessera::Error);
}
