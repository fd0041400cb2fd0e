// gpt_train fed bad input, on one rank and on four: each case asserts a non-zero exit code within a
// bounded time, an "error:" line naming the problem, and that nothing (metrics) was written.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>

#include "io/hdf5_file.h"
#include "run_command.h"

namespace {
namespace fs = std::filesystem;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

class GptTrainBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_badinput_gpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    good_ = (dir_ / "good.h5").string();
    const auto r = run_command(std::string(TESSERA_BUILD_DIR) + "/apps/data_prep synth --vocab 50 --tokens 5000 --seed 2 --output " +
                               shell_quote(good_));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs gpt_train with a tiny model and `args`, on one rank and on four (mpirun); expects failure
  // with `code` and `words` in stderr each time, within a bounded time (timeout(1) would exit 124).
  void expect_error(const std::string& args, int code, const std::string& words) {
    const std::string metrics = (dir_ / "m.jsonl").string();
    const std::string command = std::string(TESSERA_BUILD_DIR) + "/apps/gpt_train " + shape_ +
                                " --seq-len 8 --steps 2 --threads 1 --metrics " + shell_quote(metrics) + " " + args;
    const std::string four_ranks = std::string(TESSERA_MPIEXEC) + " --oversubscribe -np 4 ";
    for (const std::string& launcher : {std::string(), four_ranks}) {
      SCOPED_TRACE(launcher.empty() ? "one rank" : "four ranks");
      const auto r = run_command("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " + launcher + command);
      EXPECT_EQ(r.exit_code, code) << "stderr: " << r.err;
      EXPECT_NE(r.err.find("error:"), std::string::npos) << "stderr: " << r.err;
      EXPECT_NE(r.err.find(words), std::string::npos) << "expected '" << words << "' in stderr: " << r.err;
      EXPECT_FALSE(fs::exists(metrics) && fs::file_size(metrics) > 0) << "a failed run wrote metrics";
    }
  }

  // A token file with the given dataset contents, written with the raw HDF5 API.
  std::string token_file(const std::string& name, const std::vector<int32_t>& tokens, int64_t vocab) {
    const std::string path = (dir_ / name).string();
    auto f = tessera::io::H5File::create(path);
    tessera::Tensor t = tessera::Tensor::empty({static_cast<int64_t>(tokens.size())}, tessera::DType::i32);
    std::copy(tokens.begin(), tokens.end(), t.data<int32_t>());
    f.write("/tokens", t);
    f.set_attr("/", "vocab_size", vocab);
    f.set_attr("/", "tokenizer", std::string("test"));
    return path;
  }

  fs::path dir_;
  std::string good_;
  std::string shape_ = "--layers 1 --hidden 16 --heads 2 --global-batch 4";  // cases may replace it
};

TEST_F(GptTrainBadInput, MissingInputFile) {
  expect_error("--input " + shell_quote((dir_ / "nope.h5").string()), 1, "nope.h5");
}

TEST_F(GptTrainBadInput, InputIsNotHdf5) {
  const std::string path = (dir_ / "text.h5").string();
  std::ofstream(path) << "this is not an HDF5 file\n";
  expect_error("--input " + shell_quote(path), 1, "text.h5");
}

TEST_F(GptTrainBadInput, TruncatedHdf5) {
  const std::string path = (dir_ / "cut.h5").string();
  fs::copy_file(good_, path);
  fs::resize_file(path, fs::file_size(path) / 2);
  expect_error("--input " + shell_quote(path), 1, "cut.h5");
}

TEST_F(GptTrainBadInput, EmptyFile) {
  const std::string path = (dir_ / "empty.h5").string();
  std::ofstream{path};
  expect_error("--input " + shell_quote(path), 1, "empty.h5");
}

TEST_F(GptTrainBadInput, TokensOfWrongRank) {
  const std::string path = (dir_ / "rank2.h5").string();
  {
    auto f = tessera::io::H5File::create(path);
    f.write("/tokens", tessera::Tensor::zeros({10, 10}, tessera::DType::i32));
    f.set_attr("/", "vocab_size", int64_t{9});
  }
  expect_error("--input " + shell_quote(path), 1, "rank");
}

TEST_F(GptTrainBadInput, MissingTokensDataset) {
  const std::string path = (dir_ / "notokens.h5").string();
  {
    auto f = tessera::io::H5File::create(path);
    f.write("/other", tessera::Tensor::zeros({10}, tessera::DType::i32));
    f.set_attr("/", "vocab_size", int64_t{9});
  }
  expect_error("--input " + shell_quote(path), 1, "tokens");
}

TEST_F(GptTrainBadInput, MissingInputOption) { expect_error("", 2, "input"); }

TEST_F(GptTrainBadInput, UnknownOption) { expect_error("--input " + shell_quote(good_) + " --layerz 3", 2, "layerz"); }

TEST_F(GptTrainBadInput, MalformedNumber) { expect_error("--input " + shell_quote(good_) + " --lr fast", 2, "lr"); }

TEST_F(GptTrainBadInput, HeadsDoNotDivideHidden) {
  shape_ = "--layers 1 --hidden 16 --global-batch 4";
  expect_error("--input " + shell_quote(good_) + " --heads 3", 1, "not divisible by --heads 3");
}

