// Progress: terminal detection and line rewriting.
#include "train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/log.h"

namespace tessera::train {

namespace {
// A live line only on a real terminal: under mpirun (whose pseudo-terminal makes isatty true even
// when the job's output goes to a file) or a batch scheduler, plain lines.
bool live_terminal() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK") || std::getenv("SLURM_JOB_ID")) return false;
  return isatty(STDOUT_FILENO) != 0;
}
}  // namespace

Progress::Progress(int64_t total_steps, int64_t log_every)
    : live_(live_terminal()), total_(total_steps), log_every_(log_every < 1 ? 1 : log_every) {}

void Progress::step(int64_t step, const std::string& summary) {
  if (live_) {
    std::printf("\r\033[Kstep %lld/%lld | %s", static_cast<long long>(step), static_cast<long long>(total_),
                summary.c_str());
    std::fflush(stdout);
    dirty_ = true;
  } else if (step % log_every_ == 0 || step == total_ || step == 1) {
    log::info("step ", step, "/", total_, " | ", summary);
  }
}

void Progress::message(const std::string& line) {
  if (live_ && dirty_) {
    std::printf("\n");
    dirty_ = false;
  }
  log::info(line);
}

void Progress::finish() {
  if (live_ && dirty_) std::printf("\n");
  dirty_ = false;
}

}  // namespace tessera::train
