// Bad input to generate: each case runs the built binary on checkpoints written here (a small gpt2
// with random weights, and a ViT's, an unknown model's and an incomplete MoE model's attributes, and a MoE
// model whose stacked experts are also stored quantised) and asserts a non-zero exit code
// and one "error:" line naming the problem, with nothing written over.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/philox.h"
#include "infer/model_spec.h"
#include "io/checkpoint_file.h"
#include "io/hdf5_file.h"
#include "run_command.h"
#include "text/stored_tokenizer.h"

namespace fs = std::filesystem;
using namespace tessera;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kGenerate = TESSERA_BUILD_DIR "/apps/generate";

class BadInputGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_badinput_generate_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string write_file(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
  CommandResult generate(const std::string& args) const { return run_command(shell_quote(kGenerate) + " " + args); }

  // A gpt2 of 40 tokens and 16 positions with random weights, as gpt_train records one.
  std::string gpt_checkpoint() const { return checkpoint("gpt.h5", "gpt", {}); }
  // The same as moe_train's moe_gpt (two experts in its one block), its stacked expert tensor
  // blocks.0.moe.experts.fc.weight [2, 64, 16] also stored as int8 groups, as a quantised checkpoint
  // would hold it if ckpt_tool quantize took 3-D tensors (it does not; generate must refuse one).
  std::string moe_checkpoint_with_quantised_experts() const {
    return checkpoint("moe.h5", "moe_gpt",
                      {{"moe_every", 1}, {"experts", 2}, {"expert_hidden", 0}, {"top_k", 1}, {"shared_experts", 0},
                       {"gates_renormalised", 0}},
                      "blocks.0.moe.experts.fc.weight");
  }
  // A model of 1 layer, hidden 16, 2 heads, 40 tokens and 16 positions with random weights, its
  // model.* attributes those given and these; with `quantised`, a quantised checkpoint (int8, group
  // size 16) that holds that tensor's groups under /qparams too.
  std::string checkpoint(const std::string& name, const std::string& model,
                         const std::vector<std::pair<std::string, int64_t>>& extra,
                         const std::string& quantised = "") const {
    std::vector<std::pair<std::string, int64_t>> attrs{
        {"layers", 1}, {"hidden", 16}, {"heads", 2}, {"vocab", 40}, {"max_seq", 16}};
    attrs.insert(attrs.end(), extra.begin(), extra.end());
    const std::string path = file(name);
    {
      io::CheckpointWriter w(path, MPI_COMM_NULL);
      w.set_attr("model", model);
      for (const auto& [key, value] : attrs) w.set_attr("model." + key, value);
      w.commit();
    }
    const models::GptConfig c = infer::model_config_of(io::CheckpointReader(path, MPI_COMM_NULL));
    fs::remove(path);
    io::CheckpointWriter w(path, MPI_COMM_NULL);
    uint64_t stream = 0;
    for (const auto& [tensor, shape] : infer::parameter_shapes(c)) {
      std::vector<float> v(static_cast<size_t>(shape.numel()));
      philox_fill_normal(v.data(), shape.numel(), 1, ++stream, 0, 0.0f, 0.2f);
      w.create("/params/" + tensor, shape);
      w.write_range("/params/" + tensor, 0, shape.numel(), v.data());
      if (tensor != quantised) continue;
      const int64_t rows = shape.numel() / shape[shape.rank() - 1], groups = shape[shape.rank() - 1] / 16;
      const std::vector<float> q(static_cast<size_t>(shape.numel()), 1.0f);
      const std::vector<float> s(static_cast<size_t>(rows * groups), 0.01f);
      w.create("/qparams/" + tensor + "/q", Shape{rows, shape[shape.rank() - 1]});
      w.write_range("/qparams/" + tensor + "/q", 0, shape.numel(), q.data());
      w.create("/qparams/" + tensor + "/scales", Shape{rows, groups});
      w.write_range("/qparams/" + tensor + "/scales", 0, rows * groups, s.data());
    }
    w.set_attr("model", model);
    for (const auto& [key, value] : attrs) w.set_attr("model." + key, value);
    if (!quantised.empty()) {
      w.set_attr("quantized", int64_t{1});
      w.set_attr("bits", int64_t{8});
      w.set_attr("group_size", int64_t{16});
      w.set_attr("scale_dtype", "f32");
      w.set_attr("quantized_head", int64_t{0});
    }
    w.commit();
    return path;
  }
  // A checkpoint that records another model (one tensor is enough to be refused by its kind).
  std::string foreign_checkpoint(const std::string& model) const {
    const std::string path = file(model + ".h5");
    io::CheckpointWriter w(path, MPI_COMM_NULL);
    const std::vector<float> v(16, 0.5f);
    w.create("/params/head.weight", Shape{4, 4});
    w.write_range("/params/head.weight", 0, 16, v.data());
    w.set_attr("model", model);
    w.set_attr("model.layers", 1);
    w.commit();
    return path;
  }

  static void expect_error(const CommandResult& r, const std::string& says, int code = 1) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << "expected \"" << says << "\" in:\n" << r.err;
  }

  fs::path dir_;
};

