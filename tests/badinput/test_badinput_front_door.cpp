// The tools' front door: --help lists, in its sections, only options the tool accepts (every
// option printed is given back to the tool in one command line, which must parse) and none of
// another tool's; --version names the version, commit, build and devices; an option's old name
// still works with a warning naming the new one (command line and config file); vit_train --dry-run
// prints the plan and trains nothing; TESSERA_CUDA_COMM is read as --comm-backend with a warning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

std::string app(const std::string& name) { return std::string(TESSERA_BUILD_DIR) + "/apps/" + name; }

// A long option printed by --help: its name, and whether a value name follows it.
struct HelpOption {
  std::string name;
  bool takes_value = false;
};

// The long options of a --help text, as Boost prints them ("  --steps N (=100)    optimizer steps").
std::vector<HelpOption> help_options(const std::string& help) {
  std::vector<HelpOption> out;
  const std::regex line(R"(^  --([a-z0-9][a-z0-9-]*)( [^ ]+)?)");
  std::istringstream in(help);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line)) out.push_back({m[1].str(), m[2].matched});
  }
  return out;
}

// `command --help` must print options; then every one of them, given back to the tool (values "1",
// which every option's type reads) with --help first, must parse: --help is acted on after the
// whole command line is read, so an option the tool does not accept fails as "unrecognised".
std::vector<HelpOption> expect_help_options_accepted(const std::string& command, size_t at_least = 3) {
  const CommandResult help = run_command(command + " --help");
  EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
  const std::vector<HelpOption> options = help_options(help.out);
  EXPECT_GE(options.size(), at_least) << command << " --help printed no options:\n" << help.out;
  std::string all;
  for (const HelpOption& o : options)
    if (o.name != "help" && o.name != "version") all += " --" + o.name + (o.takes_value ? "=1" : "");
  const CommandResult back = run_command(command + " --help" + all);
  EXPECT_EQ(back.exit_code, 0) << command << " does not accept every option its --help lists:\n" << back.err;
  EXPECT_EQ(back.err.find("unrecognised"), std::string::npos) << back.err;
  EXPECT_NE(help.out.find("Example:"), std::string::npos) << command << " --help has no example";
  // The check can fail: an option the tool lacks is refused by name.
  const CommandResult unknown = run_command(command + " --help --not-an-option-of-any-tool");
  EXPECT_NE(unknown.err.find("unrecognised option '--not-an-option-of-any-tool'"), std::string::npos) << unknown.err;
  return options;
}

bool lists(const std::vector<HelpOption>& options, const std::string& name) {
  for (const HelpOption& o : options)
    if (o.name == name) return true;
  return false;
}

class FrontDoor : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_front_door_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    images_ = (dir_ / "images.h5").string();
    tokens_ = (dir_ / "tokens.h5").string();
    ASSERT_EQ(run_command(app("data_prep") + " synth-images --classes 3 --train 24 --test 8 --size 8 --seed 1 --output " +
                          shell_quote(images_)).exit_code, 0);
    ASSERT_EQ(run_command(app("data_prep") + " synth --vocab 20 --tokens 2000 --seed 1 --output " + shell_quote(tokens_))
                  .exit_code, 0);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::string images_, tokens_;
};

}  // namespace

TEST(FrontDoorHelp, TrainersListTheirOptionsInSectionsAndNoOtherTrainers) {
  const auto gpt = expect_help_options_accepted(app("gpt_train"));
  const auto moe = expect_help_options_accepted(app("moe_train"));
  const auto vit = expect_help_options_accepted(app("vit_train"));
  for (const char* common : {"input", "steps", "dp", "tp", "pp", "pp-schedule", "micro-batch", "global-batch",
                             "precision", "recompute-every-k-blocks", "checkpoint-dir", "resume", "metrics",
                             "dry-run", "comm-backend", "log-level", "check-collectives", "benchmark-loader"})
    for (const auto* options : {&gpt, &moe, &vit}) EXPECT_TRUE(lists(*options, common)) << "--" << common;
  // moe_train's, gpt_train's and vit_train's own options stay with their tool.
  for (const char* moe_only : {"ep", "experts", "top-k"}) {
    EXPECT_TRUE(lists(moe, moe_only)) << moe_only;
    EXPECT_FALSE(lists(gpt, moe_only)) << "gpt_train --help lists moe_train's --" << moe_only;
    EXPECT_FALSE(lists(vit, moe_only)) << "vit_train --help lists moe_train's --" << moe_only;
  }
  for (const char* lm_only : {"eval-batches", "seq-len", "val-input", "dump", "placement"})
    EXPECT_FALSE(lists(vit, lm_only)) << "vit_train --help lists the language models' --" << lm_only;
  for (const char* vit_only : {"patch", "crop-pad", "epochs"})
    EXPECT_FALSE(lists(gpt, vit_only)) << "gpt_train --help lists vit_train's --" << vit_only;
  // The old names are not offered.
  for (const auto* options : {&gpt, &moe, &vit}) EXPECT_FALSE(lists(*options, "checkpoint-every-k-blocks"));
  EXPECT_FALSE(lists(vit, "data"));

  const CommandResult help = run_command(app("gpt_train") + " --help");
  size_t at = 0;
  for (const char* section : {"Model:", "Data:", "Training:", "Layout:", "Precision and memory:", "Checkpoints:",
                              "Logging:", "Debugging:", "General:", "Example:"}) {
    const size_t found = help.out.find(std::string("\n") + section + "\n", at);
    EXPECT_NE(found, std::string::npos) << "no section " << section << " (in this order):\n" << help.out;
    if (found != std::string::npos) at = found;
  }
  // Value names and readable defaults (a float's default is not 0.100000001).
  for (const char* shown : {"--steps N (=100)", "--weight-decay X (=0.1)", "--beta2 X (=0.95)", "--metrics FILE.jsonl",
                            "--precision fp32|bf16|fp16 (=fp32)", "--comm-backend host|nccl (=host)"})
    EXPECT_NE(help.out.find(shown), std::string::npos) << shown << " not in:\n" << help.out;
  EXPECT_EQ(help.out.find("0.100000001"), std::string::npos);
}

