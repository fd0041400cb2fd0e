// The signal flag behind preemption (process-wide by nature: signals are).
#include "train/preemption.h"

#include <csignal>

namespace tessera::train {
namespace {
volatile std::sig_atomic_t g_requested = 0;
extern "C" void on_preemption_signal(int) { g_requested = 1; }
}  // namespace

void install_preemption_handlers() {
  struct sigaction action {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool preemption_requested() { return g_requested != 0; }

}  // namespace tessera::train
