// Progress: formatting, terminal detection, line rewriting at a bounded rate.
#include "train/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
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

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) return "?";
  const auto s = static_cast<long long>(seconds);  // whole seconds, rounded down
  char buf[32];
  if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string progress_line(int64_t step, int64_t total, int64_t first_step, double elapsed,
                          const std::string& summary) {
  const long long percent = total > 0 ? static_cast<long long>(step * 100 / total) : 100;
  const int64_t done = step - first_step + 1;  // steps this run has done
  const double eta = done > 0 && elapsed > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - step) : -1;
  char head[128];
  std::snprintf(head, sizeof head, "step %lld/%lld %lld%% | %s elapsed, ETA %s", static_cast<long long>(step),
                static_cast<long long>(total), percent, format_duration(elapsed).c_str(), format_duration(eta).c_str());
  return summary.empty() ? std::string(head) : std::string(head) + " | " + summary;
}

ProgressSink ProgressSink::terminal() {
  ProgressSink sink;
  sink.live = live_terminal();
  sink.seconds = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  sink.write = [](const std::string& bytes) {
    std::fputs(bytes.c_str(), stdout);
    std::fflush(stdout);
  };
  return sink;
}

Progress::Progress(int64_t total_steps, int64_t log_every, int64_t first_step, ProgressSink sink)
    : sink_(std::move(sink)),
      live_(sink_.live && log::enabled(log::Level::info)),
      total_(total_steps),
      log_every_(log_every < 1 ? 1 : log_every),
      first_step_(first_step),
      start_(sink_.seconds()) {}

void Progress::draw(const std::string& line) {
  sink_.write("\r\033[K" + line);
  last_draw_ = sink_.seconds();
  drawn_ = any_draw_ = true;
  pending_.clear();
}

void Progress::step(int64_t step, const std::string& summary) {
  const double now = sink_.seconds();
  if (live_) {
    const std::string line = progress_line(step, total_, first_step_, now - start_, summary);
    if (!any_draw_ || now - last_draw_ >= kRefreshSeconds)
      draw(line);
    else
      pending_ = line;
  } else if (step % log_every_ == 0 || step == total_ || step == first_step_) {
    log::info(progress_line(step, total_, first_step_, now - start_, summary));
  }
}

void Progress::message(const std::string& line) {
  if (live_ && drawn_) {
    sink_.write("\n");
    drawn_ = false;
  }
  log::info(line);
}

void Progress::finish() {
  if (live_ && !pending_.empty()) draw(pending_);
  if (live_ && drawn_) sink_.write("\n");
  drawn_ = false;
}

}  // namespace tessera::train
