// Bad input to ckpt_tool: each case runs the built binary on a broken, foreign or missing file (or
// a bad command line) and asserts a non-zero exit code and one "error:" line naming the problem.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "io/checkpoint_file.h"
#include "io/hdf5_file.h"
#include "run_command.h"

namespace fs = std::filesystem;
using tessera::Shape;
using tessera::testing::CommandResult;
using tessera::testing::run_command;
using tessera::testing::shell_quote;

namespace {

const std::string kCkptTool = TESSERA_BUILD_DIR "/apps/ckpt_tool";

class BadInputCkptTool : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_badinput_ckpt_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  CommandResult tool(const std::string& args) const { return run_command(shell_quote(kCkptTool) + " " + args); }

  // A good checkpoint (written serially): two tensors and a few attributes.
  std::string good_checkpoint(const std::string& name) const {
    const std::string path = file(name);
    tessera::io::CheckpointWriter w(path, MPI_COMM_NULL);
    w.create("/params/wte.weight", Shape{16, 8});
    w.create("/optim/wte.weight/exp_avg", Shape{16, 8});
    std::vector<float> v(128);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f;  // L2 norm: sqrt(128 * 0.25) = 5.65685
    w.write_range("/params/wte.weight", 0, 128, v.data());
    w.write_range("/optim/wte.weight/exp_avg", 0, 128, v.data());
    w.set_attr("step", 42);
    w.set_attr("consumed_samples", 1344);
    w.set_attr("layout", "pp=1 dp=2 tp=1");
    w.commit();
    return path;
  }

  // How a tensor is stored again, in place of the writer's contiguous f32 dataset holding it all.
  enum class Restored { chunked_f32, contiguous_f64, unwritten_f32 };

  // Replaces the tensor `name` of a committed checkpoint by a dataset of the same shape and
  // values and the same "checksum" attribute, stored as `how` says: only its storage is foreign.
  static void restore_tensor_as(const std::string& path, const std::string& name, Restored how) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    ASSERT_GE(d, 0);
    const hid_t space = H5Dget_space(d);
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    hsize_t numel = 1;
    for (hsize_t n : dims) numel *= n;
    std::vector<double> values(numel);
    ASSERT_GE(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    uint64_t checksum = 0;
    const hid_t a = H5Aopen(d, "checksum", H5P_DEFAULT);
    ASSERT_GE(H5Aread(a, H5T_NATIVE_UINT64, &checksum), 0);
    H5Aclose(a);
    H5Dclose(d);
    ASSERT_GE(H5Ldelete(f, name.c_str(), H5P_DEFAULT), 0);

    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (how == Restored::chunked_f32) {
      std::vector<hsize_t> chunk(dims);
      chunk[0] = std::max<hsize_t>(1, dims[0] / 4);  // several chunks
      H5Pset_chunk(dcpl, rank, chunk.data());
    }
    const hid_t type = how == Restored::contiguous_f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    d = H5Dcreate2(f, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    if (how != Restored::unwritten_f32) {
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    }
    const hid_t scalar = H5Screate(H5S_SCALAR);
    const hid_t b = H5Acreate2(d, "checksum", H5T_STD_U64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(b, H5T_NATIVE_UINT64, &checksum), 0);
    H5Aclose(b);
    H5Sclose(scalar);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    ASSERT_GE(H5Fclose(f), 0);
  }

  // The failure contract: the exit code, "error:" once on stderr with every word, no HDF5 noise.
  static void expect_failure(const CommandResult& r, int code, std::initializer_list<std::string> words) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find("error:"), std::string::npos) << r.err;
    for (const std::string& w : words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "' not in: " << r.err;
    EXPECT_EQ(r.err.find("error:"), r.err.rfind("error:")) << "more than one error line: " << r.err;
    EXPECT_EQ(r.err.find("HDF5-DIAG"), std::string::npos) << "HDF5's own error stack leaked: " << r.err;
    EXPECT_EQ(r.out.find("ok:"), std::string::npos) << r.out;
  }
  fs::path dir_;
};

}  // namespace

// Controls: the tool works on a good checkpoint, so the failures below are about the input.
TEST_F(BadInputCkptTool, GoodCheckpointVerifiesAndInspects) {
  const std::string path = good_checkpoint("step_42.h5");
  const CommandResult v = tool("verify " + shell_quote(path));
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_EQ(v.out, "ok: " + path + " (2 tensors)\n");
  EXPECT_EQ(v.err, "");
  const CommandResult i = tool("inspect " + shell_quote(path));
  ASSERT_EQ(i.exit_code, 0) << i.err;
  for (const char* want : {"step: 42", "consumed samples: 1344", "layout: pp=1 dp=2 tp=1",
                                  "format = tessera-checkpoint", "version = 3", "/params/wte.weight",
                                  "/optim/wte.weight/exp_avg", "[16, 8]", "5.65685", "tensors (2, 256 elements)"})
    EXPECT_NE(i.out.find(want), std::string::npos) << "'" << want << "' not in:\n" << i.out;
  EXPECT_EQ(tool("--help").exit_code, 0);
}

TEST_F(BadInputCkptTool, MissingFile) {
  expect_failure(tool("verify " + shell_quote(file("step_9.h5"))), 1, {"step_9.h5", "no such file"});
  expect_failure(tool("inspect " + shell_quote(file("step_9.h5"))), 1, {"step_9.h5", "no such file"});
}

