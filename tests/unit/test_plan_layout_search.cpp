// The layout search (apps/common/layout_search.h): the count of layouts for one rank by hand, every
// layout it keeps accepted by the trainer's checks again and within the memory, the ranking
// deterministic, layout flags among the trainer's refused; moe_train's layouts with ep (never a grid);
// vit_train's with sp, the grid modes and its own checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "apps/common/layout_search.h"
#include "core/error.h"
#include "plan/machine_model.h"

using namespace tessera;

namespace {

plan::MachineModel machine() {
  plan::MachineModel m;
  m.gemm["f32"] = {{"all", 1e30, 1e10}};
  m.attention_flops_per_s = 1e10;
  m.copy_bytes_per_s = 1e9;
  for (const std::string& k : plan::kernel_class_names()) m.kernel_seconds_per_element[k] = 1e-9;
  for (const std::string& op : plan::collective_names()) m.collectives["intra_node"][op][2] = {1e-5, 1e-9};
  return m;
}

cli::SearchInput one_rank(int64_t memory) {
  cli::SearchInput in;
  in.ranks = 1;
  in.ranks_per_node = 1;
  in.device_memory = memory;
  in.vocab = 61;
  in.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--global-batch", "2"};
  return in;
}

}  // namespace

TEST(LayoutSearch, OneRankCountedByHand) {
  const cli::SearchResult r = cli::search_layouts(one_rank(int64_t{1} << 40), machine());
  // dp = tp = pp = sp = 1; micro-batch 1 or 2; checkpointing none, full, selective; ZeRO 0-2 with
  // offload none or cpu (2 x 3 x 2 = 12 each), ZeRO 3 also with --offload-params (18): 54 layouts,
  // of which the 42 with ZeRO over a data group of one rank are the same as ZeRO 0.
  EXPECT_EQ(r.enumerated, 54);
  EXPECT_EQ(r.ranked.size(), 12u);
  EXPECT_EQ(r.rejected.size(), 1u);
  EXPECT_EQ(r.rejected.begin()->second, 42);
}

TEST(LayoutSearch, EveryLayoutKeptIsValidAndFits) {
  const cli::SearchResult all = cli::search_layouts(one_rank(int64_t{1} << 40), machine());
  std::vector<int64_t> peaks;
  for (const cli::LayoutChoice& c : all.ranked) peaks.push_back(c.peak());
  std::sort(peaks.begin(), peaks.end());
  const int64_t limit = peaks[peaks.size() / 2];
  const cli::SearchResult r = cli::search_layouts(one_rank(limit), machine());
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_LT(r.ranked.size(), all.ranked.size());
  EXPECT_GT(r.rejected.at("planned peak above --device-memory"), 0);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const cli::LayoutChoice& c = r.ranked[i];
    EXPECT_LE(c.peak(), limit) << c.args_text();
    // Checked again from its flags alone, as gpt_train would: the same plan.
    const cli::LayoutChoice again = cli::evaluate_layout(one_rank(limit), machine(), c.args);
    EXPECT_EQ(again.peak(), c.peak()) << c.args_text();
    EXPECT_EQ(again.time.step_s, c.time.step_s) << c.args_text();
    if (i > 0) {
      EXPECT_LE(r.ranked[i - 1].time.step_s, c.time.step_s);
    }
  }
  // Deterministic: the same inputs, the same ranking.
  const cli::SearchResult twice = cli::search_layouts(one_rank(limit), machine());
  ASSERT_EQ(twice.ranked.size(), r.ranked.size());
  for (size_t i = 0; i < r.ranked.size(); ++i) EXPECT_EQ(twice.ranked[i].args, r.ranked[i].args);
}

TEST(LayoutSearch, RefusesLayoutFlagsAndBadLayouts) {
  cli::SearchInput in = one_rank(int64_t{1} << 40);
  in.trainer_args.insert(in.trainer_args.end(), {"--tp", "2"});
  EXPECT_THROW(cli::search_layouts(in, machine()), Error);
  // The trainer's own checks: heads 2 do not split over tp 4.
  cli::SearchInput four = one_rank(int64_t{1} << 40);
  four.ranks = 4;
  four.ranks_per_node = 4;
  EXPECT_THROW(cli::evaluate_layout(four, machine(), {"--dp", "1", "--tp", "4"}), std::exception);
}

