// Bad blends of token data (--input 'a.h5:W,b.h5:W' or @blend.txt), each case a test: gpt_train
// exits 1 before training with one error naming the problem: a negative weight, weights summing to
// zero, a source file that does not exist, sources whose vocabularies differ, a malformed line of
// a blend file (by its number).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.h"
#include "scratch_test.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kBuild = TESSERA_BUILD_DIR;
const std::string kEnv = "env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 ";

class BadBlend : public tessera::testing::ScratchTest {
 protected:

  std::string synth(const std::string& name, int vocab) {
    const std::string path = file(name);
    const CommandResult r = run_command(kBuild + "/apps/data_prep synth --vocab " + std::to_string(vocab) +
                                        " --tokens 2000 --seed 3 --output " + shell_quote(path));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }
  // gpt_train on `input`: it must fail with exit code 1, every word in its error, nothing trained.
  void expect_refused(const std::string& input, std::initializer_list<std::string> words) {
    const std::string metrics = file("m.jsonl");
    const CommandResult r = run_command(kEnv + kBuild + "/apps/gpt_train --input " + shell_quote(input) +
                                        " --layers 1 --hidden 16 --heads 2 --seq-len 8 --steps 2 --threads 1" +
                                        " --metrics " + shell_quote(metrics));
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    for (const std::string& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "' not in: " << r.err;
    EXPECT_EQ(r.out.find("loss"), std::string::npos) << "a step was trained: " << r.out;
    EXPECT_FALSE(fs::exists(metrics) && fs::file_size(metrics) > 0) << "metrics were written";
  }
};

}  // namespace

TEST_F(BadBlend, NegativeWeightIsRefused) {
  const std::string a = synth("a.h5", 64), b = synth("b.h5", 64);
  expect_refused(a + ":0.7," + b + ":-0.3", {"the weight of " + b + " is negative (-0.3)"});
}

TEST_F(BadBlend, WeightsSummingToZeroAreRefused) {
  const std::string a = synth("a.h5", 64), b = synth("b.h5", 64);
  expect_refused(a + ":0," + b + ":0", {"the blend weights sum to zero"});
}

TEST_F(BadBlend, MissingSourceFileIsNamed) {
  const std::string a = synth("a.h5", 64), missing = file("missing.h5");
  expect_refused(a + ":0.5," + missing + ":0.5", {missing});
}

TEST_F(BadBlend, SourcesWithDifferentVocabulariesAreRefusedNamingBoth) {
  const std::string a = synth("a.h5", 64), b = synth("b.h5", 100);
  expect_refused(a + ":0.5," + b + ":0.5",
                 {"disagree on their vocabulary", a + " has vocab_size 64", b + " has vocab_size 100"});
}

TEST_F(BadBlend, MalformedBlendFileLineIsNamedByNumber) {
  const std::string a = synth("a.h5", 64), b = synth("b.h5", 64), blend = file("blend.txt");
  std::ofstream(blend) << "# sources\n" << a << " 0.7\n" << b << " 0.3 extra\n";
  expect_refused("@" + blend, {"blend file " + blend + " line 3", "expected 'PATH WEIGHT'"});
}
