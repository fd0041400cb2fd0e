// Bad input to vit_train: a missing or wrong data set, layouts ViT does not run, impossible sizes;
// each asserts a non-zero exit code and the "error:" line naming the problem, on one rank or
// several (the job ends promptly: every case runs under a timeout).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "run_command.h"

namespace fs = std::filesystem;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

class VitTrainBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_badinput_vit_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    images_ = (dir_ / "images.h5").string();
    tokens_ = (dir_ / "tokens.h5").string();
    const std::string prep = std::string(TESSERA_BUILD_DIR) + "/apps/data_prep ";
    ASSERT_EQ(run_command(prep + "synth-images --classes 3 --train 24 --test 8 --size 8 --seed 1 --output " +
                          shell_quote(images_)).exit_code, 0);
    ASSERT_EQ(run_command(prep + "synth --vocab 20 --tokens 2000 --seed 1 --output " + shell_quote(tokens_)).exit_code, 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // vit_train on `ranks` ranks with a tiny model; expects failure and `words` in an error line.
  void expect_refused(int ranks, const std::string& args, const std::string& words) {
    const auto r = run_command("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " +
                               std::string(TESSERA_MPIEXEC) + " --oversubscribe -np " + std::to_string(ranks) + " " +
                               TESSERA_BUILD_DIR + "/apps/vit_train " + shape_ + " --patch 4 " +
                               "--global-batch 4 --steps 1 --threads 1 " + args);
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.exit_code, 124) << "timed out: " << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  }
  fs::path dir_;
  std::string images_, tokens_;
  std::string shape_ = "--layers 1 --hidden 16 --heads 2";  // cases may replace it (an option is given once)
};

TEST_F(VitTrainBadInput, MissingDataSet) {
  expect_refused(1, "--data " + shell_quote((dir_ / "none.h5").string()), "none.h5");
}

TEST_F(VitTrainBadInput, TokenDataSetInsteadOfImages) {
  expect_refused(1, "--data " + shell_quote(tokens_), "/train/images");
}

TEST_F(VitTrainBadInput, PatchThatDoesNotDivideTheImage) {
  expect_refused(1, "--data " + shell_quote(images_) + " --patch 3", "patch");
}

TEST_F(VitTrainBadInput, SequenceParallelismThatDoesNotSplitTheTokens) {
  // 8 x 8 images in 4 x 4 patches: 4 patches + the class token = 5 tokens.
  expect_refused(2, "--data " + shell_quote(images_) + " --sp 2",
                 "vit: --sp 2 does not divide the 5 tokens of an image (4 patches + the class token");
}

TEST_F(VitTrainBadInput, SplitGatherSequenceParallelismIsRefused) {
  expect_refused(2, "--data " + shell_quote(images_) + " --tp 2 --sp-mode split_gather",
                 "--sp-mode split_gather is not supported for ViT");
}

TEST_F(VitTrainBadInput, CheckpointEveryMoreBlocksThanTheModelHas) {
  expect_refused(1, "--data " + shell_quote(images_) + " --activation-checkpointing full --checkpoint-every-k-blocks 2",
                 "--checkpoint-every-k-blocks 2 must be in [1, --layers 1]");
}

TEST_F(VitTrainBadInput, HeadsNotDivisibleByTensorParallel) {
  expect_refused(4, "--data " + shell_quote(images_) + " --tp 4", "--heads 2 is not divisible by --tp 4");
}

TEST_F(VitTrainBadInput, HiddenNotSplittingOverA3dGrid) {
  shape_ = "--layers 1";
  expect_refused(8, "--data " + shell_quote(images_) + " --tp 8 --tp-mode 3d --hidden 34 --heads 2",
                 "--tp-mode 3d --tp 8: --heads 2 must divide by the grid's side 2 and --hidden 34 by 4");
}

TEST_F(VitTrainBadInput, UnknownPooling) {
  expect_refused(1, "--data " + shell_quote(images_) + " --pool max", "pool");
}

TEST_F(VitTrainBadInput, NegativeEpochs) {
  expect_refused(1, "--data " + shell_quote(images_) + " --epochs -1", "--epochs");
}

TEST_F(VitTrainBadInput, CudaDeviceIsRefusedClearly) {
  expect_refused(1, "--data " + shell_quote(images_) + " --device cuda", "cuda");
}

TEST_F(VitTrainBadInput, ExpertParallelismIsRefused) {
  expect_refused(2, "--data " + shell_quote(images_) + " --ep 2", "vit_train: --ep needs mixture-of-experts layers");
}

// A pipeline needs a block per (virtual) stage: one block does not split over two stages.
TEST_F(VitTrainBadInput, PipelineStagesWithoutBlocks) {
  expect_refused(2, "--data " + shell_quote(images_) + " --pp 2", "cannot be split over 2 pipeline");
}

}  // namespace