TEST(LayoutSearch, MoeTrainLayoutsChooseEpAndPassMoeTrainsChecks) {
  cli::SearchInput in;
  in.ranks = 4;
  in.ranks_per_node = 4;
  in.device_memory = int64_t{1} << 40;
  in.vocab = 61;
  in.moe = true;
  in.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--global-batch", "8",
                     "--experts", "4", "--top-k", "2"};
  plan::MachineModel m = machine();
  for (const std::string& op : plan::collective_names()) m.collectives["intra_node"][op][4] = {2e-5, 1e-9};
  const cli::SearchResult r = cli::search_layouts(in, m);
  ASSERT_FALSE(r.ranked.empty());
  std::vector<int> eps;
  bool zero_bubble = false;
  std::set<std::string> sp_layouts;  // "sp x ep mode" of the layouts with sequence parallelism or split_gather
  for (const cli::LayoutChoice& c : r.ranked) {
    const auto ep = std::find(c.args.begin(), c.args.end(), "--ep");
    ASSERT_NE(ep, c.args.end()) << c.args_text();
    eps.push_back(std::stoi(*(ep + 1)));
    const auto sp = std::find(c.args.begin(), c.args.end(), "--sp");
    ASSERT_NE(sp, c.args.end()) << c.args_text();
    const auto mode = std::find(c.args.begin(), c.args.end(), "--sp-mode");
    if (mode != c.args.end()) sp_layouts.insert(*(sp + 1) + " x " + *(ep + 1) + " " + *(mode + 1));
    zero_bubble = zero_bubble || std::find(c.args.begin(), c.args.end(), "zb") != c.args.end();
  }
  EXPECT_TRUE(zero_bubble) << "no moe_train layout with --pp-schedule zb (its experts split B and W)";
  for (int ep : {1, 2, 4}) EXPECT_NE(std::find(eps.begin(), eps.end(), ep), eps.end()) << "no layout with --ep " << ep;
  // Sequence parallelism in all three modes, alone and beside ep (the MoE layers' token shards).
  for (const char* want : {"2 x 1 ring", "2 x 1 all_to_all", "2 x 2 ring", "2 x 2 all_to_all", "4 x 1 ring",
                           "1 x 1 split_gather", "1 x 2 split_gather"})
    EXPECT_TRUE(sp_layouts.count(want)) << "no moe_train layout with sp x ep mode " << want;
  // moe_train's own checks take zb with experts; gpt_train's layouts take no --ep.
  const cli::LayoutChoice zb = cli::evaluate_layout(in, m, {"--dp", "2", "--pp", "2", "--pp-schedule", "zb"});
  EXPECT_GT(zb.peak(), 0);
  cli::SearchInput gpt = in;
  gpt.moe = false;
  gpt.trainer_args.resize(10);
  EXPECT_THROW(cli::evaluate_layout(gpt, m, {"--dp", "2", "--ep", "2"}), std::exception);
  in.trainer_args.insert(in.trainer_args.end(), {"--ep", "2"});
  EXPECT_THROW(cli::search_layouts(in, m), Error);  // --ep is the search's choice
}

TEST(LayoutSearch, VitTrainLayoutsPassVitTrainsChecks) {
  cli::SearchInput in;
  in.ranks = 4;
  in.ranks_per_node = 4;
  in.device_memory = int64_t{1} << 40;
  in.vit = true;
  // 8 x 8 x 3 images of 4 classes (not read: the geometry is given), 4 x 4 patches with mean pooling: 4 tokens.
  in.image = 8;
  in.channels = 3;
  in.classes = 4;
  in.trainer_args = {"--input", "never-read.h5", "--layers", "2", "--hidden", "16", "--heads", "4", "--patch", "4",
                     "--pool", "mean", "--global-batch", "8"};
  plan::MachineModel m = machine();
  for (const std::string& op : plan::collective_names()) m.collectives["intra_node"][op][4] = {2e-5, 1e-9};
  const cli::SearchResult r = cli::search_layouts(in, m);
  ASSERT_FALSE(r.ranked.empty());
  std::vector<int> sps;
  for (const cli::LayoutChoice& c : r.ranked) {
    EXPECT_TRUE(c.vit) << c.args_text();
    EXPECT_EQ(std::find(c.args.begin(), c.args.end(), "--ep"), c.args.end()) << c.args_text();
    EXPECT_EQ(std::find(c.args.begin(), c.args.end(), "split_gather"), c.args.end()) << c.args_text();
    sps.push_back(std::stoi(*(std::find(c.args.begin(), c.args.end(), "--sp") + 1)));
    // The memory plan is vit_train's: its first stage holds the patch embedding.
    EXPECT_NE(c.memory_text().find("patch embedding"), std::string::npos) << c.args_text();
  }
  for (int sp : {1, 2, 4}) EXPECT_NE(std::find(sps.begin(), sps.end(), sp), sps.end()) << "no layout with --sp " << sp;
  // Checked again from its flags alone: the same plan.
  const cli::LayoutChoice again = cli::evaluate_layout(in, m, r.ranked.front().args);
  EXPECT_EQ(again.peak(), r.ranked.front().peak());
  EXPECT_EQ(again.time.step_s, r.ranked.front().time.step_s);
  // vit_train's own checks: an sp that does not divide the 5 tokens of class-token pooling, split_gather.
  cli::SearchInput cls = in;
  cls.trainer_args.erase(cls.trainer_args.begin() + 10, cls.trainer_args.begin() + 12);  // --pool mean
  EXPECT_THROW(cli::evaluate_layout(cls, m, {"--dp", "2", "--sp", "2"}), Error);
  EXPECT_THROW(cli::evaluate_layout(in, m, {"--dp", "2", "--tp", "2", "--sp-mode", "split_gather"}), std::exception);
  // A memory limit below every plan: nothing fits, the smallest plan is named.
  in.device_memory = 1024;
  const cli::SearchResult none = cli::search_layouts(in, m);
  EXPECT_TRUE(none.ranked.empty());
  EXPECT_GT(none.smallest_peak, 1024);
  EXPECT_NE(none.rejected_text().find("planned peak above --device-memory"), std::string::npos);
}

