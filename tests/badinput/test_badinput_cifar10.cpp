// Bad input to data_prep cifar10 and synth-images: each case runs the built binary on a fake
// CIFAR-10 folder (sparse full-size files) and asserts a non-zero exit code, one "error:" line
// naming the file and the problem, and that no output file (nor its .tmp) is left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/cifar10.h"
#include "io/image_dataset.h"
#include "run_command.h"

namespace fs = std::filesystem;
using tessera::io::ImageDataset;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kDataPrep = TESSERA_BUILD_DIR "/apps/data_prep";
constexpr int64_t kRecord = tessera::io::kCifar10RecordBytes;
constexpr int64_t kPlane = 32 * 32;

class BadInputCifar10 : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_badinput_cifar10_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    cifar_ = dir_ / "cifar";
    fs::create_directories(cifar_);
    make_fake_cifar();
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_);
  }
  std::string batch(const std::string& name) const { return (cifar_ / name).string(); }
  std::string out() const { return (dir_ / "cifar10.h5").string(); }

  // Six full-size batch files (sparse: all zeros, so label 0 and black images) and the meta file;
  // a few records get labels and pixels so the conversion can be checked.
  void make_fake_cifar() {
    for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                             "data_batch_5.bin", "test_batch.bin"}) {
      std::ofstream(batch(name), std::ios::binary).close();
      fs::resize_file(batch(name), tessera::io::kCifar10FileBytes);
    }
    std::ofstream(batch("batches.meta.txt"))
        << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n";
    poke(batch("data_batch_1.bin"), 0, 3);                // train image 0: label 3
    poke(batch("data_batch_2.bin"), kRecord, 9);          // train image 10001: label 9
    poke(batch("data_batch_2.bin"), kRecord + 1, 200);    // ... red at (0, 0)
    poke(batch("data_batch_2.bin"), kRecord + 1 + kPlane, 100);            // green at (0, 0)
    poke(batch("data_batch_2.bin"), kRecord + 1 + 2 * kPlane + 33, 50);    // blue at (1, 1)
    poke(batch("test_batch.bin"), 9999 * kRecord, 7);     // test image 9999: label 7
  }
  static void poke(const std::string& file, int64_t offset, int value) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offset);
    f.put(static_cast<char>(value));
  }
  CommandResult cifar10(const std::string& input, const std::string& output) const {
    return run_command(shell_quote(kDataPrep) + " cifar10 --input " + shell_quote(input) + " --output " +
                       shell_quote(output));
  }
  CommandResult data_prep(const std::string& args) const { return run_command(shell_quote(kDataPrep) + " " + args); }

  // The failure contract: the exit code, "error:" once on stderr holding every word, no output left.
  void expect_failure(const CommandResult& r, int code, std::initializer_list<std::string> words,
                      const std::string& output) const {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "more than one error line: " << r.err;
    for (const auto& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "' not in: " << r.err;
    EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << "HDF5's own error stack leaked: " << r.err;
    EXPECT_FALSE(fs::exists(output)) << output;
    EXPECT_FALSE(fs::exists(output + ".tmp")) << output << ".tmp";
    EXPECT_TRUE(temporaries(output).empty()) << "a temporary was left beside " << output;
  }
  // Files data_prep left beside `output` under a temporary name (<output>.tmp...).
  static std::vector<std::string> temporaries(const std::string& output) {
    std::vector<std::string> found;
    const std::string prefix = fs::path(output).filename().string() + ".tmp";
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(fs::path(output).parent_path(), ec))
      if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path().string());
    return found;
  }
  static std::string contents(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_, cifar_;
};

}  // namespace

// A control: the fake folder converts, so the failures below are about the damage done to it.
TEST_F(BadInputCifar10, GoodInputConverts) {
  const CommandResult r = cifar10(cifar_.string(), out());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("50000 train and 10000 test images of 32x32x3"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out() + ".tmp"));
  const ImageDataset train = ImageDataset::open(out(), "train");
  const ImageDataset test = ImageDataset::open(out(), "test");
  EXPECT_EQ(train.size(), 50000);
  EXPECT_EQ(test.size(), 10000);
  ASSERT_EQ(train.num_classes(), 10);
  EXPECT_EQ(train.class_names[0], "airplane");
  EXPECT_EQ(train.class_names[9], "truck");
  EXPECT_EQ(train.labels[0], 3);
  EXPECT_EQ(train.labels[10001], 9);
  EXPECT_EQ(test.labels[9999], 7);
  const uint8_t* img = train.image(10001);  // HWC: (y, x, c) at (y * 32 + x) * 3 + c
  EXPECT_EQ(img[0], 200);
  EXPECT_EQ(img[1], 100);
  EXPECT_EQ(img[2], 0);
  EXPECT_EQ(img[(1 * 32 + 1) * 3 + 2], 50);

  EXPECT_EQ(data_prep("cifar10 --help").exit_code, 0);
  EXPECT_EQ(data_prep("synth-images --help").exit_code, 0);
}

TEST_F(BadInputCifar10, TruncatedBatchFile) {
  fs::resize_file(batch("data_batch_3.bin"), tessera::io::kCifar10FileBytes - 1000);
  expect_failure(cifar10(cifar_.string(), out()), 1,
                 {"data_batch_3.bin", "is truncated", "30729000 bytes, expected 30730000"}, out());
}

TEST_F(BadInputCifar10, BatchFileOfTheWrongSize) {
  fs::resize_file(batch("test_batch.bin"), tessera::io::kCifar10FileBytes + kRecord);
  expect_failure(cifar10(cifar_.string(), out()), 1,
                 {"test_batch.bin", "is too long", "30733073 bytes, expected 30730000", "10000 records of 3073 bytes"},
                 out());
}