TEST_F(GptTrainBadInput, GlobalBatchNotMultipleOfMicroBatch) {
  shape_ = "--layers 1 --hidden 16 --heads 2 --micro-batch 2";
  expect_error("--input " + shell_quote(good_) + " --global-batch 3", 1, "--global-batch 3");
}

// Tokens are checked as they are read (a corpus is never scanned at start-up): every window of
// step 1 holds token 3, so step 1 stops, naming it, on one rank and on four, before any step's line.
TEST_F(GptTrainBadInput, TokenOutOfVocabulary) {
  const std::string data = token_file("oov.h5", {1, 2, 3, 9, 4, 5, 6, 7, 8, 1, 2, 3}, 9);
  const std::string metrics = (dir_ / "m.jsonl").string();
  const std::string command = std::string(TESSERA_BUILD_DIR) + "/apps/gpt_train " + shape_ +
                              " --seq-len 8 --steps 2 --threads 1 --metrics " + shell_quote(metrics) + " --input " +
                              shell_quote(data);
  for (const std::string& launcher : {std::string(), std::string(TESSERA_MPIEXEC) + " --oversubscribe -np 4 "}) {
    SCOPED_TRACE(launcher.empty() ? "one rank" : "four ranks");
    const auto r = run_command("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " + launcher +
                               command);
    EXPECT_EQ(r.exit_code, 1) << "stderr: " << r.err;
    for (const std::string& w : {std::string("error: training step 1: "), data, std::string("/tokens[3] = 9"),
                                 std::string("outside the vocabulary [0, 9)")})
      EXPECT_NE(r.err.find(w), std::string::npos) << "expected '" << w << "' in stderr: " << r.err;
    std::ifstream in(metrics);
    std::string line;
    while (std::getline(in, line)) EXPECT_EQ(line.find("\"loss\""), std::string::npos) << "a step was logged: " << line;
  }
}

// Absurd sizes declared in a data set are named with the file and the field, before anything is
// allocated: a vocabulary past 32-bit token ids, one whose model cannot fit this node's memory (the
// planner's bytes against MemAvailable), a token count whose read cannot fit.
TEST_F(GptTrainBadInput, VocabularyPastTokenIds) {
  const std::string f = token_file("v.h5", std::vector<int32_t>(100, 1), int64_t{1} << 40);
  expect_error("--input " + shell_quote(f), 1, "invalid vocab_size 1099511627776 on /");
}

TEST_F(GptTrainBadInput, ModelThatCannotFitInMemory) {
  const std::string f = token_file("v.h5", std::vector<int32_t>(100, 1), (int64_t{1} << 31) - 1);
  expect_error("--input " + shell_quote(f), 1, "the model does not fit in this node's memory");
  expect_error("--input " + shell_quote(f), 1, "(vocab_size 2147483647 from " + f);
}

TEST_F(GptTrainBadInput, TokenCountThatCannotFitInMemory) {
  // 2^40 uint16 tokens declared in a chunked dataset that holds none: a 7 KB file. Refused at open
  // for its missing chunks (data is streamed: a corpus need not fit in memory, its chunks must exist).
  const std::string path = (dir_ / "huge.h5").string();
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[1] = {hsize_t{1} << 40}, chunk[1] = {1 << 16};
  const hid_t space = H5Screate_simple(1, dims, nullptr), props = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(props, 1, chunk);
  const hid_t data = H5Dcreate2(file, "/tokens", H5T_NATIVE_UINT16, space, H5P_DEFAULT, props, H5P_DEFAULT);
  const int64_t vocab = 50;
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, "vocab_size", H5T_NATIVE_INT64, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, &vocab);
  H5Aclose(attr);
  H5Sclose(scalar);
  H5Dclose(data);
  H5Pclose(props);
  H5Sclose(space);
  H5Fclose(file);
  expect_error("--input " + shell_quote(path), 1, "/tokens has 0 of its 16777216 chunks stored");
}

TEST_F(GptTrainBadInput, SequenceLongerThanData) {
  expect_error("--input " + shell_quote(token_file("short.h5", {1, 2, 3, 4, 5}, 9)), 1, "sequence length");
}

TEST_F(GptTrainBadInput, WrongDtype) {
  const std::string path = (dir_ / "float.h5").string();
  {
    auto f = tessera::io::H5File::create(path);
    f.write("/tokens", tessera::Tensor::zeros({100}, tessera::DType::f32));
    f.set_attr("/", "vocab_size", int64_t{9});
  }
  expect_error("--input " + shell_quote(path), 1, "f32");
}

TEST_F(GptTrainBadInput, MissingVocabAttribute) {
  const std::string path = (dir_ / "novocab.h5").string();
  {
    auto f = tessera::io::H5File::create(path);
    f.write("/tokens", tessera::Tensor::zeros({100}, tessera::DType::i32));
  }
  expect_error("--input " + shell_quote(path), 1, "vocab_size");
}

TEST_F(GptTrainBadInput, UnwritableCheckpointFolder) {
  const std::string file = (dir_ / "plain_file").string();
  std::ofstream(file) << "x";
  expect_error("--input " + shell_quote(good_) + " --checkpoint-dir " + shell_quote(file + "/ck"), 1,
               "cannot write checkpoints to --checkpoint-dir");
}

TEST_F(GptTrainBadInput, UnknownOnNanPolicy) {
  expect_error("--input " + shell_quote(good_) + " --on-nan ignore", 1, "--on-nan must be stop or skip");
}