// The search offers zigzag beside ring and all_to_all at sp > 1; the time model gives zigzag the
// balanced share of the causal attention, so each zigzag layout is predicted faster than the same
// layout with the contiguous ring, with the same messages and memory within the positions' rows.
TEST(LayoutSearch, ZigzagIsOfferedAndPredictedFasterThanTheContiguousRing) {
  cli::SearchInput in = one_rank(int64_t{1} << 40);
  in.ranks = 2;
  in.ranks_per_node = 2;
  in.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "64", "--global-batch", "2"};
  const cli::SearchResult r = cli::search_layouts(in, machine());
  int zigzags = 0;
  for (const cli::LayoutChoice& c : r.ranked) {
    const auto mode = std::find(c.args.begin(), c.args.end(), "--sp-mode");
    if (mode == c.args.end() || *(mode + 1) != "zigzag") continue;
    ++zigzags;
    std::vector<std::string> ring = c.args;
    ring[mode - c.args.begin() + 1] = "ring";
    const cli::LayoutChoice same = cli::evaluate_layout(in, machine(), ring);
    EXPECT_LT(c.time.step_s, same.time.step_s) << c.args_text();
    EXPECT_LT(c.time.compute_s, same.time.compute_s) << c.args_text();
    ASSERT_EQ(c.time.comm.size(), same.time.comm.size());
    for (size_t i = 0; i < c.time.comm.size(); ++i) EXPECT_EQ(c.time.comm[i].bytes, same.time.comm[i].bytes);
    EXPECT_GT(c.peak(), same.peak()) << "zigzag also holds each row's position";
  }
  EXPECT_GT(zigzags, 0) << "no zigzag layout ranked";
  // A sequence that splits over sp but not into 2 x sp chunks is refused by the trainer's check.
  in.trainer_args[7] = "6";
  EXPECT_THROW(cli::evaluate_layout(in, machine(), {"--dp", "1", "--sp", "2", "--sp-mode", "zigzag"}), Error);
  EXPECT_NO_THROW(cli::evaluate_layout(in, machine(), {"--dp", "1", "--sp", "2", "--sp-mode", "ring"}));
}