TEST_F(BadInputGenerate, APromptLongerThanMaxLenIsRefused) {
  const std::string ck = gpt_checkpoint();
  expect_error(generate("--checkpoint " + ck + " --prompt 'abcdefghij' --max-len 8"),
               "prompt 0 is 10 tokens long: it must be shorter than --max-len 8");
  const std::string prompts = write_file("p.jsonl", "{\"ids\": [1, 2]}\n{\"ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}\n");
  expect_error(generate("--checkpoint " + ck + " --prompts " + prompts + " --max-len 8"),
               "p.jsonl line 2: prompt 1 is 9 tokens long");
  // gpt2's learned positions bound --max-len too.
  expect_error(generate("--checkpoint " + ck + " --prompt a --max-len 17"),
               "--max-len 17 is longer than the 16 positions the model learned");
}

TEST_F(BadInputGenerate, ATokenIdOutsideTheVocabularyIsRefused) {
  const std::string ck = gpt_checkpoint();
  const std::string prompts = write_file("p.jsonl", "{\"ids\": [1, 2]}\n\n{\"ids\": [3, 40]}\n");
  expect_error(generate("--checkpoint " + ck + " --prompts " + prompts),
               "p.jsonl line 3: prompt 1: token id 40 is outside the model's vocabulary [0, 40)");
  // Bytes past the vocabulary of a model with no stored tokenizer, and a stop token.
  expect_error(generate("--checkpoint " + ck + " --prompt 'A'"), "token id 65 is outside the model's vocabulary");
  expect_error(generate("--checkpoint " + ck + " --prompt x --stop-token 3 99"), "--stop-token 99 is outside");
}

TEST_F(BadInputGenerate, AVisionTransformerCheckpointIsRefusedNamingTheModel) {
  expect_error(generate("--checkpoint " + foreign_checkpoint("vit") + " --prompt x"),
               "holds a vision transformer (model vit): generate runs language models");
  expect_error(generate("--checkpoint " + foreign_checkpoint("bert") + " --prompt x"),
               "holds a bert model: generate runs gpt, llama, moe_gpt and moe_llama models");
  // A mixture-of-experts checkpoint runs, but not one missing the attributes its model needs.
  expect_error(generate("--checkpoint " + foreign_checkpoint("moe_gpt") + " --prompt x"),
               "does not record model.hidden");
}

TEST_F(BadInputGenerate, AQuantisedStackedExpertTensorIsRefusedNamingIt) {
  // generate reads a MoE model's stacked experts in f32 only: a quantised copy of one is refused
  // by name, not decoded from its f32 twin or misread.
  expect_error(generate("--checkpoint " + moe_checkpoint_with_quantised_experts() + " --prompt x --max-new-tokens 1"),
               "the stacked expert tensor blocks.0.moe.experts.fc.weight is quantised; generate reads experts in f32 "
               "only");
}

TEST_F(BadInputGenerate, AMissingOrUnreadablePromptsFileIsRefused) {
  const std::string ck = gpt_checkpoint();
  expect_error(generate("--checkpoint " + ck + " --prompts " + file("absent.jsonl")), "absent.jsonl does not exist");
  expect_error(generate("--checkpoint " + ck + " --prompts " + dir_.string()), "is a directory");
  expect_error(generate("--checkpoint " + ck + " --prompts " + write_file("empty.jsonl", "\n\n")),
               "holds no prompts");
  if (geteuid() != 0) {  // root reads any file
    const std::string locked = write_file("locked.jsonl", "{\"ids\": [1]}\n");
    fs::permissions(locked, fs::perms::none);
    expect_error(generate("--checkpoint " + ck + " --prompts " + locked), "cannot read prompts file");
  }
  expect_error(generate("--checkpoint " + file("absent.h5") + " --prompt x"), "absent.h5");
}