TEST_F(GptTrainBadInput, NegativeCommTimeout) {
  expect_error("--input " + shell_quote(good_) + " --comm-timeout -1", 1, "--comm-timeout must be >= 0");
}

TEST_F(GptTrainBadInput, UnknownDevice) { expect_error("--input " + shell_quote(good_) + " --device tpu", 1, "tpu"); }

TEST_F(GptTrainBadInput, ConfigFileMissing) {
  expect_error("--input " + shell_quote(good_) + " --config " + shell_quote((dir_ / "none.ini").string()), 2,
               "none.ini");
}

TEST_F(GptTrainBadInput, ConfigFileUnknownKey) {
  const std::string ini = (dir_ / "bad.ini").string();
  std::ofstream(ini) << "layers = 2\nhiden = 64\n";
  expect_error("--input " + shell_quote(good_) + " --config " + shell_quote(ini), 2, "hiden");
}

TEST_F(GptTrainBadInput, EvalWithoutValidationData) {
  expect_error("--input " + shell_quote(token_file("train_only.h5", std::vector<int32_t>(200, 1), 9)) +
                   " --eval-every 1",
               1, "--eval-every needs validation data");
}

TEST_F(GptTrainBadInput, BatchDoesNotSplitOverRanks) {
  // One rank: a global batch of 2 with micro-batch 4 cannot be cut into whole micro-batches.
  shape_ = "--layers 1 --hidden 16 --heads 2";
  expect_error("--input " + shell_quote(good_) + " --global-batch 2 --micro-batch 4", 1, "--micro-batch 4");
}

// Every option value is checked where it is parsed, on every rank before any communication; the
// message names the option, the value and what is allowed. Parse errors (a value that is no
// finite number, a negative value for an unsigned option, an option given twice, a config that
// is no file) exit 2; a value out of range, or options that contradict each other, exit 1.
class GptTrainBadOption : public GptTrainBadInput {
 protected:
  // gpt_train with a tiny model and `args` (no --steps, --threads: cases may give them), on one rank
  // and on two; expects `code` and `words`, within a bounded time, and no metrics written.
  void expect_refused(const std::string& args, int code, const std::string& words) {
    const std::string metrics = (dir_ / "m.jsonl").string();
    const std::string command = std::string(TESSERA_BUILD_DIR) + "/apps/gpt_train --input " + shell_quote(good_) +
                                " --layers 1 --hidden 16 --heads 2 --seq-len 8 --global-batch 4 --metrics " +
                                shell_quote(metrics) + " " + args;
    const std::string two_ranks = std::string(TESSERA_MPIEXEC) + " --oversubscribe -np 2 ";
    for (const std::string& launcher : {std::string(), two_ranks}) {
      SCOPED_TRACE((launcher.empty() ? "one rank: " : "two ranks: ") + args);
      const auto r = run_command("env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                 "timeout 60 " + launcher + command);
      EXPECT_EQ(r.exit_code, code) << "stderr: " << r.err;
      EXPECT_NE(r.err.find("error: "), std::string::npos) << "stderr: " << r.err;
      EXPECT_NE(r.err.find(words), std::string::npos) << "expected '" << words << "' in stderr: " << r.err;
      EXPECT_FALSE(fs::exists(metrics) && fs::file_size(metrics) > 0) << "a refused run wrote metrics";
    }
  }
};

// "nan" and "inf" parse as doubles (and 1e999 as inf): no option takes them.
TEST_F(GptTrainBadOption, NonFiniteNumbers) {
  expect_refused("--lr nan", 2, "--lr nan: expected a finite number");
  expect_refused("--grad-clip inf", 2, "--grad-clip inf: expected a finite number");
  expect_refused("--comm-timeout 1e999", 2, "--comm-timeout 1e999: expected a finite number");
}

TEST_F(GptTrainBadOption, NegativeCoefficientsAndClipValues) {
  expect_refused("--grad-clip -1", 1, "--grad-clip must be >= 0 and finite (0: off), got -1");
  expect_refused("--weight-decay -0.1", 1, "--weight-decay must be >= 0 and finite, got -0.1");
  expect_refused("--beta2 1", 1, "--beta2 must be in [0, 1), got 1");
  expect_refused("--peak-tflops -5", 1, "--peak-tflops must be >= 0 and finite (0: measured), got -5");
  expect_refused("--min-lr 0.1 --lr 0.01", 1, "--min-lr must be in [0, --lr 0.01], got 0.1");
}

// Sizes whose bytes would overflow are refused with the bound.
TEST_F(GptTrainBadOption, SizesPastTheirBound) {
  expect_refused("--bucket-mb 1e30", 1, "--bucket-mb must be in (0, 1048576] (MiB), got 1e+30");
  expect_refused("--placement-chunk-mb 1e30", 1, "--placement-chunk-mb must be at most 1048576 (1 TiB), got 1e+30");
}

TEST_F(GptTrainBadOption, NegativeThreadCount) {
  expect_refused("--threads -2", 1, "--threads must be >= 0 (0: OMP_NUM_THREADS or all cores), got -2");
}

// An unsigned option: Boost would read -1 as 2^64 - 1.
TEST_F(GptTrainBadOption, NegativeSeed) { expect_refused("--seed -1", 2, "--seed -1: expected a whole number >= 0"); }

// 0 means "off" where the help says so (--grad-clip, --eval-every, --checkpoint-every, --keep-checkpoints,
// --comm-timeout, --threads, --peak-tflops) and nowhere else.
TEST_F(GptTrainBadOption, ZeroMeansOffOnlyWhereDocumented) {
  expect_refused("--log-every 0", 1, "--log-every must be >= 1, got 0");
  expect_refused("--eval-batches 0", 1, "--eval-batches must be >= 1, got 0");
  const auto r = run_command("env OMP_NUM_THREADS=1 timeout 60 " + std::string(TESSERA_BUILD_DIR) +
                             "/apps/gpt_train --input " + shell_quote(good_) + " --layers 1 --hidden 16 --heads 2 " +
                             "--seq-len 8 --global-batch 4 --steps 1 --grad-clip 0 --eval-every 0 --checkpoint-every 0 "
                             "--keep-checkpoints 0 --comm-timeout 0 --threads 0 --peak-tflops 0 --warmup 50");
  EXPECT_EQ(r.exit_code, 0) << r.err;  // (--warmup past --steps: warm-up all along, nothing said)
}

// On the command line as in a config file: an option given twice is refused, naming both values.
TEST_F(GptTrainBadOption, OptionGivenTwice) {
  expect_refused("--steps 2 --steps 3", 2, "--steps is given more than once on the command line (2, then 3)");
  expect_refused("--steps 1 --dry-run --dry-run", 2, "--dry-run is given more than once on the command line");
  const std::string ini = (dir_ / "twice.ini").string();
  std::ofstream(ini) << "steps = 2\nlr = 1e-3\nsteps = 3\n";
  expect_refused("--config " + shell_quote(ini), 2, "--steps is given more than once in config file " + ini);
  // A config file's value and the command line's are not a repetition: the command line wins.
  std::ofstream(ini) << "steps = 50\n";
  const auto r = run_command("env OMP_NUM_THREADS=1 timeout 60 " + std::string(TESSERA_BUILD_DIR) +
                             "/apps/gpt_train --input " + shell_quote(good_) + " --layers 1 --hidden 16 --heads 2 " +
                             "--seq-len 8 --global-batch 4 --config " + shell_quote(ini) + " --steps 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step 1/1"), std::string::npos) << r.out;
}

