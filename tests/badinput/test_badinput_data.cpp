// Bad input to data_prep: each case runs the built binary and asserts a non-zero exit code, one
// "error:" line naming the problem, and that no output file (nor its .tmp) is left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "run_command.h"
#include "io/token_dataset.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kDataPrep = TESSERA_BUILD_DIR "/apps/data_prep";

// Files data_prep left beside `output` under a temporary name (<output>.tmp...).
std::vector<std::string> temporaries(const std::string& output) {
  std::vector<std::string> found;
  const fs::path parent = fs::path(output).parent_path();
  const std::string prefix = fs::path(output).filename().string() + ".tmp";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent.empty() ? fs::path(".") : parent, ec))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path().string());
  return found;
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class BadInputData : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_badinput_data_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  CommandResult data_prep(const std::string& args) const { return run_command(shell_quote(kDataPrep) + " " + args); }

  // The failure contract: non-zero exit, "error:" once on stderr with `word`, no output left.
  void expect_failure(const CommandResult& r, const std::string& word, int code,
                      const std::string& output = "") const {
    EXPECT_NE(r.exit_code, 0);
    if (code >= 0) {
      EXPECT_EQ(r.exit_code, code) << r.err;
    }
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(word), std::string::npos) << "'" << word << "' not in: " << r.err;
    EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "more than one error line: " << r.err;
    EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << "HDF5's own error stack leaked: " << r.err;
    if (!output.empty()) {
      EXPECT_FALSE(fs::exists(output)) << output;
      EXPECT_FALSE(fs::exists(output + ".tmp")) << output << ".tmp";
      EXPECT_TRUE(temporaries(output).empty()) << "a temporary was left beside " << output;
    }
  }
  fs::path dir_;
};

}  // namespace

// A control: the binary works on good input, so the failures below are about the input.
TEST_F(BadInputData, GoodInputsSucceed) {
  const std::string out = file("synth.h5");
  const CommandResult r = data_prep("synth --vocab 16 --tokens 5000 --seed 3 --output " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("entropy rate"), std::string::npos) << r.out;
  const auto train = tessera::io::TokenDataset::open(out, "train");
  const auto val = tessera::io::TokenDataset::open(out, "val");
  EXPECT_EQ(train.size(), 5000);
  EXPECT_EQ(val.size(), 500);
  EXPECT_EQ(train.vocab_size, 16);
  EXPECT_EQ(train.tokenizer, "synthetic-markov");
  ASSERT_TRUE(train.entropy_rate.has_value());
  EXPECT_GT(*train.entropy_rate, 0.0);
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  const std::string text = file("in.txt");
  std::ofstream(text) << "hello, tessera! a small text to tokenise into bytes.\n";
  const std::string tout = file("text.h5");
  const CommandResult t = data_prep("text --input " + shell_quote(text) + " --output " + shell_quote(tout));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto bytes = tessera::io::TokenDataset::open(tout, "train");
  EXPECT_EQ(bytes.vocab_size, 256);
  EXPECT_EQ(bytes.tokenizer, "bytes");
  EXPECT_EQ(bytes.read(0, 1)[0], 'h');

  EXPECT_EQ(data_prep("--help").exit_code, 0);
  EXPECT_EQ(data_prep("synth --help").exit_code, 0);
  EXPECT_EQ(data_prep("text --help").exit_code, 0);
}

TEST_F(BadInputData, MissingInputFile) {
  const std::string out = file("out.h5");
  const CommandResult r =
      data_prep("text --input " + shell_quote(file("does_not_exist.txt")) + " --output " + shell_quote(out));
  expect_failure(r, "does_not_exist.txt", 1, out);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
}

TEST_F(BadInputData, EmptyTextInput) {
  const std::string in = file("empty.txt");
  std::ofstream(in).close();
  const std::string out = file("out.h5");
  const CommandResult r = data_prep("text --input " + shell_quote(in) + " --output " + shell_quote(out));
  expect_failure(r, "empty", 1, out);
}

TEST_F(BadInputData, InputIsADirectory) {
  const std::string out = file("out.h5");
  const CommandResult r = data_prep("text --input " + shell_quote(dir_.string()) + " --output " + shell_quote(out));
  expect_failure(r, "directory", 1, out);
}

TEST_F(BadInputData, UnknownSubcommand) {
  expect_failure(data_prep("tokenize --input x"), "unknown command", 2);
  expect_failure(data_prep(""), "missing command", 2);
}

TEST_F(BadInputData, UnknownOption) {
  const std::string out = file("out.h5");
  expect_failure(data_prep("synth --vocab 8 --tokens 100 --seed 1 --colour blue --output " + shell_quote(out)),
                 "--colour", 2, out);
  expect_failure(data_prep("--frobnicate"), "--frobnicate", 2);
}

TEST_F(BadInputData, MissingRequiredOption) {
  const std::string out = file("out.h5");
  expect_failure(data_prep("synth --vocab 8 --tokens 100 --output " + shell_quote(out)), "seed", 2, out);
  expect_failure(data_prep("text --output " + shell_quote(out)), "input", 2, out);
}