// Grid tensor parallelism (gpt_train's --tp-mode 2d, 2.5d, 3d): on 4 ranks tp 4 is a 2 x 2 grid,
// offered as --tp-mode 2d beside 1d, its batch split over the grid's rows (micro-batches divide
// global / (dp x 2)); planned and timed like every layout, and checked again from its flags alone.
// On 8 ranks tp 8 is offered as 2.5d (depth 2) and 3d.
TEST(LayoutSearch, GridTensorParallelLayoutsAreOfferedPlannedAndTimed) {
  cli::SearchInput in = one_rank(int64_t{1} << 40);
  in.ranks = 4;
  in.ranks_per_node = 4;
  in.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "4", "--seq-len", "16", "--global-batch", "4"};
  const cli::SearchResult r = cli::search_layouts(in, machine());
  int grids = 0;
  for (const cli::LayoutChoice& c : r.ranked) {
    const auto mode = std::find(c.args.begin(), c.args.end(), "--tp-mode");
    if (mode == c.args.end()) continue;
    ++grids;
    EXPECT_EQ(*(mode + 1), "2d") << c.args_text();
    EXPECT_EQ(c.run.mesh.tp, 4) << c.args_text();
    EXPECT_EQ(c.run.mesh.tp_mode, comm::TpMode::d2) << c.args_text();
    EXPECT_LE(c.run.micro_batch * c.run.micro_batches * 2, 4) << c.args_text();
    EXPECT_GT(c.peak(), 0);
    EXPECT_GT(c.time.step_s, 0);
    EXPECT_NE(c.memory_text().find("grid tp"), std::string::npos) << c.memory_text();
    const cli::LayoutChoice again = cli::evaluate_layout(in, machine(), c.args);
    EXPECT_EQ(again.peak(), c.peak()) << c.args_text();
    EXPECT_EQ(again.time.step_s, c.time.step_s) << c.args_text();
  }
  EXPECT_GT(grids, 0) << r.rejected_text();
  // heads 4 and hidden 32 split over q = 2; 3 heads do not (the trainer's own check).
  cli::SearchInput odd = in;
  odd.trainer_args = {"--layers", "2", "--hidden", "30", "--heads", "3", "--seq-len", "16", "--global-batch", "4"};
  EXPECT_THROW(cli::evaluate_layout(odd, machine(), {"--dp", "1", "--tp", "4", "--tp-mode", "2d", "--pp", "1"}),
               std::exception);
  cli::SearchInput eight = in;
  eight.ranks = 8;
  eight.ranks_per_node = 8;
  eight.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "4", "--seq-len", "16", "--global-batch", "4"};
  for (const std::vector<std::string>& grid : {std::vector<std::string>{"--tp-mode", "2.5d", "--tp-depth", "2"},
                                               std::vector<std::string>{"--tp-mode", "3d"}}) {
    std::vector<std::string> args = {"--dp", "1", "--tp", "8"};
    args.insert(args.end(), grid.begin(), grid.end());
    args.insert(args.end(), {"--pp", "1", "--zero", "0", "--micro-batch", "1"});
    const cli::LayoutChoice c = cli::evaluate_layout(eight, machine(), args);
    EXPECT_EQ(c.run.micro_batches, 1) << c.args_text();  // 4 sequences over the grid's 4 batch shares
    EXPECT_GT(c.time.step_s, 0) << c.args_text();
  }
}

// all_to_all moves whole heads between the sp ranks: the search refuses, before any run, a layout
// whose ranks' heads (--heads over tp) do not split over sp, as the trainer does at its start (a
// campaign once sampled sp 8 over 4 heads, and the run stopped in the attention's constructor).
TEST(LayoutSearch, AllToAllLayoutsSplitEachRanksHeadsOverSp) {
  cli::SearchInput in;
  in.ranks = 8;
  in.ranks_per_node = 8;
  in.vocab = 64;
  in.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "4", "--seq-len", "16", "--global-batch", "8"};
  const auto refusal = [&](const std::vector<std::string>& layout) -> std::string {
    try {
      cli::evaluate_layout(in, machine(), layout);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal({"--dp", "1", "--tp", "1", "--pp", "1", "--sp", "8", "--sp-mode", "all_to_all"})
                .find("each rank's 4 heads (--heads 4) do not split evenly over the 8 sp ranks"),
            std::string::npos);
  EXPECT_NE(refusal({"--dp", "1", "--tp", "2", "--pp", "1", "--sp", "4", "--sp-mode", "all_to_all"})
                .find("each rank's 2 heads (--heads 4 over the tensor split) do not split evenly over the 4 sp ranks"),
            std::string::npos);
  EXPECT_EQ(refusal({"--dp", "2", "--tp", "1", "--pp", "1", "--sp", "4", "--sp-mode", "all_to_all"}), "");
  EXPECT_EQ(refusal({"--dp", "1", "--tp", "1", "--pp", "1", "--sp", "8", "--sp-mode", "ring"}), "");
}

