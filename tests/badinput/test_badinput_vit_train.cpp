// Bad input to vit_train: a missing or wrong data set, layouts ViT does not run, impossible sizes;
// each asserts a non-zero exit code and the "error:" line naming the problem, on one rank or
// several (the job ends promptly: every case runs under a timeout).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/hdf5_file.h"
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
    expect_refused(ranks, args, std::vector<std::string>{words});
  }
  void expect_refused(int ranks, const std::string& args, const std::vector<std::string>& all_words) {
    const auto r = run_command("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout " +
                               std::to_string(timeout_s_) + " " + std::string(TESSERA_MPIEXEC) + " --oversubscribe -np " +
                               std::to_string(ranks) + " " +
                               TESSERA_BUILD_DIR + "/apps/vit_train " + shape_ + " --patch 4 " +
                               "--global-batch 4 --steps 1 --threads 1 " + args);
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_NE(r.exit_code, 124) << "timed out: " << r.err;
    EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
    for (const std::string& words : all_words) EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
  }
  fs::path dir_;
  std::string images_, tokens_;
  std::string shape_ = "--layers 1 --hidden 16 --heads 2";  // cases may replace it (an option is given once)
  int timeout_s_ = 60;  // a case that calibrates and searches first may take longer on a busy machine
};

TEST_F(VitTrainBadInput, MissingDataSet) {
  expect_refused(1, "--input " + shell_quote((dir_ / "none.h5").string()), "none.h5");
}

TEST_F(VitTrainBadInput, TokenDataSetInsteadOfImages) {
  expect_refused(1, "--input " + shell_quote(tokens_), "/train/images");
}

TEST_F(VitTrainBadInput, PatchThatDoesNotDivideTheImage) {
  expect_refused(1, "--input " + shell_quote(images_) + " --patch 3", "patch");
}

TEST_F(VitTrainBadInput, SequenceParallelismThatDoesNotSplitTheTokens) {
  // 8 x 8 images in 4 x 4 patches: 4 patches + the class token = 5 tokens.
  expect_refused(2, "--input " + shell_quote(images_) + " --sp 2",
                 "vit: --sp 2 does not divide the 5 tokens of an image (4 patches + the class token");
}

// --layout auto with a memory limit no layout fits: the error names the smallest plan and why the
// layouts were rejected; beside a layout flag it is refused (the search would contradict it).
TEST_F(VitTrainBadInput, LayoutAutoWithAnImpossibleMemoryLimit) {
  // Without --machine a short calibration runs first, and every rank searches.
  timeout_s_ = 400;
  expect_refused(2, "--input " + shell_quote(images_) + " --layout auto --device-memory-limit 1K",
                 {"--layout auto: no layout of 2 ranks fits in 1024 bytes per rank: the smallest plan, --dp",
                  "rejected: ", "planned peak above --device-memory"});
  expect_refused(2, "--input " + shell_quote(images_) + " --layout auto --tp 2", "--layout auto chooses --tp itself");
}

TEST_F(VitTrainBadInput, SplitGatherSequenceParallelismIsRefused) {
  expect_refused(2, "--input " + shell_quote(images_) + " --tp 2 --sp-mode split_gather",
                 "--sp-mode split_gather is not supported for ViT");
}

// zigzag balances the causal mask; a ViT's attention is not causal (and ring is balanced for it).
TEST_F(VitTrainBadInput, ZigzagSequenceParallelismIsRefused) {
  expect_refused(2, "--input " + shell_quote(images_) + " --sp 2 --sp-mode zigzag",
                 "vit_train: --sp-mode zigzag balances causal (language-model) attention only");
}

TEST_F(VitTrainBadInput, CheckpointEveryMoreBlocksThanTheModelHas) {
  expect_refused(1, "--input " + shell_quote(images_) + " --activation-checkpointing full --recompute-every-k-blocks 2",
                 "--recompute-every-k-blocks 2 must be in [1, --layers 1]");
}

TEST_F(VitTrainBadInput, HeadsNotDivisibleByTensorParallel) {
  expect_refused(4, "--input " + shell_quote(images_) + " --tp 4", "--heads 2 is not divisible by --tp 4");
}

// Ulysses moves whole heads between the sp ranks: 2 heads cannot go to 4 (refused before any run).
TEST_F(VitTrainBadInput, HeadsNotDivisibleForAllToAll) {
  expect_refused(4, "--input " + shell_quote(images_) + " --pool mean --sp 4 --sp-mode all_to_all",
                 "each rank's 2 heads (--heads 2) do not split evenly over the 4 sp ranks");
}

