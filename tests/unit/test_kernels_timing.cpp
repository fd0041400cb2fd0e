// The per-step time split (kernels/kernel_timing.h): kernels are sorted into their kinds by name,
// every CPU kernel call through kernels/ops.h adds to its kind on the calling thread, and
// take_kernel_times() hands the sums over and starts again; under TESSERA_OP_PROFILE each op's
// time and calls are kept by name too (kernels/op_profile.h) and printed as a table.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "kernels/kernel_timing.h"
#include "kernels/ops.h"

using tessera::Tensor;
using tessera::kernels::kernel_kind;
using tessera::kernels::KernelKind;
using tessera::kernels::OpProfile;
using tessera::kernels::OpSum;
using tessera::kernels::OpSums;
using tessera::kernels::take_kernel_times;

namespace {
// The sums of the ops named `name` (by text: the keys are pointers).
OpSum find(const OpSums& sums, const std::string& name) {
  OpSum found;
  for (const auto& [key, sum] : sums)
    if (name == key) found = sum;
  return found;
}

// The table's row for op `name`, split at blanks (op, device, calls, total ms, ms/step, share).
std::vector<std::string> row_of(const std::string& table, const std::string& name) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    if (!row.empty() && row[0] == name) return row;
  }
  return {};
}
}  // namespace

TEST(KernelTiming, KindsFollowTheKernelNames) {
  EXPECT_EQ(kernel_kind("gemm"), KernelKind::gemm);
  EXPECT_EQ(kernel_kind("gemm_batched"), KernelKind::gemm);
  EXPECT_EQ(kernel_kind("attention_forward"), KernelKind::attention);
  EXPECT_EQ(kernel_kind("attention_block_backward"), KernelKind::attention);
  EXPECT_EQ(kernel_kind("adamw"), KernelKind::optimizer);
  EXPECT_EQ(kernel_kind("sum_squares"), KernelKind::optimizer);  // the gradient norm, for clipping
  EXPECT_EQ(kernel_kind("round_bf16_sum_squares"), KernelKind::optimizer);  // bf16: the norm as gradients round
  EXPECT_EQ(kernel_kind("layernorm_forward"), KernelKind::other);
  EXPECT_EQ(kernel_kind("embedding_backward"), KernelKind::other);
}

TEST(KernelTiming, CallsAddToTheirKindUntilTaken) {
  take_kernel_times();
  const auto nothing = take_kernel_times();  // no kernel ran since the last take
  for (double ms : nothing.ms) EXPECT_EQ(ms, 0.0);

  Tensor a = Tensor::zeros({64, 64}), b = Tensor::zeros({64, 64}), c = Tensor::zeros({64, 64});
  tessera::ops::matmul(a, false, b, true, c);
  const auto after_gemm = take_kernel_times();
  EXPECT_GT(after_gemm.of(KernelKind::gemm), 0.0);
  EXPECT_EQ(after_gemm.of(KernelKind::attention), 0.0);
  EXPECT_EQ(after_gemm.of(KernelKind::optimizer), 0.0);
  EXPECT_EQ(after_gemm.of(KernelKind::other), 0.0);

  tessera::ops::add_inplace(c, a);
  const auto after_add = take_kernel_times();
  EXPECT_EQ(after_add.of(KernelKind::gemm), 0.0) << "taking must reset the sums";
  EXPECT_GT(after_add.of(KernelKind::other), 0.0);

  (void)tessera::ops::sum_squares(c);
  const auto after_norm = take_kernel_times();
  EXPECT_GT(after_norm.of(KernelKind::optimizer), 0.0);
  EXPECT_EQ(after_norm.of(KernelKind::other), 0.0);
}

TEST(KernelTiming, ATimerAddsToTheKindItNames) {
  take_kernel_times();
  {
    const tessera::kernels::KernelTimer waiting_for_data(KernelKind::data);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // sleeps at least that long
  }
  const auto taken = take_kernel_times();
  EXPECT_GE(taken.of(KernelKind::data), 2.0);
  EXPECT_EQ(taken.of(KernelKind::gemm), 0.0);
}