TEST_F(GptTrainBadOption, ConfigThatIsNotAFile) {
  expect_refused("--steps 1 --config " + shell_quote(dir_.string()), 2,
                 "--config " + dir_.string() + " is a directory: expected an .ini file");
  const std::string ini = (dir_ / "nested.ini").string();
  std::ofstream(ini) << "steps = 1\nconfig = other.ini\n";
  expect_refused("--config " + shell_quote(ini), 2, "config file " + ini + " sets config");
}

// --zero3-overlap is on or off, and only ZeRO-3's.
TEST_F(GptTrainBadOption, Zero3OverlapTakesOnOrOffAndZero3) {
  expect_refused("--zero 3 --zero3-overlap maybe", 1, "--zero3-overlap maybe: expected on or off");
  expect_refused("--zero 2 --zero3-overlap off", 1,
                 "--zero3-overlap off overlaps ZeRO-3's gathers: it takes --zero 3 (got --zero 2)");
}

// Options that need another one, or exclude it.
TEST_F(GptTrainBadOption, OptionsThatContradictEachOther) {
  expect_refused("--checkpoint-every 2", 1, "--checkpoint-every 2 needs --checkpoint-dir");
  expect_refused("--keep-checkpoints 3", 1, "--keep-checkpoints 3 needs --checkpoint-dir");
  expect_refused("--loss-scale 1024 --precision bf16", 1,
                 "--loss-scale is fp16's loss scaling: it takes --precision fp16 (bf16 trains unscaled)");
  expect_refused("--offload-dir " + shell_quote(dir_.string()), 1,
                 "is for --offload nvme's scratch files: it takes --offload nvme, not --offload none");
  expect_refused("--recompute-every-k-blocks 2", 1,
                 "--recompute-every-k-blocks 2 needs --activation-checkpointing full or selective");
  expect_refused("--pp-schedule zb", 1, "--pp-schedule zb needs --pp > 1");
  expect_refused("--sp-mode ring", 1, "--sp-mode ring needs --sp > 1");
  expect_refused("--resume " + shell_quote(dir_.string()), 1,
                 "--resume " + dir_.string() + " is a directory: give a checkpoint file in it, or --resume auto");
}

// A run never writes over what it reads: --metrics naming the data set would truncate it.
TEST_F(GptTrainBadOption, OutputFileThatIsAnInput) {
  const auto size = fs::file_size(good_);
  const std::string same = (dir_ / "." / fs::path(good_).filename()).string();  // another path to it
  for (const std::string& launcher : {std::string(), std::string(TESSERA_MPIEXEC) + " --oversubscribe -np 2 "}) {
    const auto r = run_command("env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                               "timeout 60 " + launcher + TESSERA_BUILD_DIR + "/apps/gpt_train --input " +
                               shell_quote(good_) + " --layers 1 --hidden 16 --heads 2 --seq-len 8 --global-batch 4 " +
                               "--steps 1 --metrics " + shell_quote(same));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("--metrics " + same + " is the file --input " + good_ + " reads"), std::string::npos) << r.err;
    EXPECT_EQ(fs::file_size(good_), size) << "the data set was written over";
  }
  const std::string metrics = (dir_ / "m.jsonl").string();  // expect_refused's --metrics
  expect_refused("--trace " + shell_quote(metrics), 1, "--trace " + metrics + " and --metrics " + metrics + " are the same file");
}

}  // namespace

