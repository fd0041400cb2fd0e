// io::superblock_problem, the check both HDF5 open paths make before HDF5 reads a file: files that
// HDF5 writes (superblock versions 0 and 3) pass; an end of file inside the superblock, or a file
// that ends inside it, is named; a file whose superblock is not at its start is left to HDF5; and
// H5File::open_read refuses the fuzz finding with that reason.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "io/hdf5_handle.h"

namespace {
namespace fs = std::filesystem;
using tessera::io::superblock_problem;

// The test's files, in a folder of its own removed when the test program ends.
struct ScratchFolder {
  fs::path path = fs::temp_directory_path() / ("tessera_superblock_" + std::to_string(::getpid()));
  ScratchFolder() { fs::create_directories(path); }
  ~ScratchFolder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

std::string scratch(const std::string& name) {
  static const ScratchFolder folder;
  return (folder.path / name).string();
}

// An HDF5 file with one small dataset, written with the oldest (superblock 0) or newest format.
std::string written_file(const std::string& name, bool latest) {
  const std::string path = scratch(name);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (latest) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  const hsize_t n = 4;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t set = H5Dcreate2(file, "x", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const float v[4] = {1, 2, 3, 4};
  H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  H5Dclose(set);
  H5Sclose(space);
  H5Fclose(file);
  H5Pclose(fapl);
  return path;
}

std::vector<char> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string with_bytes(const std::string& name, const std::vector<char>& bytes) {
  const std::string path = scratch(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST(Superblock, FilesHdf5WritesPass) {
  EXPECT_EQ(superblock_problem(written_file("v0.h5", false)), "");
  EXPECT_EQ(superblock_problem(written_file("latest.h5", true)), "");
}

TEST(Superblock, AnEndOfFileInsideTheSuperblockIsNamed) {
  for (const bool latest : {false, true}) {
    std::vector<char> bytes = bytes_of(written_file("eof.h5", latest));
    const int version = bytes[8];
    const size_t eof_at = version == 0 ? 24 + 16 : version == 1 ? 28 + 16 : 12 + 16;  // 8-byte offsets
    std::fill(bytes.begin() + static_cast<long>(eof_at), bytes.begin() + static_cast<long>(eof_at) + 8, 0);
    const std::string problem = superblock_problem(with_bytes("eof_zero.h5", bytes));
    EXPECT_NE(problem.find("end of file at byte 0, inside the superblock"), std::string::npos)
        << "superblock version " << version << ": " << problem;
  }
}

TEST(Superblock, AFileEndingInsideTheSuperblockIsTruncated) {
  std::vector<char> bytes = bytes_of(written_file("short.h5", false));
  bytes.resize(30);
  EXPECT_NE(superblock_problem(with_bytes("short_cut.h5", bytes)).find("the file is truncated (30 bytes"),
            std::string::npos);
}

TEST(Superblock, ASuperblockElsewhereIsLeftToHdf5) {
  std::vector<char> bytes(512, 0);  // a user block: HDF5 looks for its superblock at 512
  const std::vector<char> file = bytes_of(written_file("user.h5", false));
  bytes.insert(bytes.end(), file.begin(), file.end());
  EXPECT_EQ(superblock_problem(with_bytes("user_block.h5", bytes)), "");
  EXPECT_EQ(superblock_problem(with_bytes("text.h5", {'h', 'e', 'l', 'l', 'o'})), "");
}

TEST(Superblock, H5FileRefusesTheFuzzFindingWithTheReason) {
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/regressions/checkpoint_end_of_file_at_zero.h5";
  try {
    (void)tessera::io::H5File::open_read(path);
    FAIL() << "opened";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("end of file at byte 0"), std::string::npos) << e.what();
  }
}

}  // namespace
