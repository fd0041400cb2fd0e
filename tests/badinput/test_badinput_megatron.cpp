// Bad Megatron indexed data sets fed to `data_prep import-megatron`, each case a test: a bad magic,
// version or dtype code, header counts that disagree with the .idx size, a multimodal index, a truncated .bin,
// decreasing pointers, document indices out of range, a token outside --vocab-size; and an existing
// output is not overwritten. Each names the file and the field, exits 1 and leaves no output.
// The files are made by tests/tools/make_megatron_dataset.py (numpy), not by tessera's reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "run_command.h"
#include "scratch_test.h"

namespace fs = std::filesystem;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kBuild = TESSERA_BUILD_DIR;
const std::string kSource = TESSERA_SOURCE_DIR;
const std::string kDocs = "[[[1, 2, 3], [4, 5]], [[6, 7, 8, 9]]]";

class BadMegatron : public tessera::testing::ScratchTest {
 protected:
  void SetUp() override {
    ScratchTest::SetUp();
    ASSERT_EQ(run_command("/usr/bin/python3 -c 'import numpy'").exit_code, 0)
        << "/usr/bin/python3 cannot import numpy (Debian: apt-get install python3-numpy)";
  }

  // PREFIX of a data set of `docs` in `dtype`, spoiled by `corrupt` ("" for none).
  std::string make(const std::string& dtype, const std::string& corrupt, const std::string& docs = kDocs) {
    const std::string prefix = file("mg");
    const CommandResult r = run_command("/usr/bin/python3 " + shell_quote(kSource + "/tests/tools/make_megatron_dataset.py") +
                                        " --prefix " + shell_quote(prefix) + " --dtype " + dtype + " --docs " +
                                        shell_quote(docs) + (corrupt.empty() ? "" : " --corrupt " + corrupt));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return prefix;
  }
  CommandResult import(const std::string& prefix, int vocab = 16, const std::string& extra = "") {
    return run_command(kBuild + "/apps/data_prep import-megatron --input " + shell_quote(prefix) + " --vocab-size " +
                       std::to_string(vocab) + " --output " + shell_quote(file("out.h5")) + extra);
  }
  // The import failed with every expected fragment in its error, and wrote nothing.
  void expect_refused(const CommandResult& r, const std::vector<std::string>& fragments) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    for (const std::string& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
    EXPECT_FALSE(fs::exists(file("out.h5")));
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find("out.h5.tmp"), std::string::npos) << "left " << e.path();
  }

};

TEST_F(BadMegatron, GoodFileImports) {  // the control: the same files unspoiled import
  const CommandResult r = import(make("uint16", ""));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("9 train and 0 val tokens in 2 and 0 documents"), std::string::npos) << r.out;
}

TEST_F(BadMegatron, BadMagic) {
  expect_refused(import(make("uint16", "bad-magic")), {file("mg.idx"), "bad magic", "MMIDIDX"});
}

TEST_F(BadMegatron, BadVersion) {
  expect_refused(import(make("uint16", "bad-version")), {file("mg.idx"), "version 2 is not supported"});
}

TEST_F(BadMegatron, UnknownDtypeCode) {
  expect_refused(import(make("int32", "bad-dtype")), {file("mg.idx"), "unknown dtype code 9"});
}

TEST_F(BadMegatron, CountsDisagreeWithIdxSize) {
  expect_refused(import(make("int32", "count-mismatch")),
                 {file("mg.idx"), "counts disagree with the file size", "sequence count 4"});
}

TEST_F(BadMegatron, MultimodalIndexRefused) {
  expect_refused(import(make("uint16", "multimodal")), {file("mg.idx"), "a multimodal index", "not supported"});
}

TEST_F(BadMegatron, TruncatedBin) {
  expect_refused(import(make("uint16", "truncate-bin")),
                 {file("mg.idx"), "past the end of " + file("mg.bin"), "(17 bytes)", "shorter than its .idx"});
}

TEST_F(BadMegatron, BinLongerThanIdx) {
  const std::string prefix = make("uint16", "");
  std::ofstream(prefix + ".bin", std::ios::app | std::ios::binary) << "xx";
  expect_refused(import(prefix), {file("mg.bin"), "20 bytes", "describes 18 bytes", "disagree"});
}

TEST_F(BadMegatron, DecreasingPointers) {
  expect_refused(import(make("int32", "decreasing-pointers")),
                 {file("mg.idx"), "pointers[1] = -4 is less than pointers[0] = 0", "must increase"});
}

TEST_F(BadMegatron, DocumentIndexOutOfRange) {
  expect_refused(import(make("uint16", "doc-index-range")),
                 {file("mg.idx"), "document_indices[2] = 4 is out of range [0, 3]"});
}

TEST_F(BadMegatron, TokenOutsideVocabulary) {
  expect_refused(import(make("int32", "", "[[[1, 2], [3]], [[4, 16, 5]]]")),
                 {file("mg.bin"), "token 4 (document 1) = 16 is outside the vocabulary [0, 16)"});
  expect_refused(import(make("int32", "", "[[[1, -3]]]")), {file("mg.bin"), "token 1 (document 0) = -3"});
}

TEST_F(BadMegatron, ExistingOutputNotOverwritten) {
  const std::string prefix = make("uint16", "");
  { std::ofstream(file("out.h5")) << "keep me"; }
  const CommandResult r = import(prefix);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("it exists (give --overwrite"), std::string::npos) << r.err;
  std::ifstream in(file("out.h5"));
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "keep me");
  // --overwrite replaces it.
  EXPECT_EQ(import(prefix, 16, " --overwrite").exit_code, 0);
}

}  // namespace
