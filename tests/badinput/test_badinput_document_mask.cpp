// --document-mask fed data it cannot use, each case a test: a token data set without /doc_offsets
// is refused before training on every rank, naming the file and what is missing, with a non-zero
// exit and nothing written; the loader refuses segments of a data set without documents.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_loader.h"
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

class BadDocumentMask : public tessera::testing::ScratchTest {};

void expect_words(const std::string& text, std::initializer_list<std::string> words) {
  for (const std::string& w : words) EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' not in: " << text;
}

TEST_F(BadDocumentMask, DataWithoutDocOffsetsIsRefused) {
  // Tokens written directly, with no /doc_offsets beside them (data_prep always writes them).
  const std::string data = file("bare.h5");
  {
    H5File f = H5File::create(data);
    tessera::Tensor t = tessera::Tensor::empty({4000}, tessera::DType::i32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 32);
    f.write("/train/tokens", t);
    f.set_attr("/", "vocab_size", 32);
  }
  const std::string metrics = file("m.jsonl"), ck = file("ck");
  const CommandResult r = run_command(
      kEnv + std::string(TESSERA_MPIEXEC) + " --oversubscribe -np 2 " + kBuild + "/apps/gpt_train --input " +
      shell_quote(data) + " --layers 1 --hidden 16 --heads 2 --seq-len 16 --global-batch 4 --steps 2 --threads 1" +
      " --tp 2 --document-mask --checkpoint-dir " + shell_quote(ck) + " --metrics " + shell_quote(metrics));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.exit_code, 124) << "the job hung: " << r.err;
  expect_words(r.err, {"error:", "--document-mask", data, "/train/doc_offsets is missing", "data_prep text"});
  EXPECT_FALSE(fs::exists(metrics)) << "a refused run wrote metrics";
  EXPECT_FALSE(fs::exists(ck + "/step_1.h5")) << "a refused run wrote a checkpoint";
  // The same file trains without the mask (the refusal is the mask's).
  const CommandResult plain = run_command(kEnv + kBuild + "/apps/gpt_train --input " + shell_quote(data) +
                                          " --layers 1 --hidden 16 --heads 2 --seq-len 16 --global-batch 4" +
                                          " --steps 1 --threads 1");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
}

TEST_F(BadDocumentMask, LoaderRefusesSegmentsWithoutDocuments) {
  tessera::io::TokenDataset d;
  d.path = "in-memory";
  d.vocab_size = 8;
  d.tokens.assign(100, 1);
  const tessera::io::TokenLoader loader(d, 16, 2, 1);
  std::vector<int32_t> seg(32);
  try {
    loader.train_segments(0, 0, 2, seg.data());
    ADD_FAILURE() << "segments of a data set without documents";
  } catch (const tessera::Error& e) {
    expect_words(e.what(), {"in-memory", "--document-mask needs the data set's documents"});
  }
}

}  // namespace
