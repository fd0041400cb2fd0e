// Bad token data, each case a test: a token outside the vocabulary deep inside a file stops a
// 2-rank training at the step that reads it (naming file, dataset and index, no hang, the last
// checkpoint intact); `data_prep verify` reports bad tokens and decreasing or out-of-range
// /doc_offsets; shards whose vocabularies differ are refused by merge and by the trainer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_loader.h"
#include "io/token_writer.h"
#include "run_command.h"
#include "scratch_test.h"

namespace fs = std::filesystem;
using tessera::io::H5File;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kBuild = TESSERA_BUILD_DIR;
const std::string kEnv = "env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 ";

class BadTokenData : public tessera::testing::ScratchTest {
 protected:

  // n tokens (i * 5 + 1) mod 64 under vocab_size `label`; `bad` (index, value) pairs replace some.
  // Written under a vocabulary wide enough for the bad values, then labelled `label`.
  std::string tokens(const std::string& name, int64_t n, int64_t label,
                     const std::vector<std::pair<int64_t, int32_t>>& bad = {}, int64_t vocab_label = -1) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % 64);
    for (const auto& [i, v] : bad) t[static_cast<size_t>(i)] = v;
    const std::string path = file(name);
    {
      H5File f = H5File::create(path);
      tessera::io::TokenWriter w(f, "/train", 65536, 4096, 0);
      for (int64_t i = 0; i < n; i += 1000) {
        w.start_document();
        w.append(t.data() + i, std::min<int64_t>(1000, n - i));
      }
      w.finish();
      f.set_attr("/", "vocab_size", vocab_label > 0 ? vocab_label : label);
      f.set_attr("/", "tokenizer", "test");
    }
    return path;
  }
};

void expect_words(const std::string& text, std::initializer_list<std::string> words) {
  for (const std::string& w : words) EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
}

}  // namespace

TEST_F(BadTokenData, TokenOutsideVocabularyStopsTrainingAtItsStep) {
  // The window of row 0 of step 7 (0-based step 6) under epoch sampling holds the bad token.
  const int64_t seq = 16, batch = 4, n = 200000;
  const std::string probe = tokens("probe.h5", n, 64);
  const tessera::io::TokenLoader loader(tessera::io::TokenDataset::open(probe, "train"), seq, batch, 9,
                                        tessera::io::Sampling::epoch);
  const int64_t bad_index = loader.train_start(6, 0) + 5;
  for (int64_t s = 0; s < 6; ++s)
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t start = loader.train_start(s, r);
      ASSERT_FALSE(bad_index >= start && bad_index <= start + seq) << "an earlier step reads the bad token";
    }
  const std::string data = tokens("deep.h5", n, 64, {{bad_index, 9999}});
  const std::string ck = file("ck");
  const CommandResult r = run_command(
      kEnv + std::string(TESSERA_MPIEXEC) + " --oversubscribe -np 2 " + kBuild + "/apps/gpt_train --input " +
      shell_quote(data) + " --layers 1 --hidden 16 --heads 2 --seq-len 16 --global-batch 4 --micro-batch 2" +
      " --steps 10 --threads 1 --seed 9 --sampling epoch --checkpoint-dir " + shell_quote(ck) +
      " --checkpoint-every 2 --metrics " + shell_quote(file("m.jsonl")));
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "the job hung: " << r.err;
  expect_words(r.err, {"error:", "training step 7", data, "/train/tokens[" + std::to_string(bad_index) + "] = 9999",
                       "outside the vocabulary [0, 64)"});
  // Steps 1-6 trained and saved; nothing after; the last checkpoint verifies.
  EXPECT_TRUE(fs::exists(ck + "/step_6.h5"));
  EXPECT_FALSE(fs::exists(ck + "/step_8.h5"));
  for (const auto& e : fs::directory_iterator(ck))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  const CommandResult v = run_command(kBuild + "/apps/ckpt_tool verify " + shell_quote(ck + "/step_6.h5"));
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
}