namespace {
// Layouts that do not fit the world are refused on every rank before any communication.
class GptTrainBadLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = std::filesystem::temp_directory_path() / ("tessera_layout_" + std::to_string(::getpid()) + ".h5");
    ASSERT_EQ(run_command(std::string(TESSERA_BUILD_DIR) + "/apps/data_prep synth --vocab 20 --tokens 2000 --seed 1 --output " +
                          shell_quote(data_.string()))
                  .exit_code,
              0);
  }
  void TearDown() override { std::filesystem::remove(data_); }

  // Runs gpt_train on `ranks` ranks; expects a non-zero exit within a bounded time (timeout(1)
  // would exit 124) and an "error:" line containing `words`. (Every rank finds the problem, but the
  // first to abort the job may end the others before they print, so the number of lines is not fixed.)
  void expect_refused(int ranks, const std::string& args, const std::string& words) {
    const auto r = run_command(env_ + " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " +
                               std::string(TESSERA_MPIEXEC) + " --oversubscribe -np " + std::to_string(ranks) + " " +
                               TESSERA_BUILD_DIR + "/apps/" + app_ + " " + shape_ + " --steps 1 --threads 1 --input " +
                               shell_quote(data_.string()) + " " + args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.exit_code, 124) << "timed out: " << r.err;
    size_t lines = 0;
    for (size_t at = r.err.find("error: "); at != std::string::npos; at = r.err.find("error: ", at + 1)) ++lines;
    EXPECT_GE(lines, 1u) << r.err;
    EXPECT_LE(lines, static_cast<size_t>(ranks)) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  }
  std::filesystem::path data_;
  std::string shape_ = "--layers 1 --hidden 16 --heads 2 --seq-len 8";  // cases may replace it
  std::string app_ = "gpt_train";                                      // or moe_train
  std::string env_;                                                    // VAR=value settings for the run
};

TEST_F(GptTrainBadLayout, TensorParallelThatDoesNotDivideTheWorld) {
  expect_refused(4, "--tp 3", "the layout does not fit 4 ranks: --pp 1 x --ep 1 x --sp 1 x --tp 3 = 3 does not divide 4");
}

TEST_F(GptTrainBadLayout, ExplicitSizesWhoseProductIsNotTheWorld) {
  expect_refused(4, "--dp 2 --pp 3", "--pp 3 x --dp 2 x --ep 1 x --sp 1 x --tp 1 = 6");
}

// --dump writes the whole model's tensors and the batch's logits in sequence order from one rank's
// view: a layout that splits them (here sp 2 zigzag, whose ranks hold chunks r and 2 sp - 1 - r) is
// refused on every rank rather than dumped in its row order.
TEST_F(GptTrainBadLayout, DumpOnMoreThanOneRankIsRefused) {
  const std::string dump = data_.string() + ".dump.h5";
  expect_refused(2, "--sp 2 --sp-mode zigzag --dump " + shell_quote(dump), "--dump runs on one rank without ZeRO-3");
  EXPECT_FALSE(std::filesystem::exists(dump)) << "a refused run wrote " << dump;
}

// Several ranks run on cuda (tests/cuda/multi_rank_parity.sh), but not under the grid tensor-parallel
// modes yet; the layout is refused before any device is looked for.
TEST_F(GptTrainBadLayout, CudaWithGridTensorParallelismIsRefused) {
  expect_refused(4, "--device cuda --tp 4 --tp-mode 2d", "--tp-mode 2d with --device cuda: not supported yet");
}

TEST_F(GptTrainBadLayout, NegativeSize) { expect_refused(2, "--tp -2", "mesh sizes must be positive"); }

TEST_F(GptTrainBadLayout, GlobalBatchDoesNotSplitOverDp) {
  expect_refused(4, "--global-batch 6", "--global-batch 6 does not split over dp x ep = 4 ranks");
}

TEST_F(GptTrainBadLayout, UnknownZeroStage) { expect_refused(2, "--zero 4", "--zero 4"); }

// Tensor parallelism splits the heads (2 here) and the MLP: a tp that does not divide them is
// refused before training, naming both numbers.
TEST_F(GptTrainBadLayout, HeadsNotDivisibleByTensorParallel) {
  expect_refused(4, "--tp 4", "--heads 2 is not divisible by --tp 4");
}

TEST_F(GptTrainBadLayout, UnknownTensorParallelMode) {
  expect_refused(2, "--tp 2 --tp-mode 4d", "--tp-mode 4d");
}

// The grid modes take only sizes that form the grid, and say which ones do.
TEST_F(GptTrainBadLayout, TensorParallelSizeNotASquareFor2d) {
  expect_refused(2, "--tp 2 --tp-mode 2d",
                 "--tp 2 does not fit --tp-mode 2d: it needs --tp = q^2, one of 1, 4, 9, 16, 25, 36, 49, 64");
}

TEST_F(GptTrainBadLayout, TensorParallelSizeNotDepthTimesSquareFor25d) {
  expect_refused(4, "--tp 4 --tp-mode 2.5d --tp-depth 2",
                 "--tp 4 does not fit --tp-mode 2.5d --tp-depth 2: it needs --tp = d x q^2, one of 2, 8, 18, 32, 50");
}

