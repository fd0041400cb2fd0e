// TestHooks::from_environment: every test-only variable parsed into the one object, malformed
// values named.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/test_hooks.h"

using namespace tessera;

namespace {

// Sets the variables for one test and removes them after it.
class Environment {
 public:
  Environment(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      setenv(name, value, 1);
      names_.push_back(name);
    }
  }
  ~Environment() {
    for (const char* name : names_) unsetenv(name);
  }

 private:
  std::vector<const char*> names_;
};

std::string error_of(const char* name, const char* value) {
  Environment env{{name, value}};
  try {
    TestHooks::from_environment();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TestHooks, NoneSetMeansNone) {
  const TestHooks h = TestHooks::from_environment();
  EXPECT_FALSE(h.kill.set());
  EXPECT_FALSE(h.signal.set());
  EXPECT_FALSE(h.skip_collective.set());
  EXPECT_FALSE(h.mismatch_collective.set());
  EXPECT_EQ(h.nan_step, -1);
  EXPECT_EQ(h.checkpoint_disk_limit_bytes, -1);
  EXPECT_FALSE(h.crash_before_checkpoint_rename);
  EXPECT_FALSE(h.stage_host);
}

TEST(TestHooks, EveryVariableReadIntoOneObject) {
  Environment env{{"TESSERA_FAULT_KILL", "1:6"},
                  {"TESSERA_FAULT_NAN_STEP", "4"},
                  {"TESSERA_FAULT_SIGNAL", "2:7:TERM"},
                  {"TESSERA_FAULT_SKIP_COLLECTIVE", "3:9"},
                  {"TESSERA_FAULT_MISMATCH_COLLECTIVE", "0:2"},
                  {"TESSERA_CKPT_DISK_LIMIT_BYTES", "4096"},
                  {"TESSERA_CKPT_CRASH_BEFORE_RENAME", "1"},
                  {"TESSERA_TEST_STAGE_HOST", "1"}};
  const TestHooks h = TestHooks::from_environment();
  EXPECT_EQ(h.kill.rank, 1);
  EXPECT_EQ(h.kill.at, 6);
  EXPECT_EQ(h.nan_step, 4);
  EXPECT_EQ(h.signal.rank, 2);
  EXPECT_EQ(h.signal.at, 7);
  EXPECT_EQ(h.signal_number, SIGTERM);
  EXPECT_EQ(h.skip_collective.rank, 3);
  EXPECT_EQ(h.skip_collective.at, 9);
  EXPECT_EQ(h.mismatch_collective.rank, 0);
  EXPECT_EQ(h.mismatch_collective.at, 2);
  EXPECT_EQ(h.checkpoint_disk_limit_bytes, 4096);
  EXPECT_TRUE(h.crash_before_checkpoint_rename);
  EXPECT_TRUE(h.stage_host);
}

TEST(TestHooks, SignalDefaultsToPreemptionNotice) {
  Environment env{{"TESSERA_FAULT_SIGNAL", "0:3"}};
  const TestHooks h = TestHooks::from_environment();
  EXPECT_EQ(h.signal.rank, 0);
  EXPECT_EQ(h.signal.at, 3);
  EXPECT_EQ(h.signal_number, SIGUSR1);
}

TEST(TestHooks, MalformedValuesNameTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"TESSERA_FAULT_KILL", "3"},          {"TESSERA_FAULT_KILL", "a:1"},
      {"TESSERA_FAULT_NAN_STEP", "four"},   {"TESSERA_FAULT_NAN_STEP", "0"},
      {"TESSERA_FAULT_SIGNAL", "1:2:HUP"},  {"TESSERA_FAULT_SIGNAL", "1"},
      {"TESSERA_CKPT_DISK_LIMIT_BYTES", "-5"}, {"TESSERA_CKPT_DISK_LIMIT_BYTES", "1k"},
      {"TESSERA_FAULT_SKIP_COLLECTIVE", "1:0"}};
  for (const auto& [name, value] : bad) {
    const std::string text = error_of(name, value);
    EXPECT_NE(text.find(std::string(name) + "=\"" + value + "\""), std::string::npos) << name << " " << text;
  }
}