TEST_F(BadTokenData, VerifyReportsBadTokensAndOffsets) {
  const std::string good = tokens("good.h5", 50000, 64);
  const CommandResult ok = run_command(kBuild + "/apps/data_prep verify " + shell_quote(good));
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  expect_words(ok.out, {good, "train: 50000 tokens, 50 documents: ok"});

  const std::string bad = tokens("bad.h5", 50000, 64, {{43210, 70}});
  const CommandResult b = run_command(kBuild + "/apps/data_prep verify " + shell_quote(bad));
  EXPECT_EQ(b.exit_code, 1) << b.out;
  expect_words(b.out, {"FAILED", "/train/tokens[43210] = 70", "outside the vocabulary [0, 64)"});
  expect_words(b.err, {"error:"});

  // Files written directly: tokens plus the given /doc_offsets (int32 here: verify accepts any integers).
  auto offsets_file = [&](const std::string& name, std::vector<int32_t> offsets) {
    const std::string path = file(name);
    H5File f = H5File::create(path);
    f.write("/tokens", tessera::Tensor::zeros({1000}, tessera::DType::u16));
    tessera::Tensor t = tessera::Tensor::empty({static_cast<int64_t>(offsets.size())}, tessera::DType::i32);
    std::copy(offsets.begin(), offsets.end(), t.data<int32_t>());
    f.write("/doc_offsets", t);
    f.set_attr("/", "vocab_size", 64);
    return path;
  };
  // Decreasing offsets in the middle (open checks only the ends; verify finds it).
  const std::string decreasing = offsets_file("decreasing.h5", {0, 300, 200, 900});
  const CommandResult d = run_command(kBuild + "/apps/data_prep verify " + shell_quote(decreasing));
  EXPECT_EQ(d.exit_code, 1) << d.out;
  expect_words(d.out, {"FAILED", "/doc_offsets[2] = 200", "offsets must increase"});

  const std::string past = offsets_file("past.h5", {0, 300, 1000});
  const CommandResult p = run_command(kBuild + "/apps/data_prep verify " + shell_quote(past));
  EXPECT_EQ(p.exit_code, 1) << p.out;
  expect_words(p.out, {"FAILED", "/doc_offsets[2] = 1000"});
  // Opening (the trainer) refuses the out-of-range end too, naming it.
  const CommandResult t = run_command(kEnv + kBuild + "/apps/gpt_train --input " + shell_quote(past) +
                                      " --layers 1 --hidden 16 --heads 2 --seq-len 8 --steps 1 --threads 1");
  EXPECT_EQ(t.exit_code, 1) << t.err;
  expect_words(t.err, {"error:", past, "/doc_offsets[2] = 1000"});

  const std::string not_zero = offsets_file("not_zero.h5", {5, 300});
  const CommandResult z = run_command(kBuild + "/apps/data_prep verify " + shell_quote(not_zero));
  EXPECT_EQ(z.exit_code, 1) << z.out;
  expect_words(z.out, {"/doc_offsets[0] = 5", "start at token 0"});
}

TEST_F(BadTokenData, ShardsWithDifferentVocabulariesAreRefused) {
  fs::create_directories(dir_ / "shards");
  tokens("shards/shard_0.h5", 3000, 64);
  tokens("shards/shard_1.h5", 3000, 64, {}, 100);  // labelled vocab 100
  const std::string glob = file("shards/shard_*.h5");
  const CommandResult m = run_command(kBuild + "/apps/data_prep merge --input " + shell_quote(glob) + " --output " +
                                      shell_quote(file("merged.h5")));
  EXPECT_EQ(m.exit_code, 1) << m.err;
  expect_words(m.err, {"error:", "shard_0.h5", "shard_1.h5", "64", "100"});
  EXPECT_FALSE(fs::exists(file("merged.h5")));
  const CommandResult t = run_command(kEnv + kBuild + "/apps/gpt_train --input " + shell_quote(glob) +
                                      " --layers 1 --hidden 16 --heads 2 --seq-len 8 --steps 1 --threads 1");
  EXPECT_EQ(t.exit_code, 1) << t.err;
  expect_words(t.err, {"error:", "disagree on their vocabulary", "shard_1.h5", "vocab_size 100"});

  // Shards that agree merge into one set equal to the glob read as one split.
  fs::remove(dir_ / "shards/shard_1.h5");
  tokens("shards/shard_1.h5", 2500, 64);
  const CommandResult ok = run_command(kBuild + "/apps/data_prep merge --input " + shell_quote(glob) + " --output " +
                                       shell_quote(file("merged.h5")));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const tessera::io::TokenDataset merged = tessera::io::TokenDataset::open(file("merged.h5"), "train");
  const tessera::io::TokenDataset split = tessera::io::TokenDataset::open(glob, "train");
  ASSERT_EQ(merged.size(), 5500);
  EXPECT_EQ(merged.read(0, 5500), split.read(0, 5500));
  const H5File f = H5File::open_read(file("merged.h5"));
  EXPECT_EQ(f.shape("/train/doc_offsets")[0], 6);  // 3 + 3 documents of up to 1000 tokens
  const CommandResult v = run_command(kBuild + "/apps/data_prep verify " + shell_quote(file("merged.h5")));
  EXPECT_EQ(v.exit_code, 0) << v.out;
}

