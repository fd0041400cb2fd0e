// TestHooks: parsing of the test-only environment variables (see test_hooks.h).
#include "core/test_hooks.h"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace tessera {
namespace {

// The whole of `text` as a decimal integer, or false.
bool parse_integer(const std::string& text, long long& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(text.c_str(), &end, 10);
  return *end == '\0' && errno == 0;
}

const char* variable(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

RankAt parse_rank_at(const char* name, const std::string& value, const char* what) {
  const size_t colon = value.find(':');
  long long rank = -1, n = 0;
  const bool ok = colon != std::string::npos && parse_integer(value.substr(0, colon), rank) &&
                  parse_integer(value.substr(colon + 1), n) && rank >= 0 && rank <= INT32_MAX && n >= 1;
  TESSERA_CHECK(ok, name, "=\"", value, "\": expected \"<world rank>:<n>\" (rank >= 0, n >= 1: the n-th ", what, ")");
  return {static_cast<int>(rank), static_cast<int64_t>(n)};
}

TestHooks TestHooks::from_environment() {
  TestHooks h;
  if (const char* v = variable("TESSERA_FAULT_KILL")) h.kill = parse_rank_at("TESSERA_FAULT_KILL", v, "step");
  if (const char* v = variable("TESSERA_FAULT_NAN_STEP")) {
    long long step = 0;
    TESSERA_CHECK(parse_integer(v, step) && step >= 1, "TESSERA_FAULT_NAN_STEP=\"", v, "\": expected a step >= 1");
    h.nan_step = step;
  }
  if (const char* v = variable("TESSERA_FAULT_SIGNAL")) {
    std::string spec = v, name = "USR1";
    if (const size_t second = spec.find(':', spec.find(':') + 1); second != std::string::npos) {
      name = spec.substr(second + 1);
      spec.resize(second);
    }
    TESSERA_CHECK(name == "USR1" || name == "TERM", "TESSERA_FAULT_SIGNAL=\"", v,
                  "\": expected \"<world rank>:<step>[:USR1|TERM]\"");
    h.signal = parse_rank_at("TESSERA_FAULT_SIGNAL", spec, "step");
    h.signal_number = name == "TERM" ? SIGTERM : SIGUSR1;
  }
  if (const char* v = variable("TESSERA_FAULT_SKIP_COLLECTIVE"))
    h.skip_collective = parse_rank_at("TESSERA_FAULT_SKIP_COLLECTIVE", v, "collective");
  if (const char* v = variable("TESSERA_FAULT_MISMATCH_COLLECTIVE"))
    h.mismatch_collective = parse_rank_at("TESSERA_FAULT_MISMATCH_COLLECTIVE", v, "collective");
  if (const char* v = variable("TESSERA_CKPT_DISK_LIMIT_BYTES")) {
    long long bytes = 0;
    TESSERA_CHECK(parse_integer(v, bytes) && bytes >= 0, "TESSERA_CKPT_DISK_LIMIT_BYTES=\"", v,
                  "\": expected a byte count >= 0");
    h.checkpoint_disk_limit_bytes = bytes;
  }
  h.crash_before_checkpoint_rename = std::getenv("TESSERA_CKPT_CRASH_BEFORE_RENAME") != nullptr;
  if (const char* v = variable("TESSERA_TEST_STAGE_HOST")) h.stage_host = std::strcmp(v, "1") == 0;
  return h;
}

TestHooks& test_hooks() {
  static TestHooks hooks = TestHooks::from_environment();
  return hooks;
}

}  // namespace tessera
