// Bad input to parallel_plan: each case runs the built binary with a bad command line and asserts
// exit code 2 and one "error:" line naming the problem; a good run prints the timeline, the bubble
// fraction and the peak activations.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "run_command.h"

using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kParallelPlan = TESSERA_BUILD_DIR "/apps/parallel_plan";

// timeout(1) bounds each run: a hang would exit 124.
CommandResult plan(const std::string& args) { return run_command("timeout 60 " + shell_quote(kParallelPlan) + " " + args); }

void expect_usage_error(const std::string& args, std::initializer_list<std::string> words) {
  const CommandResult r = plan(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.out, "") << args;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "more than one error line: " << r.err;
  for (const std::string& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "' not in: " << r.err;
}

}  // namespace

TEST(BadInputParallelPlan, GoodRunsPrintTimelineBubbleAndPeaks) {
  const CommandResult r = plan("schedule --pp 4 --micro-batches 8 --pp-schedule 1f1b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  for (const char* want :
       {"pipeline schedule 1f1b: 4 stages, 8 micro-batches, 1 chunk per stage",
        "stage 0 F0 F1 F2 F3 .  .  .  .  .  .  B0 B0 F4 B1 B1", "stage 3 .  .  .  F0 B0 B0 F1 B1 B1",
        "makespan: 33 time units", "bubble fraction: 0.2727 (idle 36 of 4 stages x 33 time units)",
        "peak live activations per stage: 4 3 2 1"})
    EXPECT_NE(r.out.find(want), std::string::npos) << "'" << want << "' not in:\n" << r.out;

  const CommandResult zb = plan("schedule --pp 4 --micro-batches 8 --pp-schedule zb");
  ASSERT_EQ(zb.exit_code, 0) << zb.err;
  for (const char* want : {"bubble fraction: 0.1111", "peak live activations per stage: 4 4 4 4",
                           "peak activations awaiting backward (input gradient) per stage: 4 3 2 1"})
    EXPECT_NE(zb.out.find(want), std::string::npos) << "'" << want << "' not in:\n" << zb.out;

  const CommandResult v = plan("schedule --pp 2 --micro-batches 4 --pp-schedule interleaved --virtual-stages 2");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("F0:1"), std::string::npos) << v.out;
  EXPECT_EQ(plan("--help").exit_code, 0);
}

TEST(BadInputParallelPlan, BadOptions) {
  expect_usage_error("", {"missing command"});
  expect_usage_error("plan --pp 4", {"unknown command 'plan'"});
  expect_usage_error("schedule --pp 4", {"'--micro-batches' is required"});
  expect_usage_error("schedule --pp 4 --micro-batches 8 --pp-schedule pipedream",
                     {"unknown pipeline schedule 'pipedream'", "gpipe|1f1b|interleaved|zb"});
  expect_usage_error("schedule --pp 0 --micro-batches 8", {"stages must be at least 1 (got 0)"});
  expect_usage_error("schedule --pp 4 --micro-batches eight", {"'eight'", "--micro"});
  expect_usage_error("schedule --pp 4 --micro-batches 8 --virtual-stages 2", {"'1f1b' runs one chunk per stage"});
  expect_usage_error("schedule --pp 4 --micro-batches 6 --pp-schedule interleaved --virtual-stages 2",
                     {"multiple of the stages (6 micro-batches, 4 stages)"});
  expect_usage_error("schedule --pp 4096 --micro-batches 4096", {"too large"});
}

// An option given twice is refused (a config file already refused it), naming both values.
TEST(BadInputParallelPlan, OptionGivenTwice) {
  expect_usage_error("schedule --pp 2 --micro-batches 4 --pp 4", {"--pp is given more than once on the command line (2, then 4)"});
}