TEST_F(GptTrainBadLayout, TensorParallelDepthWithout25d) {
  expect_refused(2, "--tp 2 --tp-depth 2", "--tp-depth 2 needs --tp-mode 2.5d");
}

TEST_F(GptTrainBadLayout, GridTensorParallelWithLowPrecision) {
  expect_refused(4, "--tp 4 --tp-mode 2d --precision bf16", "--tp-mode 2d with --precision bf16: not supported yet");
}

TEST_F(GptTrainBadLayout, GridTensorParallelWithZeroBubbleSchedule) {
  expect_refused(8, "--tp 4 --tp-mode 2d --pp 2 --micro-batch 1 --pp-schedule zb",
                 "--tp-mode 2d with --pp-schedule zb: not supported yet");
}

// A dry run plans a grid (docs/memory.md) after the trainer's own checks of it: a --tp that is no q^2.
TEST_F(GptTrainBadLayout, GridTensorParallelDryRunChecksTheGrid) {
  expect_refused(1, "--tp 8 --tp-mode 2d --dp 1 --dry-run", "--tp 8 does not fit --tp-mode 2d");
}

TEST_F(GptTrainBadLayout, GridTensorParallelWithSequenceParallel) {
  expect_refused(8, "--tp 4 --tp-mode 2d --sp 2",
                 "--tp-mode 2d with sequence parallelism (--sp, --sp-mode split_gather): not supported yet");
}

// Llama on a grid: the kv heads split over the grid's side like the query heads; fewer kv heads
// than the side (replicated under 1D) are refused naming both numbers.
TEST_F(GptTrainBadLayout, LlamaGridWithFewerKvHeadsThanTheGridSide) {
  shape_ = "--arch llama --layers 1 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(4, "--kv-heads 1 --tp 4 --tp-mode 2d",
                 "--kv-heads 1 is not divisible by the tensor-parallel grid's side 2");
}

TEST_F(GptTrainBadLayout, TensorParallelSizeNotACubeFor3d) {
  expect_refused(4, "--tp 4 --tp-mode 3d", "--tp 4 does not fit --tp-mode 3d: it needs --tp = q^3, one of 1, 8, 27, 64");
}

// The grid's rows split the batch like data parallelism: 3 sequences do not split over 2 rows.
TEST_F(GptTrainBadLayout, GlobalBatchNotDivisibleByGridRows) {
  expect_refused(4, "--tp 4 --tp-mode 2d --global-batch 3",
                 "--global-batch 3 does not split over dp x ep x the tp grid's rows and layers = 2 ranks");
}

TEST_F(GptTrainBadLayout, SequenceNotDivisibleBySequenceParallel) {
  expect_refused(3, "--sp 3", "--seq-len 8 is not divisible by --sp 3");
}

// Ulysses moves whole heads between ranks: 2 heads cannot go to 4 ranks (ring attention can).
TEST_F(GptTrainBadLayout, HeadsNotDivisibleForAllToAll) {
  expect_refused(4, "--sp 4 --sp-mode all_to_all", "each rank's 2 heads (--heads 2) do not split evenly over the 4 sp ranks");
}

// Megatron's sequence parallelism lives inside the tp group: it needs tp and takes no sp axis.
TEST_F(GptTrainBadLayout, SplitGatherWithoutTensorParallel) {
  expect_refused(2, "--sp 2 --sp-mode split_gather", "it needs --tp > 1 and takes no --sp");
}

TEST_F(GptTrainBadLayout, UnknownSequenceParallelMode) {
  expect_refused(2, "--sp 2 --sp-mode spiral",
                 "unknown sequence-parallel mode 'spiral' (choose all_to_all, ring or zigzag)");
}

// zigzag cuts each sequence into 2 x sp chunks: 12 positions split over sp 4 (3 each) but not
// into 8 chunks; the error names the contiguous ring as the way out.
TEST_F(GptTrainBadLayout, SequenceNotDivisibleIntoZigzagChunks) {
  shape_ = "--layers 1 --hidden 16 --heads 2 --seq-len 12";
  expect_refused(4, "--sp 4 --sp-mode zigzag",
                 "--seq-len 12 is not divisible by 2 x --sp = 8 (--sp-mode zigzag cuts each sequence into 2 x sp");
}

TEST_F(GptTrainBadLayout, ZigzagWithoutSequenceParallel) {
  expect_refused(1, "--sp-mode zigzag", "--sp-mode zigzag needs --sp > 1");
}

// Megatron's sequence parallelism splits the micro-batch's B x T token rows over the tp group:
// 1 x 7 rows do not split over tp = 2.
TEST_F(GptTrainBadLayout, SplitGatherRowsNotDivisibleByTensorParallel) {
  shape_ = "--layers 1 --hidden 16 --heads 2 --seq-len 7 --global-batch 1 --micro-batch 1";
  expect_refused(2, "--tp 2 --sp-mode split_gather",
                 "--sp-mode split_gather: micro-batch x seq-len = 7 token rows do not split over --tp 2");
}

// Pipelines: the schedule is built and verified on every rank before any message is sent.
TEST_F(GptTrainBadLayout, MoreVirtualStagesThanBlocks) {
  expect_refused(2, "--pp 2", "--layers 1 cannot be split over 2 pipeline (virtual) stages");
}

