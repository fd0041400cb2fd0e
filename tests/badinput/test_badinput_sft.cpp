// Bad input to `data_prep sft` and to the trainers' loss mask: malformed JSONL lines named by line
// number (more than --max-bad-lines fail and write nothing; up to it they are skipped with a
// warning), bad options, an existing output kept, and a hand-made data set whose mask disagrees with
// its tokens refused by gpt_train naming both. A control checks the mask a good file gets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "run_command.h"
#include "scratch_test.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kBuild = TESSERA_BUILD_DIR;
const std::string kEnv = "env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 ";

class BadInputSft : public tessera::testing::ScratchTest {
 protected:
  std::string write(const std::string& name, const std::string& content) const {
    const std::string path = file(name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  CommandResult sft(const std::string& input, const std::string& output, const std::string& more = "") const {
    return run_command(shell_quote(kBuild + "/apps/data_prep") + " sft --input " + shell_quote(input) + " --output " +
                       shell_quote(output) + " --val-fraction 0 " + more);
  }
  void expect_words(const std::string& text, std::initializer_list<std::string> words) const {
    for (const std::string& w : words) EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
  }
  // Nothing but the inputs in the folder: no output, no temporary.
  void expect_no_output(const std::string& output) const {
    EXPECT_FALSE(fs::exists(output)) << output;
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  }
};

const std::string kGood = R"({"prompt": "ab", "response": "cde"})";

}  // namespace

TEST_F(BadInputSft, GoodLinesGetTheResponseMask) {
  const std::string in = write("in.jsonl", kGood + "\n\n" + R"({"question": "x", "prompt": "", "response": "f"})" + "\n");
  const std::string out = file("out.h5");
  const CommandResult r = sft(in, out, "--eos-id 10");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_words(r.out, {"8 train and 0 val tokens (2 and 0 examples; 6 response tokens in the loss)"});
  const tessera::io::TokenDataset d = tessera::io::TokenDataset::open(out, "train");
  ASSERT_TRUE(d.has_mask());
  ASSERT_EQ(d.size(), 8);
  EXPECT_EQ(d.read(0, 8), (std::vector<int32_t>{'a', 'b', 'c', 'd', 'e', 10, 'f', 10}));
  std::vector<uint8_t> mask(8);
  d.read_mask(0, 8, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(tessera::io::H5File::open_read(out).read_i64("/train/doc_offsets", 0, 2), (std::vector<int64_t>{0, 6}));
}

TEST_F(BadInputSft, MalformedLinesAreNamedAndFailPastTheLimit) {
  const std::string in = write("in.jsonl", kGood + "\n" + "{not json\n" + kGood + "\n" + R"({"prompt": "a"})" +
                                               "\n" + R"({"prompt": 3, "response": "b"})" + "\n" + "[1, 2]\n");
  const std::string out = file("out.h5");
  const CommandResult r = sft(in, out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  expect_words(r.err, {"error:", in, "4 malformed lines", "line 2: not JSON", "line 4: no key 'response'",
                       "line 5: 'prompt' is not a string", "line 6: not a JSON object", "more than --max-bad-lines 0",
                       "nothing written"});
  expect_no_output(out);
  const CommandResult three = sft(in, out, "--max-bad-lines 3");
  EXPECT_EQ(three.exit_code, 1) << three.err;
  expect_words(three.err, {"4 malformed lines", "more than --max-bad-lines 3"});
  expect_no_output(out);
  // Up to the limit: skipped, each named in a warning, and the good lines written.
  const CommandResult four = sft(in, out, "--max-bad-lines 4");
  ASSERT_EQ(four.exit_code, 0) << four.err;
  expect_words(four.err, {"warning: skipped 4 malformed lines", "line 2: not JSON", "line 6: not a JSON object"});
  EXPECT_EQ(tessera::io::TokenDataset::open(out, "train").size(), 10);
}

TEST_F(BadInputSft, ManyMalformedLinesNameTheFirstFewAndCountAll) {
  std::string content;
  for (int i = 0; i < 12; ++i) content += "oops\n";
  const std::string in = write("in.jsonl", kGood + "\n" + content);
  const std::string out = file("out.h5");
  const CommandResult r = sft(in, out, "--max-bad-lines 2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  expect_words(r.err, {"12 malformed lines", "line 2: not JSON", "line 6: not JSON", "; ...)"});
  EXPECT_EQ(r.err.find("line 7:"), std::string::npos) << "named more than the first five: " << r.err;
  expect_no_output(out);
}

TEST_F(BadInputSft, BadOptionsAndAnExistingOutput) {
  const std::string in = write("in.jsonl", kGood + "\n" + kGood + "\n");
  const std::string out = file("out.h5");
  const CommandResult neg = sft(in, out, "--max-bad-lines -1");
  EXPECT_EQ(neg.exit_code, 2) << neg.err;
  expect_words(neg.err, {"--max-bad-lines must not be negative"});
  const CommandResult same = sft(in, out, "--prompt-key text --response-key text");
  EXPECT_EQ(same.exit_code, 2) << same.err;
  expect_words(same.err, {"--prompt-key and --response-key are both 'text'"});
  const CommandResult eos = sft(in, out, "--eos-id 256");
  EXPECT_EQ(eos.exit_code, 2) << eos.err;
  expect_words(eos.err, {"--eos-id 256 is outside the vocabulary [0, 256)"});
  const CommandResult missing = sft(file("none.jsonl"), out);
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  expect_words(missing.err, {"cannot read input", "none.jsonl", "no such file"});
  const CommandResult keys = sft(in, out, "--response-key answer");
  EXPECT_EQ(keys.exit_code, 1) << keys.err;
  expect_words(keys.err, {"line 1: no key 'answer'", "line 2: no key 'answer'"});
  expect_no_output(out);
  // An existing output is kept as it was.
  write("out.h5", "keep me");
  const CommandResult exists = sft(in, out);
  EXPECT_EQ(exists.exit_code, 1) << exists.err;
  expect_words(exists.err, {"cannot write", "out.h5", "it exists", "--overwrite"});
  std::stringstream kept;
  kept << std::ifstream(out).rdbuf();
  EXPECT_EQ(kept.str(), "keep me");
}

TEST_F(BadInputSft, TrainerRefusesAMaskShorterThanTheTokens) {
  const std::string data = file("short_mask.h5");
  {
    tessera::io::H5File f = tessera::io::H5File::create(data);
    tessera::Tensor t = tessera::Tensor::zeros({500}, tessera::DType::u16);
    tessera::Tensor m = tessera::Tensor::zeros({499}, tessera::DType::u8);
    f.write("/train/tokens", t);
    f.write("/train/loss_mask", m);
    f.set_attr("/", "vocab_size", int64_t{64});
  }
  const CommandResult r = run_command(kEnv + kBuild + "/apps/gpt_train --input " + shell_quote(data) +
                                      " --layers 1 --hidden 16 --heads 2 --seq-len 8 --steps 1 --threads 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  expect_words(r.err, {"error:", data, "/train/loss_mask has 499 values", "/train/tokens has 500 tokens"});
}

TEST_F(BadInputSft, MergeJoinsMasksAndVerifyChecksThem) {
  const std::string a = file("a.h5"), b = file("b.h5"), merged = file("merged.h5");
  ASSERT_EQ(sft(write("a.jsonl", kGood + "\n"), a).exit_code, 0);
  ASSERT_EQ(sft(write("b.jsonl", R"({"prompt": "x", "response": "yz"})" "\n"), b).exit_code, 0);
  const std::string data_prep = shell_quote(kBuild + "/apps/data_prep");
  const CommandResult m = run_command(data_prep + " merge --input " + shell_quote(a) + " " + shell_quote(b) +
                                      " --output " + shell_quote(merged));
  ASSERT_EQ(m.exit_code, 0) << m.err;
  const tessera::io::TokenDataset d = tessera::io::TokenDataset::open(merged, "train");
  ASSERT_TRUE(d.has_mask());
  std::vector<uint8_t> mask(8);
  d.read_mask(0, 8, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 1, 1}));
  // A shard without a mask is not joined to one with a mask.
  const std::string plain = file("plain.h5");
  ASSERT_EQ(run_command(data_prep + " text --input " + shell_quote(write("t.txt", "abcdef")) + " --val-fraction 0 --output " +
                        shell_quote(plain)).exit_code, 0);
  const CommandResult mixed = run_command(data_prep + " merge --input " + shell_quote(a) + " " + shell_quote(plain) +
                                          " --output " + shell_quote(file("mixed.h5")));
  EXPECT_EQ(mixed.exit_code, 1) << mixed.err;
  expect_words(mixed.err, {"cannot merge", "a.h5 has a loss mask", "plain.h5 has none"});
  EXPECT_FALSE(fs::exists(file("mixed.h5")));
  // verify reads every mask value.
  const std::string bad = file("bad_mask.h5");
  {
    tessera::io::H5File f = tessera::io::H5File::create(bad);
    tessera::Tensor t = tessera::Tensor::zeros({20}, tessera::DType::u16), mk = tessera::Tensor::zeros({20}, tessera::DType::u8);
    mk.data<uint8_t>()[7] = 3;
    f.write("/train/tokens", t);
    f.write("/train/loss_mask", mk);
    f.set_attr("/", "vocab_size", int64_t{8});
  }
  const CommandResult v = run_command(data_prep + " verify " + shell_quote(bad));
  EXPECT_EQ(v.exit_code, 1) << v.out;
  expect_words(v.out, {"FAILED", "/train/loss_mask[7] = 3"});
}