TEST(OpProfile, OnEachOpIsSummedByNameIntoTheProfileItIsTakenInto) {
  const tessera::kernels::OpProfileScope on(true);
  Tensor a = Tensor::zeros({32, 32}), b = Tensor::zeros({32, 32}), c = Tensor::zeros({32, 32});
  tessera::ops::add_inplace(c, a);
  take_kernel_times();  // dropped: not in any profile
  OpProfile profile;
  for (int i = 0; i < 2; ++i) tessera::ops::matmul(a, false, b, true, c);
  for (int i = 0; i < 3; ++i) tessera::ops::add_inplace(c, a);
  (void)tessera::ops::sum_squares(c);  // timed outside TESSERA_DISPATCH, named by hand
  { const tessera::kernels::KernelTimer named(KernelKind::other, "my_op"); }
  { const tessera::kernels::KernelTimer unnamed(KernelKind::optimizer); }  // under its kind
  take_kernel_times(&profile);
  tessera::ops::add_inplace(c, a);
  take_kernel_times(&profile);

  EXPECT_EQ(profile.steps, 2);
  EXPECT_TRUE(profile.cuda.empty());
  EXPECT_EQ(find(profile.cpu, "gemm").calls, 2);
  EXPECT_EQ(find(profile.cpu, "add_inplace").calls, 4) << "the dropped call must not count";
  EXPECT_EQ(find(profile.cpu, "sum_squares").calls, 1);
  EXPECT_EQ(find(profile.cpu, "[optimizer]").calls, 1);
  EXPECT_EQ(find(profile.cpu, "my_op").calls, 1);
  for (const auto& [name, sum] : profile.cpu) EXPECT_GE(sum.ms, 0.0) << name;

  const std::string table = tessera::kernels::format_op_profile(profile);
  const std::vector<std::string> gemm = row_of(table, "gemm"), add = row_of(table, "add_inplace");
  ASSERT_EQ(gemm.size(), 6u) << table;
  EXPECT_EQ(gemm[1], "cpu");
  EXPECT_EQ(gemm[2], "2");
  ASSERT_EQ(add.size(), 6u) << table;
  EXPECT_EQ(add[2], "4");
  ASSERT_EQ(row_of(table, "total").size(), 5u) << table;  // no device
  EXPECT_EQ(row_of(table, "total")[1], "9");
}

TEST(OpProfile, OffNothingIsRecorded) {
  const tessera::kernels::OpProfileScope off(false);
  take_kernel_times();
  Tensor a = Tensor::zeros({32, 32}), c = Tensor::zeros({32, 32});
  OpProfile profile;
  tessera::ops::add_inplace(c, a);
  {
    const tessera::kernels::KernelTimer named(KernelKind::other, "my_op");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // at least 2 ms, whatever the clock
  }
  const auto taken = take_kernel_times(&profile);
  EXPECT_TRUE(profile.cpu.empty());
  EXPECT_TRUE(profile.cuda.empty());
  EXPECT_GE(taken.of(KernelKind::other), 2.0) << "the kinds' sums go on as before";
}

TEST(OpProfile, TheTableMergesNamesByTextAndSortsByTotal) {
  const std::string first = "gemm", second = "gemm";  // equal text at two addresses
  OpProfile profile;
  profile.steps = 2;
  profile.cpu[first.c_str()] = {1.0, 1};
  profile.cpu[second.c_str()] = {2.0, 2};
  profile.cuda["gemm"] = {9.0, 3};
  profile.cuda["layernorm_forward"] = {4.0, 3};
  const std::string table = tessera::kernels::format_op_profile(profile);
  std::vector<std::string> order;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name, device;
    if (words >> name >> device && (device == "cpu" || device == "cuda")) order.push_back(name + "/" + device);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"gemm/cuda", "layernorm_forward/cuda", "gemm/cpu"})) << table;
  EXPECT_EQ(row_of(table, "layernorm_forward"), (std::vector<std::string>{"layernorm_forward", "cuda", "3", "4.000", "2.000", "25.0%"}));
  const std::vector<std::string> total = row_of(table, "total");
  ASSERT_EQ(total.size(), 5u) << table;
  EXPECT_EQ(total[1], "9");
  EXPECT_EQ(total[2], "16.000");
}
