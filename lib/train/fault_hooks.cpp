// FaultHooks: parsing of the TESSERA_FAULT_* variables.
#include "train/fault_hooks.h"

#include <csignal>
#include <cstdio>
#include <string>
#include <cstdlib>

#include "core/error.h"

namespace tessera::train {

FaultHooks FaultHooks::from_environment() {
  FaultHooks h;
  if (const char* kill = std::getenv("TESSERA_FAULT_KILL")) {
    long long step = -1;
    TESSERA_CHECK(std::sscanf(kill, "%d:%lld", &h.kill_rank, &step) == 2,
                  "TESSERA_FAULT_KILL must be <rank>:<step>, got '", kill, "'");
    h.kill_step = step;
  }
  if (const char* nan = std::getenv("TESSERA_FAULT_NAN_STEP")) h.nan_step = std::atoll(nan);
  if (const char* sig = std::getenv("TESSERA_FAULT_SIGNAL")) {
    long long step = -1;
    char name[8] = "USR1";
    const int n = std::sscanf(sig, "%d:%lld:%7s", &h.signal_rank, &step, name);
    TESSERA_CHECK((n == 2 || n == 3) && (std::string(name) == "USR1" || std::string(name) == "TERM"),
                  "TESSERA_FAULT_SIGNAL must be <rank>:<step>[:USR1|TERM], got '", sig, "'");
    h.signal_step = step;
    h.signal = std::string(name) == "TERM" ? SIGTERM : SIGUSR1;
  }
  return h;
}

}  // namespace tessera::train
