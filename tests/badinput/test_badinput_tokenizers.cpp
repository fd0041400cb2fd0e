// Bad input to data_prep's tokenizers (text --tokenizer, decode): each case runs the built binary
// and asserts the exit code, one "error:" line naming the problem, and no output left behind; a
// control shows a good tokenizer.json encodes, is stored, and decodes without its file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/token_dataset.h"
#include "run_command.h"
#include "text/byte_unicode.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kDataPrep = TESSERA_BUILD_DIR "/apps/data_prep";

// A byte-level BPE tokenizer.json: the 256 byte characters, then "th" and "the" by two merges.
std::string small_tokenizer_json(const std::string& model_type = "BPE") {
  nlohmann::json vocab = nlohmann::json::object();
  const auto& chars = tessera::text::byte_to_unicode();
  for (int b = 0; b < 256; ++b) vocab[chars[static_cast<size_t>(b)]] = b;
  vocab["th"] = 256;
  vocab["the"] = 257;
  nlohmann::json j = {{"model", {{"type", model_type}, {"vocab", vocab}, {"merges", {"t h", "th e"}}}},
                      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                      {"decoder", {{"type", "ByteLevel"}}},
                      {"added_tokens", nlohmann::json::array()}};
  return j.dump();
}

class BadInputTokenizers : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_badinput_tok_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& content = "") const {
    const std::string path = (dir_ / name).string();
    if (!content.empty()) std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  CommandResult data_prep(const std::string& args) const { return run_command(shell_quote(kDataPrep) + " " + args); }
  CommandResult text(const std::string& input, const std::string& tokenizer, const std::string& output) const {
    return data_prep("text --input " + shell_quote(input) + " --tokenizer " + shell_quote(tokenizer) +
                     " --output " + shell_quote(output));
  }

  // Non-zero exit `code`, "error:" once on stderr with `word`, and no output file.
  void expect_failure(const CommandResult& r, const std::string& word, int code, const std::string& output = "") {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(word), std::string::npos) << "'" << word << "' not in: " << r.err;
    EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "more than one error line: " << r.err;
    if (!output.empty()) {
      EXPECT_FALSE(fs::exists(output)) << output;
    }
  }
  fs::path dir_;
};

}  // namespace

// A control: the tokenizer file is stored, so decoding needs only the data set.
TEST_F(BadInputTokenizers, GoodTokenizerEncodesStoresAndDecodes) {
  const std::string json = file("tokenizer.json", small_tokenizer_json());
  const std::string input = file("in.txt", "the theme, then the end\n");
  const std::string out = file("out.h5");
  const CommandResult r = data_prep("text --input " + shell_quote(input) + " --tokenizer " + shell_quote(json) +
                                    " --output " + shell_quote(out) + " --val-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto data = tessera::io::TokenDataset::open(out, "train");
  EXPECT_EQ(data.vocab_size, 258);
  EXPECT_EQ(data.tokenizer, "hf-byte-level-bpe");
  EXPECT_EQ(data.read(0, 1)[0], 257);  // "the"
  fs::remove(json);
  const CommandResult all = data_prep("decode --input " + shell_quote(out));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(all.out, "the theme, then the end\n");
  const CommandResult part = data_prep("decode --input " + shell_quote(out) + " --start 1 --count 2");
  ASSERT_EQ(part.exit_code, 0) << part.err;
  EXPECT_EQ(part.out, " the");  // " theme" is "Ġ", "the", "m", "e"
}

TEST_F(BadInputTokenizers, UnknownKindOfTokenizerFile) {
  const std::string out = file("out.h5");
  expect_failure(text(file("in.txt", "hello"), file("vocab.txt", "a b c"), out), "unknown kind of tokenizer file",
                 1, out);
}

TEST_F(BadInputTokenizers, MissingTokenizerFile) {
  const std::string out = file("out.h5");
  const CommandResult r = text(file("in.txt", "hello"), file("missing.json"), out);
  expect_failure(r, "cannot read --tokenizer", 1, out);
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
}

TEST_F(BadInputTokenizers, UnsupportedModelTypeIsNamed) {
  const std::string out = file("out.h5");
  expect_failure(text(file("in.txt", "hello"), file("wp.json", small_tokenizer_json("WordPiece")), out),
                 "model.type is 'WordPiece'", 1, out);
}

TEST_F(BadInputTokenizers, NotJson) {
  const std::string out = file("out.h5");
  expect_failure(text(file("in.txt", "hello"), file("broken.json", "{\"model\": [1, 2"), out), "not valid JSON", 1,
                 out);
}

TEST_F(BadInputTokenizers, TextThatIsNotUtf8) {
  const std::string out = file("out.h5");
  const CommandResult r =
      text(file("in.txt", "good text \xc3\x28 then bad"), file("t.json", small_tokenizer_json()), out);
  expect_failure(r, "not valid UTF-8 at byte 10", 1, out);
  EXPECT_NE(r.err.find("in.txt"), std::string::npos) << r.err;
}

TEST_F(BadInputTokenizers, SentencePieceModelThatIsNot) {
  const std::string out = file("out.h5");
  const CommandResult r = text(file("in.txt", "hello"), file("fake.model", "not a protobuf"), out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.err.find("not a SentencePiece model") != std::string::npos ||
              r.err.find("no SentencePiece support") != std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(BadInputTokenizers, DecodeOfDataWithoutText) {
  const std::string data = file("synth.h5");
  ASSERT_EQ(data_prep("synth --vocab 16 --tokens 100 --seed 1 --output " + shell_quote(data)).exit_code, 0);
  expect_failure(data_prep("decode --input " + shell_quote(data)), "no text to decode to", 1);
}

TEST_F(BadInputTokenizers, DecodeRangeAndSplit) {
  const std::string data = file("bytes.h5");
  ASSERT_EQ(data_prep("text --input " + shell_quote(file("in.txt", "0123456789abcdefghij")) + " --output " +
                      shell_quote(data))
                .exit_code,
            0);
  expect_failure(data_prep("decode --input " + shell_quote(data) + " --start 19"), "past the end", 2);
  expect_failure(data_prep("decode --input " + shell_quote(data) + " --start 10 --count 9"), "passes the end", 2);
  expect_failure(data_prep("decode --input " + shell_quote(data) + " --split test"), "--split must be train or val",
                 2);
  expect_failure(data_prep("decode --input " + shell_quote(file("none.h5"))), "none.h5", 1);
  const CommandResult val = data_prep("decode --input " + shell_quote(data) + " --split val");
  ASSERT_EQ(val.exit_code, 0) << val.err;
  EXPECT_EQ(val.out, "ij");
}