TEST_F(VitTrainBadInput, HiddenNotSplittingOverA3dGrid) {
  shape_ = "--layers 1";
  expect_refused(8, "--input " + shell_quote(images_) + " --tp 8 --tp-mode 3d --hidden 34 --heads 2",
                 "--tp-mode 3d --tp 8: --heads 2 must divide by the grid's side 2 and --hidden 34 by 4");
}

TEST_F(VitTrainBadInput, UnknownPooling) {
  expect_refused(1, "--input " + shell_quote(images_) + " --pool max", "pool");
}

TEST_F(VitTrainBadInput, NegativeEpochs) {
  expect_refused(1, "--input " + shell_quote(images_) + " --epochs -1", "--epochs");
}

TEST_F(VitTrainBadInput, CudaDeviceIsRefusedClearly) {
  expect_refused(1, "--input " + shell_quote(images_) + " --device cuda", "cuda");
}

TEST_F(VitTrainBadInput, ExpertParallelismIsRefused) {
  expect_refused(2, "--input " + shell_quote(images_) + " --ep 2", "vit_train: --ep needs mixture-of-experts layers");
}

// A pipeline needs a block per (virtual) stage: one block does not split over two stages.
TEST_F(VitTrainBadInput, PipelineStagesWithoutBlocks) {
  expect_refused(2, "--input " + shell_quote(images_) + " --pp 2", "cannot be split over 2 pipeline");
}

// A data set whose test images differ in shape from its train images (the model, built for the
// train images, would read the test images past their end) is refused naming both shapes.
TEST_F(VitTrainBadInput, TestImagesOfAnotherShapeThanTrainImages) {
  const std::string path = (dir_ / "mixed.h5").string();
  // Varied pixels (a constant image has no standard deviation to normalise by).
  auto images = [](tessera::Shape shape) {
    tessera::Tensor t = tessera::Tensor::empty(shape, tessera::DType::u8);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37 % 251);
    return t;
  };
  {
    auto f = tessera::io::H5File::create(path);
    f.write("/train/images", images({8, 8, 8, 3}));
    f.write("/train/labels", tessera::Tensor::zeros({8}, tessera::DType::i32));
    f.write("/test/images", images({4, 4, 4, 3}));
    f.write("/test/labels", tessera::Tensor::zeros({4}, tessera::DType::i32));
    f.set_attr("/", "num_classes", int64_t{2});
    f.set_attr("/", "class_names", std::string("a\nb"));
  }
  expect_refused(1, "--input " + shell_quote(path) + " --eval-every 1",
                 path + ": test images are 4x4x3 but train images are 8x8x3 (H x W x C)");
  expect_refused(2, "--input " + shell_quote(path) + " --eval-every 1", "test images are 4x4x3 but train images are 8x8x3");
}

// Options that set the same thing: the run's length, when to evaluate.
TEST_F(VitTrainBadInput, EpochsWithSteps) {
  expect_refused(1, "--input " + shell_quote(images_) + " --epochs 2",
                 "--epochs 2 and --steps 1 both set the run's length: give one");
  expect_refused(2, "--input " + shell_quote(images_) + " --eval-every-epochs 1 --eval-every 1",
                 "--eval-every-epochs 1 and --eval-every 1 both set when to evaluate: give one");
}

// vit_train evaluates the whole test set: an --eval-batches would be silently ignored.
TEST_F(VitTrainBadInput, EvalBatchesThatWouldBeIgnored) {
  expect_refused(1, "--input " + shell_quote(images_) + " --eval-batches 4",
                 "vit_train evaluates the whole test set: --eval-batches is gpt_train's and moe_train's");
}

// A crop from an image padded by its own side or more can be all padding.
TEST_F(VitTrainBadInput, CropPaddingAsLargeAsTheImage) {
  expect_refused(1, "--input " + shell_quote(images_) + " --crop-pad 8", "--crop-pad 8 must be less than the image side 8");
}

TEST_F(VitTrainBadInput, NegativeOrNonFiniteValues) {
  expect_refused(1, "--input " + shell_quote(images_) + " --benchmark-loader -1",
                 "--benchmark-loader must be >= 0 (0: train), got -1");
  expect_refused(2, "--input " + shell_quote(images_) + " --label-smoothing nan",
                 "--label-smoothing nan: expected a finite number");
  expect_refused(1, "--input " + shell_quote(images_) + " --eval-every-epochs -1",
                 "--eval-every-epochs must be >= 0 (0: use --eval-every), got -1");
}

TEST_F(VitTrainBadInput, MetricsOverTheDataSet) {
  const auto size = fs::file_size(images_);
  expect_refused(1, "--input " + shell_quote(images_) + " --metrics " + shell_quote(images_),
                 "--metrics " + images_ + " is the file --input " + images_ + " reads");
  EXPECT_EQ(fs::file_size(images_), size);
}

}  // namespace