TEST(FrontDoorHelp, ToolsListOnlyOptionsTheyAccept) {
  for (const char* command : {"text", "sft", "synth", "cifar10", "synth-images"})
    expect_help_options_accepted(app("data_prep") + " " + command);
  const auto plan = expect_help_options_accepted(app("parallel_plan") + " schedule");
  for (const char* name : {"pp", "pp-schedule", "micro-batches", "global-batch", "micro-batch", "dp"})
    EXPECT_TRUE(lists(plan, name)) << "parallel_plan schedule --help lacks --" << name;
  EXPECT_FALSE(lists(plan, "schedule"));
  EXPECT_FALSE(lists(plan, "micro"));
  const auto ckpt = expect_help_options_accepted(app("ckpt_tool") + " inspect", 1);
  EXPECT_TRUE(lists(ckpt, "file"));
  const auto generate = expect_help_options_accepted(app("generate"));
  for (const char* name : {"checkpoint", "prompts", "output", "max-batch", "max-len", "top-p", "seed", "score", "weights"})
    EXPECT_TRUE(lists(generate, name)) << "generate --help lacks --" << name;
}

TEST(FrontDoorVersion, EveryToolNamesVersionCommitBuildAndDevices) {
  for (const char* tool :
       {"gpt_train", "moe_train", "vit_train", "data_prep", "parallel_plan", "ckpt_tool", "generate"}) {
    const CommandResult r = run_command(app(tool) + " --version");
    EXPECT_EQ(r.exit_code, 0) << tool << ": " << r.err;
    EXPECT_EQ(r.out.rfind(std::string(tool) + " (tessera) ", 0), 0u) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\ncommit: ([0-9a-f]{40}|unknown)\n"))) << r.out;
    EXPECT_NE(r.out.find("\nbuild: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\noptions: TESSERA_NATIVE="), std::string::npos) << r.out;
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\ndevices: cpu(, cuda \\(.*\\))?\n"))) << r.out;
  }
}

