// Bad input to parallel_plan: each case runs the built binary with a bad command line and asserts
// exit code 2 and one "error:" line naming the problem; a good run prints the timeline, the bubble
// fraction and the peak activations.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
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

// ---- calibrate and search -------------------------------------------------------------------------

namespace {

// A folder of its own per test, with a hand-written machine file for 4 ranks on one node and a tiny
// token data set.
struct SearchFolder {
  std::string dir;
  SearchFolder() {
    char tmpl[] = "/tmp/tessera_plan_XXXXXX";
    dir = mkdtemp(tmpl);
    std::string colls;
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"})
      colls += std::string(colls.empty() ? "" : ", ") + "\"" + op +
               "\": [{\"group_size\": 2, \"latency_s\": 1e-5, \"seconds_per_byte\": 1e-9},"
               " {\"group_size\": 4, \"latency_s\": 2e-5, \"seconds_per_byte\": 1e-9}]";
    write("machine.json",
          "{\"format\": \"tessera-machine\", \"format_version\": 1, \"machine\": {\"host\": \"h\", \"cpu\": \"c\","
          " \"gemm_library\": \"g\", \"created\": \"now\", \"threads_per_rank\": 1, \"ranks\": 4, \"ranks_per_node\": 4,"
          " \"nodes\": 1}, \"gemm\": {\"f32\": [{\"class\": \"all\", \"max_flops\": 1e30, \"flops_per_s\": 1e10}]},"
          " \"attention_flops_per_s\": 1e10, \"copy_bytes_per_s\": 1e9, \"kernel_call_s\": 1e-6,"
          " \"kernel_seconds_per_element\": {\"norm\": 1e-9, \"softmax\": 1e-9, \"elementwise\": 1e-9, \"adamw\": 1e-9},"
          " \"collectives\": {\"intra_node\": {" + colls + "}}}");
    run_command(shell_quote(TESSERA_BUILD_DIR "/apps/data_prep") + " synth --vocab 61 --tokens 5000 --seed 5 --output " +
                shell_quote(dir + "/data.h5") + " >/dev/null");
  }
  ~SearchFolder() { run_command("rm -rf " + shell_quote(dir)); }
  void write(const std::string& name, const std::string& text) const {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  std::string path(const std::string& name) const { return shell_quote(dir + "/" + name); }
  std::string search(const std::string& args, const std::string& machine = "machine.json") const {
    return "search --machine " + path(machine) + " --input " + path("data.h5") +
           " --layers 2 --hidden 32 --heads 4 --seq-len 16 --global-batch 8 " + args;
  }
};

void expect_runtime_error(const std::string& args, std::initializer_list<std::string> words) {
  const CommandResult r = plan(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  for (const std::string& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "' not in: " << r.err;
}

}  // namespace

TEST(BadInputParallelPlan, SearchGoodRunPrintsTheFastestAndTheRejected) {
  const SearchFolder f;
  const CommandResult r = plan(f.search("--ranks 4 --device-memory 1G --top 3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"layouts: ", "rank      step ms", "the fastest:\n  mpirun -np 4 gpt_train", "rejected by reason:"})
    EXPECT_NE(r.out.find(want), std::string::npos) << "'" << want << "' not in:\n" << r.out;
}

TEST(BadInputParallelPlan, SearchNothingFitsNamesTheSmallestPlan) {
  const SearchFolder f;
  expect_runtime_error(f.search("--ranks 4 --device-memory 1000"),
                       {"no layout of 4 ranks fits in --device-memory 1000 bytes", "the smallest plan, --dp", "bytes per rank"});
}

TEST(BadInputParallelPlan, SearchRankCountNoLayoutDivides) {
  const SearchFolder f;
  // 3 ranks: the batch of 8 does not split over dp 3, the 4 heads over tp 3, the 16 positions over
  // sp 3, and 2 blocks make no 3 stages.
  expect_runtime_error(f.search("--ranks 3 --device-memory 1G"), {"no valid layout of --ranks 3", "enumerated"});
}

TEST(BadInputParallelPlan, SearchMalformedOrForeignMachineFile) {
  const SearchFolder f;
  f.write("broken.json", "{\"format\": \"tessera-machine\", \"format_version\": 1, ");
  expect_runtime_error(f.search("--ranks 4 --device-memory 1G", "broken.json"), {"broken.json", "malformed JSON"});
  f.write("foreign.json", "{\"name\": \"a checkpoint index\", \"weight_map\": {}}");
  expect_runtime_error(f.search("--ranks 4 --device-memory 1G", "foreign.json"),
                       {"foreign.json", "not a tessera machine file"});
  expect_runtime_error(f.search("--ranks 4 --device-memory 1G", "missing.json"), {"missing.json", "cannot read"});
  // A machine file of one rank times no collective.
  f.write("one.json", "{\"format\": \"tessera-machine\", \"format_version\": 1}");
  expect_runtime_error(f.search("--ranks 4 --device-memory 1G", "one.json"), {"one.json", "lacks"});
  expect_runtime_error(f.search("--ranks 4 --device-memory 1G --tp 2"), {"--tp is a layout choice"});
}

TEST(BadInputParallelPlan, SearchWireBytesAreFp32OrHalf) {
  const SearchFolder f;
  expect_usage_error(f.search("--ranks 4 --device-memory 1G --wire-bytes 3"),
                     {"--wire-bytes must be 4 (fp32) or 2 (half precision), got 3"});
  // --explain with half-precision values on the wire prints the model FLOPs and TFLOP/s per rank.
  const CommandResult r = plan(f.search("--ranks 4 --device-memory 1G --wire-bytes 2 --explain '--dp 2 --tp 2'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("model FLOPs per step (Narayanan et al. 2021, eq. 3): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TFLOP/s"), std::string::npos) << r.out;
}

TEST(BadInputParallelPlan, CalibrateRefusesAnExistingOutput) {
  const SearchFolder f;
  expect_usage_error("calibrate --output " + f.path("machine.json"),
                     {"machine.json exists", "never writes over a file"});
  const CommandResult r = plan("calibrate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--output"), std::string::npos) << r.err;
}