TEST_F(BadInputCifar10, LabelTen) {
  poke(batch("data_batch_4.bin"), 17 * kRecord, 10);
  expect_failure(cifar10(cifar_.string(), out()), 1, {"data_batch_4.bin", "record 17 has label 10", "0..9"}, out());
}

TEST_F(BadInputCifar10, MissingBatchFile) {
  fs::remove(batch("data_batch_5.bin"));
  expect_failure(cifar10(cifar_.string(), out()), 1, {"data_batch_5.bin", "no such file"}, out());
}

TEST_F(BadInputCifar10, MissingMetaFile) {
  fs::remove(batch("batches.meta.txt"));
  expect_failure(cifar10(cifar_.string(), out()), 1, {"batches.meta.txt", "no such file"}, out());
}

TEST_F(BadInputCifar10, WrongNumberOfClassNames) {
  std::ofstream(batch("batches.meta.txt")) << "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\n";
  expect_failure(cifar10(cifar_.string(), out()), 1, {"batches.meta.txt", "expected 10 class names", "found 9"},
                 out());
  std::ofstream(batch("batches.meta.txt")) << "airplane\n\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
  expect_failure(cifar10(cifar_.string(), out()), 1, {"batches.meta.txt", "line 2 is empty"}, out());
}

TEST_F(BadInputCifar10, InputFolderMissing) {
  expect_failure(cifar10((dir_ / "nowhere").string(), out()), 1, {"nowhere", "no such directory"}, out());
  expect_failure(cifar10(batch("test_batch.bin"), out()), 1, {"test_batch.bin", "not a directory"}, out());
}

TEST_F(BadInputCifar10, OutputFolderNotWritable) {
  // Root writes through directory permissions, so it is given a folder no one may create files in.
  std::string output = "/sys/tessera_badinput_cifar10.h5";
  if (geteuid() != 0) {
    const fs::path ro = dir_ / "read_only";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    output = (ro / "cifar10.h5").string();
  }
  expect_failure(cifar10(cifar_.string(), output), 1, {"cannot write " + output, "Permission denied"}, output);
  expect_failure(cifar10(cifar_.string(), (dir_ / "no/such/dir/out.h5").string()), 1, {"no/such/dir", "does not exist"},
                 (dir_ / "no/such/dir/out.h5").string());
}

TEST_F(BadInputCifar10, BadOptions) {
  expect_failure(data_prep("cifar10 --output " + shell_quote(out())), 2, {"input"}, out());
  expect_failure(data_prep("cifar10 --input " + shell_quote(cifar_.string()) + " --output " + shell_quote(out()) +
                           " --shuffle"),
                 2, {"--shuffle"}, out());
}

TEST_F(BadInputCifar10, SynthImages) {
  const std::string good = (dir_ / "synth.h5").string();
  const CommandResult r = data_prep("synth-images --classes 3 --train 30 --test 6 --size 8 --seed 2 --output " +
                                    shell_quote(good));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const ImageDataset train = ImageDataset::open(good, "train");
  EXPECT_EQ(train.size(), 30);
  EXPECT_EQ(train.num_classes(), 3);
  EXPECT_EQ(train.height, 8);
  EXPECT_EQ(ImageDataset::open(good, "test").size(), 6);

  const std::string bad = (dir_ / "bad.h5").string();
  expect_failure(data_prep("synth-images --classes 1 --seed 2 --output " + shell_quote(bad)), 2, {"--classes"}, bad);
  expect_failure(data_prep("synth-images --train 0 --seed 2 --output " + shell_quote(bad)), 2, {"--train"}, bad);
  expect_failure(data_prep("synth-images --size 0 --seed 2 --output " + shell_quote(bad)), 2, {"--size"}, bad);
  expect_failure(data_prep("synth-images --output " + shell_quote(bad)), 2, {"seed"}, bad);
}

// --overwrite replaces an existing output only once the new one is complete: a run that fails (here on
// a truncated batch, after the output was opened) leaves the old file as it was, and no temporary.
TEST_F(BadInputCifar10, ForcedRunThatFailsKeepsTheOldOutput) {
  std::ofstream(out(), std::ios::binary) << "the previous output";
  fs::resize_file(batch("data_batch_3.bin"), tessera::io::kCifar10FileBytes - 1000);
  const CommandResult r = run_command(shell_quote(kDataPrep) + " cifar10 --input " + shell_quote(cifar_.string()) +
                                      " --output " + shell_quote(out()) + " --overwrite");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("data_batch_3.bin is truncated"), std::string::npos) << r.err;
  EXPECT_EQ(contents(out()), "the previous output");
  EXPECT_TRUE(temporaries(out()).empty());
}

// The output is never one of the files the command reads, even with --overwrite.
TEST_F(BadInputCifar10, OutputThatIsAnInputFile) {
  const std::string test_batch = batch("test_batch.bin");
  const CommandResult r = run_command(shell_quote(kDataPrep) + " cifar10 --input " + shell_quote(cifar_.string()) +
                                      " --output " + shell_quote(test_batch) + " --overwrite");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("cannot write " + test_batch + ": it is the input " + test_batch), std::string::npos) << r.err;
  EXPECT_EQ(static_cast<int64_t>(fs::file_size(test_batch)), tessera::io::kCifar10FileBytes);
  EXPECT_TRUE(temporaries(test_batch).empty());
}