// vit_train takes every grid mode (its dry run plans them: plan/vit_memory_plan.h): on 4 ranks tp 4
// is offered as --tp-mode 2d, planned with the grid's workspace and its own feature block at the
// edges, timed, and checked again from its flags alone; on 8 ranks 2.5d and 3d plan and time too.
TEST(LayoutSearch, VitTrainGridLayoutsAreOfferedPlannedAndTimed) {
  cli::SearchInput in;
  in.ranks = 4;
  in.ranks_per_node = 4;
  in.device_memory = int64_t{1} << 40;
  in.vit = true;
  in.image = 8;
  in.channels = 3;
  in.classes = 4;
  in.trainer_args = {"--input", "never-read.h5", "--layers", "2", "--hidden", "16", "--heads", "4", "--patch", "4",
                     "--pool", "mean", "--global-batch", "8"};
  plan::MachineModel m = machine();
  for (const std::string& op : plan::collective_names()) m.collectives["intra_node"][op][4] = {2e-5, 1e-9};
  const cli::SearchResult r = cli::search_layouts(in, m);
  int grids = 0;
  for (const cli::LayoutChoice& c : r.ranked) {
    const auto mode = std::find(c.args.begin(), c.args.end(), "--tp-mode");
    if (mode == c.args.end()) continue;
    ++grids;
    EXPECT_EQ(*(mode + 1), "2d") << c.args_text();
    EXPECT_TRUE(c.vit) << c.args_text();
    EXPECT_EQ(c.vit_run.mesh.tp_mode, comm::TpMode::d2) << c.args_text();
    EXPECT_NE(c.memory_text().find("grid tp: the linears' blocks"), std::string::npos) << c.memory_text();
    EXPECT_GT(c.time.step_s, 0) << c.args_text();
    const cli::LayoutChoice again = cli::evaluate_layout(in, m, c.args);
    EXPECT_EQ(again.peak(), c.peak()) << c.args_text();
    EXPECT_EQ(again.time.step_s, c.time.step_s) << c.args_text();
  }
  EXPECT_GT(grids, 0) << r.rejected_text();
  // The grid's feature blocks: the same layout at 2d holds less of each image's activations than at 1d.
  const cli::LayoutChoice d1 = cli::evaluate_layout(in, m, {"--dp", "1", "--tp", "4", "--micro-batch", "4"});
  const cli::LayoutChoice d2 =
      cli::evaluate_layout(in, m, {"--dp", "1", "--tp", "4", "--tp-mode", "2d", "--micro-batch", "4"});
  EXPECT_LT(d2.memory.stages[0].category_bytes("activations"), d1.memory.stages[0].category_bytes("activations"));
  cli::SearchInput eight = in;
  eight.ranks = 8;
  eight.ranks_per_node = 8;
  for (const std::string& op : plan::collective_names()) m.collectives["intra_node"][op][8] = {3e-5, 1e-9};
  for (const std::vector<std::string>& grid : {std::vector<std::string>{"--tp-mode", "2.5d", "--tp-depth", "2"},
                                               std::vector<std::string>{"--tp-mode", "3d"}}) {
    std::vector<std::string> args = {"--dp", "1", "--tp", "8"};
    args.insert(args.end(), grid.begin(), grid.end());
    const cli::LayoutChoice c = cli::evaluate_layout(eight, m, args);
    EXPECT_EQ(c.vit_run.micro_batch * c.vit_run.micro_batches, 2) << c.args_text();  // 8 images over 4 shares
    EXPECT_GT(c.peak(), 0) << c.args_text();
    EXPECT_GT(c.time.step_s, 0) << c.args_text();
  }
}

// moe_train refuses every grid mode (its experts route whole token rows: the model's own check), so
// the search never offers one: each is rejected by that check, counted under its reason.
TEST(LayoutSearch, MoeTrainIsNeverOfferedAGrid) {
  cli::SearchInput in;
  in.ranks = 4;
  in.ranks_per_node = 4;
  in.device_memory = int64_t{1} << 40;
  in.vocab = 61;
  in.moe = true;
  in.trainer_args = {"--layers", "2", "--hidden", "32", "--heads", "2", "--seq-len", "16", "--global-batch", "8",
                     "--experts", "4"};
  plan::MachineModel m = machine();
  for (const std::string& op : plan::collective_names()) m.collectives["intra_node"][op][4] = {2e-5, 1e-9};
  const cli::SearchResult r = cli::search_layouts(in, m);
  ASSERT_FALSE(r.ranked.empty());
  for (const cli::LayoutChoice& c : r.ranked)
    EXPECT_EQ(std::find(c.args.begin(), c.args.end(), "--tp-mode"), c.args.end()) << c.args_text();
  int64_t refused = 0;
  for (const auto& [reason, count] : r.rejected)
    if (reason.find("routes whole token rows") != std::string::npos) refused += count;
  EXPECT_GT(refused, 0) << r.rejected_text();
  try {
    cli::evaluate_layout(in, m, {"--dp", "1", "--tp", "4", "--tp-mode", "2d"});
    ADD_FAILURE() << "moe_train took --tp-mode 2d";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("routes whole token rows"), std::string::npos) << e.what();
  }
}