TEST_F(GptTrainBadLayout, UnknownPipelineSchedule) {
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(2, "--pp 2 --pp-schedule wave", "unknown pipeline schedule 'wave'");
}

TEST_F(GptTrainBadLayout, InterleavedMicroBatchesNotAMultipleOfStages) {
  shape_ = "--layers 4 --hidden 16 --heads 2 --seq-len 8 --global-batch 3 --micro-batch 1";
  expect_refused(2, "--pp 2 --pp-schedule interleaved --virtual-stages 2",
                 "needs the micro-batches to be a multiple of the stages");
}

TEST_F(GptTrainBadLayout, VirtualStagesWithoutPipeline) {
  expect_refused(2, "--virtual-stages 2", "--virtual-stages 2 needs --pp > 1");
}

// --pp-layers: blocks per (virtual) stage, refused naming what does not fit.
TEST_F(GptTrainBadLayout, PipelineLayersThatDoNotFit) {
  expect_refused(2, "--pp-layers 1,1", "--pp-layers 1,1 needs --pp > 1");
  expect_refused(2, "--pp 2 --pp-layers 1,x", "--pp-layers 1,x: expected block counts separated by commas");
  expect_refused(2, "--pp 2 --pp-layers 1,2,1", "names 3 stages, but the pipeline has 2 (virtual) stages");
  expect_refused(2, "--pp 2 --pp-layers 0,2", "--pp-layers 0,2: every stage needs at least one block");
  expect_refused(2, "--pp 2 --pp-layers 1,2", "--pp-layers 1,2 adds up to 3 blocks, but the model has --layers 1");
}

TEST_F(GptTrainBadLayout, UnknownCpuGemmLibrary) {
  env_ = "TESSERA_CPU_GEMM=mkl";
  expect_refused(2, "", "TESSERA_CPU_GEMM must be onednn or blas, not 'mkl'");
}

TEST_F(GptTrainBadLayout, UnknownPrecision) {
  expect_refused(2, "--precision fp8", "--precision fp8: expected fp32, bf16 or fp16");
}

// Expert parallelism: only moe_train has experts to split, and they must split evenly.
TEST_F(GptTrainBadLayout, ExpertParallelWithoutExperts) {
  expect_refused(2, "--ep 2", "gpt_train: --ep 2 needs mixture-of-experts layers: use moe_train");
}

TEST_F(GptTrainBadLayout, ExpertsNotDivisibleByExpertParallel) {
  app_ = "moe_train";
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8 --experts 3";
  expect_refused(2, "--ep 2", "3 experts do not split evenly over --ep 2");
}

TEST_F(GptTrainBadLayout, MoeEveryPastTheLastBlock) {
  app_ = "moe_train";
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(2, "--moe-every 3", "--moe-every 3 is more than --layers 2: no block would have experts");
}

TEST_F(GptTrainBadLayout, MoeTopThree) {
  app_ = "moe_train";
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(2, "--top-k 3", "top-k 3");
}

// moe_train takes sequence parallelism as gpt_train does, and refuses what gpt_train refuses.
TEST_F(GptTrainBadLayout, MoeSequenceParallelMisfits) {
  app_ = "moe_train";
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 9";
  expect_refused(2, "--sp 2", "--seq-len 9 is not divisible by --sp 2");
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(2, "--sp 2 --sp-mode split_gather", "it needs --tp > 1 and takes no --sp");
  expect_refused(2, "--tp 2 --sp-mode ring", "--sp-mode ring needs --sp > 1");
  expect_refused(2, "--sp 2 --sp-mode zigzag", "--sp-mode zigzag is not supported with mixture-of-experts layers yet");
}

// moe_train's coefficients and counts, checked before any communication.
TEST_F(GptTrainBadLayout, MoeNegativeLossCoefficients) {
  app_ = "moe_train";
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(2, "--aux-loss-coef -0.01", "--aux-loss-coef must be >= 0, got -0.01");
  expect_refused(2, "--z-loss-coef -1", "--z-loss-coef must be >= 0, got -1");
  expect_refused(2, "--moe-every 0", "--moe-every must be >= 1 (every N-th block has experts), got 0");
  expect_refused(2, "--expert-hidden -8", "--expert-hidden must be >= 0 (0: 4 x --hidden), got -8");
}

// zb runs MoE blocks (their experts and router defer W), but not checkpointed ones.
TEST_F(GptTrainBadLayout, MoeZeroBubbleWithCheckpointing) {
  app_ = "moe_train";
  shape_ = "--layers 2 --hidden 16 --heads 2 --seq-len 8";
  expect_refused(2, "--pp 2 --pp-schedule zb --activation-checkpointing full",
                 "--activation-checkpointing full with --pp-schedule zb: not supported");
}
}  // namespace

