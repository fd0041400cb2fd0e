// io::CheckpointWriter killed or starved mid-write (forked children, serial writer): no crash and
// no full disk ever leaves a file that loads as a checkpoint, and earlier checkpoints stay good.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/test_hooks.h"
#include "io/checkpoint_file.h"

namespace fs = std::filesystem;
using tessera::Error;
using tessera::Shape;
using tessera::io::CheckpointReader;
using tessera::io::CheckpointWriter;

namespace {

class CheckpointCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_ckpt_crash_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * static_cast<float>(i % 1000 - 500);
  return v;
}

// Creates and fills a [rows, 64] tensor and sets "step"; commits unless told not to.
void write_step(CheckpointWriter& w, int64_t step, int64_t rows) {
  const std::vector<float> v = ramp(rows * 64, static_cast<float>(step));
  w.create("/params/w", Shape{rows, 64});
  w.write_range("/params/w", 0, rows * 64, v.data());
  w.set_attr("step", step);
}

void expect_step(const std::string& path, int64_t step, int64_t rows) {
  CheckpointReader r(path, MPI_COMM_NULL);
  EXPECT_NO_THROW(r.verify());
  EXPECT_EQ(r.attr_int("step"), step);
  std::vector<float> got(static_cast<size_t>(rows * 64));
  r.read_range("/params/w", 0, rows * 64, got.data());
  EXPECT_EQ(got, ramp(rows * 64, static_cast<float>(step)));
}

// Runs body in a forked child; returns its wait status. The child leaves with _exit: no atexit
// handlers, no GoogleTest teardown. Its exit code is body's return value (1 on an exception).
int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 1;
    try {
      code = body();
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_F(CheckpointCrash, KilledBeforeRenameLeavesOnlyAnUnloadableTmp) {
  const std::string step1 = file("step_1.h5"), step2 = file("step_2.h5");
  {
    CheckpointWriter w(step1, MPI_COMM_NULL);
    write_step(w, 1, 8);
    w.commit();
  }
  // The hook: SIGKILL after everything is written, flushed and fsynced, just before the rename.
  const int status = in_child([&] {
    tessera::test_hooks().crash_before_checkpoint_rename = true;  // TESSERA_CKPT_CRASH_BEFORE_RENAME (the child's)
    CheckpointWriter w(step2, MPI_COMM_NULL);
    write_step(w, 2, 8);
    w.commit();
    return 3;  // not reached
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  EXPECT_FALSE(fs::exists(step2));
  ASSERT_TRUE(fs::exists(step2 + ".tmp"));  // what the crash left: complete, but never a checkpoint
  const std::string why = error_of([&] { CheckpointReader r(step2 + ".tmp", MPI_COMM_NULL); });
  EXPECT_NE(why.find("uncommitted"), std::string::npos) << why;
  EXPECT_NE(why.find("step_2.h5.tmp"), std::string::npos) << why;
  expect_step(step1, 1, 8);  // the previous checkpoint is untouched

  // The next attempt at the same step truncates the stale .tmp and commits.
  {
    CheckpointWriter w(step2, MPI_COMM_NULL);
    write_step(w, 2, 4);
    w.commit();
  }
  EXPECT_FALSE(fs::exists(step2 + ".tmp"));
  expect_step(step2, 2, 4);
}

TEST_F(CheckpointCrash, KilledMidWriteLeavesNothingLoadableEvenRenamed) {
  const std::string step1 = file("step_1.h5"), step3 = file("step_3.h5");
  {
    CheckpointWriter w(step1, MPI_COMM_NULL);
    write_step(w, 1, 8);
    w.commit();
  }
  const int status = in_child([&] {
    CheckpointWriter w(step3, MPI_COMM_NULL);
    write_step(w, 3, 256);
    raise(SIGKILL);  // data written, commit never reached: no checksums, no "format"
    return 3;
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(step3));
  ASSERT_TRUE(fs::exists(step3 + ".tmp"));
  EXPECT_NE(error_of([&] { CheckpointReader r(step3 + ".tmp", MPI_COMM_NULL); }).find("uncommitted"),
            std::string::npos);
  // Even under a checkpoint's name the remains are refused: without "format" (written last, in
  // commit) or not even a readable HDF5 file yet.
  fs::rename(step3 + ".tmp", step3);
  const std::string why = error_of([&] { CheckpointReader r(step3, MPI_COMM_NULL); });
  EXPECT_TRUE(why.find("not a tessera checkpoint") != std::string::npos ||
              why.find("cannot open checkpoint") != std::string::npos)
      << why;
  EXPECT_NE(why.find("step_3.h5"), std::string::npos) << why;
  expect_step(step1, 1, 8);
}

TEST_F(CheckpointCrash, FullDiskFailsCleanlyAndKeepsEarlierCheckpoints) {
  // A file size limit stands in for a full disk: the space reservation of a tensor fails, as it
  // would with ENOSPC, before any data reaches the file.
  const std::string step1 = file("step_1.h5"), step4 = file("step_4.h5");
  {
    CheckpointWriter w(step1, MPI_COMM_NULL);
    write_step(w, 1, 8);
    w.commit();
  }
  const int status = in_child([&] {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 128 * 1024;
    setrlimit(RLIMIT_FSIZE, &limit);
    CheckpointWriter w(step4, MPI_COMM_NULL);
    const std::string why = error_of([&] {
      write_step(w, 4, 4096);  // 1 MiB
      w.commit();
    });
    if (why.find("writing checkpoint " + step4) == std::string::npos) return 10;
    if (why.find("/params/w") == std::string::npos) return 11;
    if (why.find("File too large") == std::string::npos) return 12;
    if (fs::exists(step4 + ".tmp")) return 13;  // gone before the error reached the caller
    if (error_of([&] { w.commit(); }).find("earlier write error") == std::string::npos) return 14;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: message lacks the path, 11: the tensor, 12: the cause, "
                                       "13: .tmp left behind, 14: writer still usable";
  EXPECT_FALSE(fs::exists(step4));
  EXPECT_FALSE(fs::exists(step4 + ".tmp"));
  expect_step(step1, 1, 8);
}

TEST_F(CheckpointCrash, SpaceReservationLeavesNoSlackInTheCommittedFile) {
  // commit() reserves room for the metadata past the data; HDF5 trims the file to its real end.
  const std::string path = file("small.h5");
  {
    CheckpointWriter w(path, MPI_COMM_NULL);
    write_step(w, 7, 2);  // 512 bytes of data
    w.commit();
  }
  EXPECT_LT(fs::file_size(path), 16u * 1024);
  expect_step(path, 7, 2);
}