TEST_F(BadTokenData, TextOfManyDocumentsFromFilesFoldersAndJsonl) {
  fs::create_directories(dir_ / "docs/sub");
  auto put = [&](const std::string& name, const std::string& text) { std::ofstream(file(name)) << text; };
  put("docs/a.txt", "ab");
  put("docs/sub/b.txt", "cde");
  put("lines.jsonl", "{\"body\": \"xy\", \"id\": 1}\n\n{\"body\": \"z\"}\n");
  const std::string out = file("many.h5");
  const CommandResult r = run_command(kBuild + "/apps/data_prep text --input " + shell_quote(file("docs")) + " " +
                                      shell_quote(file("lines.jsonl")) + " --text-key body --eos-id 0 --val-fraction 0" +
                                      " --output " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Documents in order: docs/a.txt, docs/sub/b.txt, then the two JSONL lines; 0 between them.
  const tessera::io::TokenDataset d = tessera::io::TokenDataset::open(out, "train");
  const std::vector<int32_t> expected{'a', 'b', 0, 'c', 'd', 'e', 0, 'x', 'y', 0, 'z'};
  EXPECT_EQ(d.read(0, d.size()), expected);
  const H5File f = H5File::open_read(out);
  EXPECT_EQ(f.read_i64("/train/doc_offsets", 0, 4), (std::vector<int64_t>{0, 3, 7, 10}));
  EXPECT_EQ(f.stored_type("/train/tokens"), "u16");
  EXPECT_EQ(f.attr_int("/", "eos_id"), 0);

  put("bad.jsonl", "{\"body\": \"ok\"}\n{\"text\": \"no body\"}\n");
  const CommandResult b = run_command(kBuild + "/apps/data_prep text --input " + shell_quote(file("bad.jsonl")) +
                                      " --text-key body --val-fraction 0 --output " + shell_quote(file("bad.h5")));
  EXPECT_EQ(b.exit_code, 1) << b.err;
  expect_words(b.err, {"error:", "bad.jsonl:2", "'body'"});
  EXPECT_FALSE(fs::exists(file("bad.h5")));
}

// Every command that writes token data sets (text, sft, merge, import-megatron) refuses a chunk of no
// tokens and a compression level outside 0-9 by name (exit 2), before writing anything.
TEST_F(BadTokenData, ChunkAndDeflateOutOfRangeAreRefusedByEveryWriter) {
  const std::string text = file("book.txt");
  { std::ofstream(text) << "to be or not to be\n"; }
  const std::string shard = tokens("shard.h5", 3000, 64);
  const std::vector<std::string> commands = {
      "text --input " + shell_quote(text), "sft --input " + shell_quote(file("chat.jsonl")),
      "merge --input " + shell_quote(shard),
      "import-megatron --input " + shell_quote(file("absent")) + " --vocab-size 64"};
  for (const std::string& command : commands) {
    for (const auto& [option, words] : std::vector<std::pair<std::string, std::string>>{
             {"--chunk-tokens 0", "--chunk-tokens must be at least 1, got 0"},
             {"--deflate 10", "--deflate must be 0 to 9, got 10"}}) {
      SCOPED_TRACE(command + " " + option);
      const CommandResult r = run_command(kBuild + "/apps/data_prep " + command + " " + option + " --output " +
                                          shell_quote(file("out.h5")));
      EXPECT_EQ(r.exit_code, 2) << r.err;
      expect_words(r.err, {"error:", words});
      EXPECT_FALSE(fs::exists(file("out.h5")));
    }
  }
}