namespace {
// A checkpoint of another model is refused naming what differs; the checkpoint itself is left as it
// was and nothing is trained. Saves with the tiny model and `saved`, lets `alter` change the saved
// file (when given), resumes with `resumed`.
void expect_resume_refused(const std::string& saved, const std::string& resumed, const std::string& words,
                           const std::function<void(const std::string&)>& alter = {}) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessera_ckpt_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string data = (dir / "d.h5").string(), ck = (dir / "ck").string();
  const std::string app = std::string(TESSERA_BUILD_DIR) + "/apps/gpt_train --input " + shell_quote(data) +
                          " --seq-len 8 --global-batch 2 --threads 1 ";
  ASSERT_EQ(run_command(std::string(TESSERA_BUILD_DIR) + "/apps/data_prep synth --vocab 20 --tokens 2000 --seed 1 --output " +
                        shell_quote(data))
                .exit_code,
            0);
  const auto run = run_command(app + saved + " --steps 2 --checkpoint-dir " + shell_quote(ck));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  if (alter) alter((fs::path(ck) / "step_2.h5").string());
  const auto before = fs::file_size(fs::path(ck) / "step_2.h5");
  const auto r = run_command(app + resumed + " --steps 4 --checkpoint-dir " + shell_quote(ck) + " --resume auto");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(words), std::string::npos) << "expected '" << words << "' in: " << r.err;
  EXPECT_EQ(fs::file_size(fs::path(ck) / "step_2.h5"), before);
  EXPECT_FALSE(fs::exists(fs::path(ck) / "step_4.h5"));
  fs::remove_all(dir);
}

// Tensors of other shapes: the first named with both shapes.
TEST(GptTrainBadCheckpoint, ResumeFromAnotherModel) {
  expect_resume_refused("--layers 1 --heads 2 --hidden 16", "--layers 1 --heads 2 --hidden 32",
                        "is of another model: embed.tokens.weight is [20, 16] there, [20, 32] here");
}

// The same tensors, another head count: refused by the recorded field, with both values.
TEST(GptTrainBadCheckpoint, ResumeWithAnotherHeadCount) {
  expect_resume_refused("--layers 1 --heads 2 --hidden 16", "--layers 1 --heads 4 --hidden 16",
                        "is of another model configuration: heads: 2 in the checkpoint, 4 here");
}

// Fewer layers than the checkpoint (whose later blocks would be dropped): refused.
TEST(GptTrainBadCheckpoint, ResumeWithFewerLayers) {
  expect_resume_refused("--layers 2 --heads 2 --hidden 16", "--layers 1 --heads 2 --hidden 16",
                        "is of another model configuration: layers: 2 in the checkpoint, 1 here");
}

// A tensor added to a checkpoint changes the set its metadata checksum covers: the file is found
// damaged (named with the reason), and --resume auto, finding no other, stops instead of starting
// over on top of it.
TEST(GptTrainBadCheckpoint, ResumeFromACheckpointWithAnExtraTensor) {
  const std::string model = "--layers 1 --heads 2 --hidden 16";
  for (const char* words : {"its metadata is damaged", "none of the 1 checkpoint(s) in"})
    expect_resume_refused(model, model, words, [](const std::string& path) {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(f, 0);
      EXPECT_GE(H5Ocopy(f, "/params/embed.tokens.weight", f, "/params/lost.weight", H5P_DEFAULT, H5P_DEFAULT), 0);
      H5Fclose(f);
    });
}

// A version-1 checkpoint (before the metadata checksum) with a tensor the model lacks: refused by
// name, where it used to be ignored.
TEST(GptTrainBadCheckpoint, ResumeFromAVersionOneCheckpointWithAnExtraTensor) {
  const std::string model = "--layers 1 --heads 2 --hidden 16";
  expect_resume_refused(model, model, "it has tensors this model does not (lost.weight)", [](const std::string& path) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    EXPECT_GE(H5Ocopy(f, "/params/embed.tokens.weight", f, "/params/lost.weight", H5P_DEFAULT, H5P_DEFAULT), 0);
    const int64_t one = 1;
    const hid_t version = H5Aopen(f, "version", H5P_DEFAULT);
    EXPECT_GE(H5Awrite(version, H5T_NATIVE_INT64, &one), 0);
    H5Aclose(version);
    H5Fclose(f);
  });
}

// More layers: the missing block is named, and so are the fields.
TEST(GptTrainBadCheckpoint, ResumeWithMoreLayers) {
  expect_resume_refused("--layers 1 --heads 2 --hidden 16", "--layers 2 --heads 2 --hidden 16",
                        "(model fields: layers: 1 in the checkpoint, 2 here)");
}
}  // namespace

// --layout auto chooses the layout: layout flags beside it contradict it and are refused; --machine
// belongs to it; --layout takes manual or auto; moe_train's search chooses --ep as well.
TEST_F(GptTrainBadInput, LayoutAutoWithLayoutFlags) {
  expect_error("--input " + shell_quote(good_) + " --layout auto --tp 2", 1, "--layout auto chooses --tp itself");
  expect_error("--input " + shell_quote(good_) + " --layout auto --zero=1", 1, "--layout auto chooses --zero itself");
  expect_error("--input " + shell_quote(good_) + " --machine m.json", 1, "--machine m.json is --layout auto's");
  expect_error("--input " + shell_quote(good_) + " --layout sometimes", 1, "--layout sometimes: expected manual or auto");
  for (const char* flags : {"--ep 2", "--tp=2", "--micro-batch 1"}) {
    const auto moe = run_command("timeout 60 " + shell_quote(TESSERA_BUILD_DIR "/apps/moe_train") + " --input " +
                                 shell_quote(good_) + " --layout auto " + flags);
    EXPECT_EQ(moe.exit_code, 1) << flags << "\n" << moe.err;
    const std::string name = std::string(flags).substr(2, std::string(flags).find_first_of(" =") - 2);
    EXPECT_NE(moe.err.find("--layout auto chooses --" + name + " itself"), std::string::npos) << moe.err;
  }
}