TEST_F(BadInputGenerate, AMalformedJsonlLineIsNamedByNumber) {
  const std::string ck = gpt_checkpoint();
  const std::string good = "{\"ids\": [1, 2]}\n";
  expect_error(generate("--checkpoint " + ck + " --prompts " + write_file("a.jsonl", good + good + "{\"ids\": [1,\n")),
               "a.jsonl line 3 is not JSON");
  expect_error(generate("--checkpoint " + ck + " --prompts " + write_file("b.jsonl", good + "[1, 2]\n")),
               "b.jsonl line 2 is JSON but not an object");
  expect_error(generate("--checkpoint " + ck + " --prompts " + write_file("c.jsonl", "{\"txt\": \"a\"}\n")),
               "c.jsonl line 1 has neither \"text\" nor \"ids\"");
  expect_error(generate("--checkpoint " + ck + " --prompts " + write_file("d.jsonl", good + "{\"ids\": [1, 2.5]}\n")),
               "d.jsonl line 2: \"ids\" holds 2.5, not an integer token id");
  expect_error(generate("--checkpoint " + ck + " --prompts " + write_file("e.jsonl", "{\"text\": 5}\n")),
               "e.jsonl line 1: \"text\" must be a string");
}

TEST_F(BadInputGenerate, TopPOutsideZeroOneIsRefused) {
  const std::string ck = gpt_checkpoint();
  for (const char* p : {"0", "1.5", "-0.1"})
    expect_error(generate("--checkpoint " + ck + " --prompt x --temperature 1 --top-p " + p), "--top-p must be in (0, 1]");
  expect_error(generate("--checkpoint " + ck + " --prompt x --temperature -1"), "--temperature must be >= 0");
  expect_error(generate("--checkpoint " + ck + " --prompt x --repetition-penalty 0"), "--repetition-penalty must be > 0");
}

TEST_F(BadInputGenerate, WeightsOtherThanF32OrBf16AreRefused) {
  const std::string ck = gpt_checkpoint();
  for (const char* w : {"fp8", "int8", "BF16"})
    expect_error(generate("--checkpoint " + ck + " --prompt x --weights " + w), std::string("--weights must be f32 or bf16, not '") + w + "'");
}

TEST_F(BadInputGenerate, AnExistingOutputFileIsNotWrittenOver) {
  const std::string ck = gpt_checkpoint();
  const std::string prompts = write_file("p.jsonl", "{\"ids\": [1, 2]}\n");
  const std::string out = write_file("out.jsonl", "earlier results\n");
  expect_error(generate("--checkpoint " + ck + " --prompts " + prompts + " --output " + out),
               "--output " + out + " already exists: nothing is overwritten");
  std::ifstream in(out);
  std::stringstream kept;
  kept << in.rdbuf();
  EXPECT_EQ(kept.str(), "earlier results\n");
  // The same command with a new file works: the refusal was the file's.
  const CommandResult ok = generate("--checkpoint " + ck + " --prompts " + prompts + " --output " + file("new.jsonl") +
                                    " --max-new-tokens 3");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(file("new.jsonl")));
  expect_error(generate("--checkpoint " + ck + " --prompts " + prompts + " --output " + prompts),
               "is the file --prompts");
}

TEST_F(BadInputGenerate, TheCheckpointsStoredTokenizerIsUsedAndADamagedOneRefused) {
  const std::string ck = gpt_checkpoint();
  {  // a tokenizer kind whose file is missing
    io::H5File f = io::H5File::open_rw(ck);
    f.set_attr("/", "tokenizer", std::string("sentencepiece"));
  }
  expect_error(generate("--checkpoint " + ck + " --prompt x"), "tokenizer 'sentencepiece' but no stored tokenizer file");
  {
    io::H5File f = io::H5File::open_rw(ck);
    text::store_tokenizer(f, "bytes", "", "bytes");
  }
  const CommandResult ok = generate("--checkpoint " + ck + " --prompt '#' --max-new-tokens 2");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.err.find("tokenizer bytes"), std::string::npos) << ok.err;
  EXPECT_EQ(ok.err.find("none stored"), std::string::npos) << ok.err;
}

TEST_F(BadInputGenerate, ExactlyOneSourceOfPromptsIsAsked) {
  const std::string ck = gpt_checkpoint();
  expect_error(generate("--checkpoint " + ck), "give exactly one of --prompt, --prompts, --interactive and --score", 2);
  expect_error(generate("--checkpoint " + ck + " --prompt x --interactive"), "give exactly one of", 2);
}

}  // namespace