TEST_F(FrontDoor, OldNamesStillWorkWithAWarningNamingTheNewOne) {
  const std::string vit = app("vit_train") + " --layers 1 --hidden 16 --heads 2 --patch 4 --global-batch 4 --steps 1"
                          " --threads 1 --dry-run ";
  const CommandResult data = run_command(vit + "--data " + shell_quote(images_));
  EXPECT_EQ(data.exit_code, 0) << data.err;
  EXPECT_NE(data.err.find("--data is the old name of --input: it still works, but will be removed"), std::string::npos)
      << data.err;
  // Both names at once is the same option given twice.
  const CommandResult both = run_command(vit + "--data " + shell_quote(images_) + " --input " + shell_quote(images_));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--input is given more than once"), std::string::npos) << both.err;

  const std::string gpt = app("gpt_train") + " --input " + shell_quote(tokens_) +
                          " --layers 2 --hidden 16 --heads 2 --seq-len 8 --steps 1 --threads 1 --dry-run"
                          " --activation-checkpointing full ";
  const CommandResult k = run_command(gpt + "--checkpoint-every-k-blocks 2");
  EXPECT_EQ(k.exit_code, 0) << k.err;
  EXPECT_NE(k.err.find("--checkpoint-every-k-blocks is the old name of --recompute-every-k-blocks"), std::string::npos)
      << k.err;
  EXPECT_NE(k.out.find("every 2 block(s)"), std::string::npos) << k.out;  // the value reached the plan
  // In a config file too, naming the file.
  const std::string ini = file("old.ini");
  std::ofstream(ini) << "checkpoint-every-k-blocks = 2\n";
  const CommandResult in_file = run_command(gpt + "--config " + shell_quote(ini));
  EXPECT_EQ(in_file.exit_code, 0) << in_file.err;
  EXPECT_NE(in_file.err.find("--checkpoint-every-k-blocks in config file " + ini + " is the old name of"),
            std::string::npos) << in_file.err;

  const CommandResult force = run_command(app("data_prep") + " synth --vocab 8 --tokens 200 --seed 2 --output " +
                                          shell_quote(tokens_) + " --force");
  EXPECT_EQ(force.exit_code, 0) << force.err;
  EXPECT_NE(force.err.find("--force is the old name of --overwrite"), std::string::npos) << force.err;

  const CommandResult plan = run_command(app("parallel_plan") + " schedule --pp 2 --micro 4 --schedule gpipe");
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.err.find("--micro is the old name of --micro-batches"), std::string::npos) << plan.err;
  EXPECT_NE(plan.err.find("--schedule is the old name of --pp-schedule"), std::string::npos) << plan.err;
  EXPECT_NE(plan.out.find("pipeline schedule gpipe: 2 stages, 4 micro-batches"), std::string::npos) << plan.out;
  // The trainers' way of giving the micro-batches: global batch / (micro-batch x dp).
  const CommandResult split =
      run_command(app("parallel_plan") + " schedule --pp 2 --global-batch 16 --micro-batch 2 --dp 2");
  EXPECT_EQ(split.exit_code, 0) << split.err;
  EXPECT_NE(split.out.find("2 stages, 4 micro-batches"), std::string::npos) << split.out;
  const CommandResult uneven =
      run_command(app("parallel_plan") + " schedule --pp 2 --global-batch 10 --micro-batch 4");
  EXPECT_EQ(uneven.exit_code, 2);
  EXPECT_NE(uneven.err.find("--global-batch 10 does not split into micro-batches of 4 over --dp 1"), std::string::npos)
      << uneven.err;
}

TEST_F(FrontDoor, VitDryRunPrintsThePlanAndItsMemoryAndTrainsNothing) {
  const std::string metrics = file("m.jsonl");
  const CommandResult r = run_command(app("vit_train") + " --input " + shell_quote(images_) +
                                      " --layers 2 --hidden 16 --heads 2 --patch 4 --global-batch 8 --micro-batch 2"
                                      " --pp 2 --dp 2 --steps 3 --threads 1 --dry-run --metrics " + shell_quote(metrics));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"vit_train plan (dry run: nothing is trained)", "layout: pp=2 dp=2 ep=1 sp=1 tp=1, 4 rank(s)",
                           "model: 2 layers, hidden 16, 2 heads, patch 4", "5 tokens per image (pool cls), 3 classes",
                           "batch: 8 images per step over 2 batch rank(s): 2 micro-batch(es) of 2 per rank",
                           "pipeline: 1f1b over 2 stages, 2 micro-batches, bubble fraction 0.3333", "parameters: ",
                           "pipeline stage 0: blocks 0-0, patch embedding", "pipeline stage 1: blocks 1-1, head",
                           "predicted peak per rank: "})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << " not in:\n" << r.out;
  EXPECT_FALSE(fs::exists(metrics)) << "a dry run wrote its metrics file";
  // The same layout checks as a run: a batch that does not split is refused.
  const CommandResult bad = run_command(app("vit_train") + " --input " + shell_quote(images_) +
                                        " --layers 2 --hidden 16 --heads 2 --global-batch 6 --micro-batch 4 --dp 2"
                                        " --threads 1 --dry-run");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("error:"), std::string::npos) << bad.err;
}

TEST_F(FrontDoor, CommBackendIsAnOptionAndItsOldVariableWarns) {
  const std::string gpt = app("gpt_train") + " --input " + shell_quote(tokens_) +
                          " --layers 1 --hidden 16 --heads 2 --seq-len 8 --steps 1 --threads 1 --dry-run";
  const CommandResult bad = run_command(gpt + " --comm-backend infiniband");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--comm-backend infiniband: expected host or nccl"), std::string::npos) << bad.err;
  const CommandResult env = run_command("TESSERA_CUDA_COMM=host " + gpt);
  EXPECT_EQ(env.exit_code, 0) << env.err;
  EXPECT_NE(env.err.find("TESSERA_CUDA_COMM=host is read as --comm-backend host"), std::string::npos) << env.err;
  const CommandResult env_bad = run_command("TESSERA_CUDA_COMM=ib " + gpt);
  EXPECT_NE(env_bad.err.find("--comm-backend ib: expected host or nccl"), std::string::npos) << env_bad.err;
  // The option wins over the variable, silently.
  const CommandResult both = run_command("TESSERA_CUDA_COMM=ib " + gpt + " --comm-backend host");
  EXPECT_EQ(both.exit_code, 0) << both.err;
  EXPECT_EQ(both.err.find("TESSERA_CUDA_COMM"), std::string::npos) << both.err;
}