TEST_F(BadInputCkptTool, TextFile) {
  std::ofstream(file("notes.txt")) << "step = 5\nthis is not a checkpoint\n";
  expect_failure(tool("verify " + shell_quote(file("notes.txt"))), 1, {"notes.txt", "not an HDF5 file"});
  std::ofstream{file("empty.h5")};
  expect_failure(tool("inspect " + shell_quote(file("empty.h5"))), 1, {"empty.h5", "empty"});
}

TEST_F(BadInputCkptTool, Directory) {
  expect_failure(tool("verify " + shell_quote(dir_.string())), 1, {"directory"});
}

TEST_F(BadInputCkptTool, TruncatedCheckpoint) {
  const std::string path = good_checkpoint("step_42.h5");
  fs::resize_file(path, fs::file_size(path) * 2 / 3);
  expect_failure(tool("verify " + shell_quote(path)), 1, {"step_42.h5", "truncated"});
  expect_failure(tool("inspect " + shell_quote(path)), 1, {"step_42.h5", "truncated"});
}

TEST_F(BadInputCkptTool, BitFlippedCheckpoint) {
  const std::string path = good_checkpoint("step_42.h5");
  haddr_t offset;
  {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t d = H5Dopen2(f, "/params/wte.weight", H5P_DEFAULT);
    offset = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
  }
  ASSERT_NE(offset, HADDR_UNDEF);
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto pos = static_cast<std::streamoff>(offset + 4 * 77 + 1);  // element 77, bit 8..15
    io.seekg(pos);
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    io.seekp(pos);
    io.write(&c, 1);
  }
  expect_failure(tool("verify " + shell_quote(path)), 1, {"step_42.h5", "/params/wte.weight", "checksum mismatch"});
}

TEST_F(BadInputCkptTool, Hdf5FileThatIsNotACheckpoint) {
  {
    tessera::io::H5File f = tessera::io::H5File::create(file("tokens.h5"));
    f.set_attr("/", "vocab_size", int64_t{256});
    tessera::io::H5File g = tessera::io::H5File::create(file("future.h5"));
    g.set_attr("/", "format", "tessera-checkpoint");
    g.set_attr("/", "version", int64_t{7});
  }
  expect_failure(tool("verify " + shell_quote(file("tokens.h5"))), 1, {"tokens.h5", "not a tessera checkpoint"});
  expect_failure(tool("inspect " + shell_quote(file("tokens.h5"))), 1, {"tokens.h5", "not a tessera checkpoint"});
  expect_failure(tool("verify " + shell_quote(file("future.h5"))), 1, {"future.h5", "unsupported checkpoint version 7"});
}

TEST_F(BadInputCkptTool, UncommittedTmpFile) {
  const std::string path = good_checkpoint("step_42.h5");
  fs::copy_file(path, path + ".tmp");  // complete, but under the name a crash before the rename leaves
  expect_failure(tool("verify " + shell_quote(path + ".tmp")), 1, {"step_42.h5.tmp", "uncommitted"});
}

// The reader takes only what the writer makes, a contiguous f32 dataset holding every element;
// a tensor stored otherwise (same shape, values and checksum) is refused naming it. The tensor
// replaced is the second in sorted order, so the tool is seen to look past the first.
TEST_F(BadInputCkptTool, TensorStoredInChunks) {
  const std::string path = good_checkpoint("step_42.h5");
  restore_tensor_as(path, "/params/wte.weight", Restored::chunked_f32);
  for (const char* command : {"verify ", "inspect "})
    expect_failure(tool(command + shell_quote(path)), 1,
                   {"step_42.h5", "tensor /params/wte.weight is not stored contiguously"});
}

TEST_F(BadInputCkptTool, TensorStoredAsFloat64) {
  const std::string path = good_checkpoint("step_42.h5");
  restore_tensor_as(path, "/params/wte.weight", Restored::contiguous_f64);
  for (const char* command : {"verify ", "inspect "})
    expect_failure(tool(command + shell_quote(path)), 1,
                   {"step_42.h5", "tensor /params/wte.weight is not stored as 32-bit floating point"});
}

TEST_F(BadInputCkptTool, TensorWithoutItsData) {
  const std::string path = good_checkpoint("step_42.h5");
  restore_tensor_as(path, "/params/wte.weight", Restored::unwritten_f32);  // no storage allocated
  for (const char* command : {"verify ", "inspect "})
    expect_failure(tool(command + shell_quote(path)), 1,
                   {"step_42.h5", "tensor /params/wte.weight [16, 8] has 0 bytes of data for 128 elements"});
}

TEST_F(BadInputCkptTool, BadCommandLine) {
  const std::string path = good_checkpoint("step_42.h5");
  expect_failure(tool("frobnicate " + shell_quote(path)), 2, {"unknown command 'frobnicate'"});
  expect_failure(tool(""), 2, {"missing command"});
  expect_failure(tool("verify"), 2, {"needs a checkpoint FILE"});
  expect_failure(tool("verify " + shell_quote(path) + " " + shell_quote(path)), 2, {"too many"});
  expect_failure(tool("--verify " + shell_quote(path)), 2, {"expected a command"});
  expect_failure(tool("inspect --bogus " + shell_quote(path)), 2, {"bogus"});
}
