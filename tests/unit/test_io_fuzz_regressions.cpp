// Regression tests for what the fuzzers (tests/fuzz) found, each fed the reproducer's bytes.
// fuzz_config_file: Boost 1.74's error message looped forever on an option named with a placeholder.
// fuzz_checkpoint_reader: a file whose metadata header asks HDF5 for a 7 EiB buffer (ASan aborted
// inside libhdf5's malloc; glibc returns NULL, HDF5 reports it, the reader names the file).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../badinput/run_command.h"

namespace {
using tessera::testing::CommandResult;
using tessera::testing::run_command;
// The app is MPI-singleton-started: LeakSanitizer is off for it (see tests/run_all.sh); 60 s bound.
const std::string kNoLeakCheck = "env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 timeout 60 ";
// The reproducer of fuzz_config_file (timeout-cd3d7c5e...): an unknown key "inputoption '%canonical_option%'...".
const unsigned char kConfigHang[] = {
    0x69, 0x6e, 0x70, 0x75, 0x74, 0x6f, 0x70, 0x74, 0x69, 0x6f, 0x6e, 0x20, 0x27, 0x25, 0x63, 0x61, 0x6e,
    0x6f, 0x6e, 0x69, 0x63, 0x61, 0x6c, 0x5f, 0x6f, 0x70, 0x74, 0x69, 0x6f, 0x6e, 0x25, 0x27, 0x20, 0x3d,
    0x20, 0x31, 0x0a};

TEST(FuzzRegression, ConfigKeyWithBoostPlaceholderIsRefusedNotHung) {
  const std::string path = "/tmp/tessera_fuzz_regression_" + std::to_string(getpid()) + ".ini";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(kConfigHang, 1, sizeof kConfigHang, f);
  std::fclose(f);
  const std::string app = std::string(TESSERA_BUILD_DIR) + "/apps/gpt_train";
  const CommandResult r = run_command(kNoLeakCheck + app + " --config " + path);
  std::remove(path.c_str());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("unrecognised option"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("%canonical_option%"), std::string::npos) << r.err;
}

TEST(FuzzRegression, CommandLineOptionWithBoostPlaceholderIsRefusedNotHung) {
  const std::string app = std::string(TESSERA_BUILD_DIR) + "/apps/gpt_train";
  const CommandResult r = run_command(kNoLeakCheck + app + " '--%canonical_option%=1'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("'--%canonical_option%=1'"), std::string::npos) << r.err;
}
// ckpt_tool verify on a reproducer in tests/fuzz/regressions: exit 1, the file named, and every
// expected fragment in the message. Under ASan, malloc must fail as glibc's does (tests/fuzz/
// run_fuzz_ci.sh says why).
void expect_ckpt_tool_refuses(const std::string& reproducer, const std::vector<std::string>& fragments) {
  const std::string file = std::string(TESSERA_SOURCE_DIR) + "/tests/fuzz/regressions/" + reproducer;
  const std::string tool = std::string(TESSERA_BUILD_DIR) + "/apps/ckpt_tool";
  const CommandResult r = run_command(
      "env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 timeout 120 " + tool + " verify " + file);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find(reproducer), std::string::npos) << r.err;
  for (const std::string& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "'" << f << "' in: " << r.err;
}

TEST(FuzzRegression, CheckpointAskingHdf5ForAnAbsurdBufferIsRefused) {
  expect_ckpt_tool_refuses("checkpoint_absurd_metadata_size.h5", {"corrupt HDF5 file"});
}
// A 49-byte file whose superblock puts the end of file at byte 0: HDF5 1.10.8 filled about 2.1 GB
// reading it before it failed (CI's fuzz run found it at its 2 GB limit); tessera now refuses it
// from the superblock's fields before HDF5 reads it (io::superblock_problem).
TEST(FuzzRegression, CheckpointWithItsEndOfFileAtZeroIsRefused) {
  expect_ckpt_tool_refuses("checkpoint_end_of_file_at_zero.h5", {"corrupt HDF5 file", "end of file at byte 0"});
}
}  // namespace
