// Progress display: a live, rewritten line when stdout is a terminal (and not under mpirun or a
// batch scheduler); plain log lines otherwise. Both show the step, the percent done, the time since
// the run's first step and the estimated time left:
//   step 30/120 25% | 0:12 elapsed, ETA 0:36 | loss 3.21 | lr ...
// The live line is redrawn at most twice a second (kRefreshSeconds); the clock and the terminal
// are injected so that the formatting and the rate limit are tested without real time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace tessera::train {

// "0:07", "12:34", "1:02:03" (h:mm:ss from an hour on); "?" for a negative or non-finite time.
std::string format_duration(double seconds);

// The line for `step` of `total` after `elapsed` seconds of this run, which started at
// `first_step` (a resumed run's rate counts only the steps it did itself). The ETA is the time per
// step so far times the steps left; "ETA ?" before any time has passed.
std::string progress_line(int64_t step, int64_t total, int64_t first_step, double elapsed,
                          const std::string& summary);

// Where the progress goes: live (a rewritten terminal line) or log lines, a monotonic clock in
// seconds, and the writer of the terminal's bytes.
struct ProgressSink {
  bool live = false;
  std::function<double()> seconds;
  std::function<void(const std::string&)> write;
  static ProgressSink terminal();  // stdout, steady_clock; live on a real terminal only
};

class Progress {
 public:
  static constexpr double kRefreshSeconds = 0.5;
  Progress(int64_t total_steps, int64_t log_every, int64_t first_step = 1,
           ProgressSink sink = ProgressSink::terminal());
  // summary: "loss 3.21 | lr ...". Live: redrawn when kRefreshSeconds have passed since the last
  // drawing (the first step always draws); the others are kept and drawn by finish().
  void step(int64_t step, const std::string& summary);
  void message(const std::string& line);  // a line that stays (eval results, saves)
  void finish();

 private:
  void draw(const std::string& line);
  ProgressSink sink_;
  bool live_;  // sink_.live, unless the log level hides info lines (--quiet)
  int64_t total_, log_every_, first_step_;
  double start_;
  double last_draw_ = 0;
  bool drawn_ = false;   // a live line has been drawn since the last message
  bool any_draw_ = false;
  std::string pending_;  // the newest line, when it has not been drawn yet
};

}  // namespace tessera::train
