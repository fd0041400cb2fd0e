// The layout search (apps/common/layout_search.h): the count of layouts for one rank by hand, every
// layout it keeps accepted by the trainer's checks again and within the memory, the ranking
// deterministic, layout flags among the trainer's refused; moe_train's layouts with ep.
#include <gtest/gtest.h>

#include <algorithm>
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
  for (const cli::LayoutChoice& c : r.ranked) {
    const auto ep = std::find(c.args.begin(), c.args.end(), "--ep");
    ASSERT_NE(ep, c.args.end()) << c.args_text();
    eps.push_back(std::stoi(*(ep + 1)));
    // moe_train takes no --sp or --sp-mode.
    EXPECT_EQ(std::find(c.args.begin(), c.args.end(), "--sp"), c.args.end()) << c.args_text();
    zero_bubble = zero_bubble || std::find(c.args.begin(), c.args.end(), "zb") != c.args.end();
  }
  EXPECT_TRUE(zero_bubble) << "no moe_train layout with --pp-schedule zb (its experts split B and W)";
  for (int ep : {1, 2, 4}) EXPECT_NE(std::find(eps.begin(), eps.end(), ep), eps.end()) << "no layout with --ep " << ep;
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