TEST_F(BadInputData, VocabTooSmall) {
  const std::string out = file("out.h5");
  expect_failure(data_prep("synth --vocab 1 --tokens 100 --seed 1 --output " + shell_quote(out)), "vocab", 2, out);
}

TEST_F(BadInputData, TooFewTokens) {
  const std::string out = file("out.h5");
  expect_failure(data_prep("synth --vocab 8 --tokens 1 --seed 1 --output " + shell_quote(out)), "tokens", 2, out);
}

TEST_F(BadInputData, NotANumber) {
  const std::string out = file("out.h5");
  expect_failure(data_prep("synth --vocab lots --tokens 100 --seed 1 --output " + shell_quote(out)), "vocab", 2, out);
}

TEST_F(BadInputData, BadValFraction) {
  const std::string in = file("in.txt");
  std::ofstream(in) << "some text of reasonable length for a split\n";
  const std::string out = file("out.h5");
  expect_failure(data_prep("text --input " + shell_quote(in) + " --val-fraction 1.5 --output " + shell_quote(out)),
                 "val-fraction", 2, out);
}

TEST_F(BadInputData, OutputDirectoryDoesNotExist) {
  const std::string out = file("no/such/dir/out.h5");
  const CommandResult r = data_prep("synth --vocab 8 --tokens 100 --seed 1 --output " + shell_quote(out));
  expect_failure(r, "does not exist", 1, out);
  EXPECT_NE(r.err.find("no/such/dir"), std::string::npos) << r.err;
}

// data_prep never writes over its input: not through the same path, another path to the same file,
// nor with --overwrite. The input is left as it was.
TEST_F(BadInputData, OutputThatIsTheInput) {
  const std::string in = file("in.txt");
  std::ofstream(in) << "some text of reasonable length for a split\n";
  const std::string before = contents(in);
  fs::create_symlink(in, file("link.txt"));
  for (const std::string& args : {"--input " + shell_quote(in) + " --output " + shell_quote(in),
                                  "--input " + shell_quote(file("link.txt")) + " --output " + shell_quote(in) + " --overwrite",
                                  "--input " + shell_quote(in) + " --output " + shell_quote(file("./in.txt")) + " --overwrite"}) {
    SCOPED_TRACE(args);
    const CommandResult r = data_prep("text " + args);
    expect_failure(r, "it is the input", 1);
    EXPECT_NE(r.err.find("data_prep never writes over its input, even with --overwrite"), std::string::npos) << r.err;
    EXPECT_EQ(contents(in), before) << "the input was changed";
    EXPECT_TRUE(temporaries(in).empty());
  }
}

// An existing output is replaced only with --overwrite; without it, it is left as it was.
TEST_F(BadInputData, ExistingOutputNeedsForce) {
  const std::string out = file("out.h5");
  ASSERT_EQ(data_prep("synth --vocab 8 --tokens 100 --seed 1 --output " + shell_quote(out)).exit_code, 0);
  const std::string first = contents(out);
  const CommandResult r = data_prep("synth --vocab 8 --tokens 200 --seed 2 --output " + shell_quote(out));
  expect_failure(r, "cannot write " + out + ": it exists (give --overwrite to replace it", 1);
  EXPECT_EQ(contents(out), first) << "the output was written over without --overwrite";
  EXPECT_TRUE(temporaries(out).empty());

  const CommandResult forced = data_prep("synth --vocab 8 --tokens 200 --seed 2 --output " + shell_quote(out) + " --overwrite");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  EXPECT_EQ(tessera::io::TokenDataset::open(out, "train").size(), 200);
  EXPECT_TRUE(temporaries(out).empty());
  std::ofstream(file("fresh")).close();  // the output has the mode of any new file (not the temporary's 0600)
  EXPECT_EQ(fs::status(out).permissions(), fs::status(file("fresh")).permissions());
}

// An unsigned option: Boost would read -1 as 2^64 - 1. And an option given twice is refused.
TEST_F(BadInputData, NegativeSeedAndRepeatedOption) {
  const std::string out = file("out.h5");
  expect_failure(data_prep("synth --vocab 8 --tokens 100 --seed -1 --output " + shell_quote(out)),
                 "--seed -1: expected a whole number >= 0", 2, out);
  expect_failure(data_prep("synth-images --seed -5 --output " + shell_quote(out)), "--seed -5: expected a whole number >= 0",
                 2, out);
  expect_failure(data_prep("synth --vocab 8 --tokens 100 --seed 1 --tokens 200 --output " + shell_quote(out)),
                 "--tokens is given more than once on the command line (100, then 200)", 2, out);
  const std::string in = file("in.txt");
  std::ofstream(in) << "some text of reasonable length for a split\n";
  expect_failure(data_prep("text --input " + shell_quote(in) + " --val-fraction nan --output " + shell_quote(out)),
                 "--val-fraction nan: expected a finite number", 2, out);
}
