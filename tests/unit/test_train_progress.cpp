// The progress line (lib/train/progress.h): its percent, elapsed and ETA strings, and the live
// line's rate limit, with an injected clock and terminal (no test waits for real time).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/progress.h"

namespace {
using tessera::train::format_duration;
using tessera::train::Progress;
using tessera::train::progress_line;
using tessera::train::ProgressSink;

TEST(Progress, FormatDuration) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(7.9), "0:07");  // whole seconds, rounded down
  EXPECT_EQ(format_duration(754), "12:34");
  EXPECT_EQ(format_duration(3599), "59:59");
  EXPECT_EQ(format_duration(3600), "1:00:00");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(100 * 3600 + 5), "100:00:05");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(1.0 / 0.0), "?");
}

TEST(Progress, LineShowsPercentElapsedAndEta) {
  // 30 of 120 steps in 12 s: 0.4 s a step, 90 left, 36 s.
  EXPECT_EQ(progress_line(30, 120, 1, 12.0, "loss 3.21"), "step 30/120 25% | 0:12 elapsed, ETA 0:36 | loss 3.21");
  EXPECT_EQ(progress_line(120, 120, 1, 48.0, ""), "step 120/120 100% | 0:48 elapsed, ETA 0:00");
  EXPECT_EQ(progress_line(1, 3, 1, 0.0, "x"), "step 1/3 33% | 0:00 elapsed, ETA ? | x");  // no time yet
  // Resumed at step 101 of 200: the rate counts the 10 steps this run did (2 s each), not 110.
  EXPECT_EQ(progress_line(110, 200, 101, 20.0, "y"), "step 110/200 55% | 0:20 elapsed, ETA 3:00 | y");
  EXPECT_EQ(progress_line(1, 10000, 1, 4.0, ""), "step 1/10000 0% | 0:04 elapsed, ETA 11:06:36");
}

// A terminal that records what is written, with a clock the test moves.
struct FakeTerminal {
  double now = 100.0;
  std::vector<std::string> writes;
  ProgressSink sink(bool live) {
    ProgressSink s;
    s.live = live;
    s.seconds = [this] { return now; };
    s.write = [this](const std::string& bytes) { writes.push_back(bytes); };
    return s;
  }
  int lines_drawn() const {
    int n = 0;
    for (const std::string& w : writes) n += w.rfind("\r\033[K", 0) == 0;
    return n;
  }
};

TEST(Progress, LiveLineIsRedrawnAtMostTwiceASecond) {
  FakeTerminal term;
  Progress progress(100, 10, 1, term.sink(true));
  for (int64_t step = 1; step <= 100; ++step) {
    term.now = 100.0 + 0.125 * static_cast<double>(step);  // eight steps a second (exact in binary)
    progress.step(step, "loss " + std::to_string(step));
  }
  // The first step draws, then one drawing per 0.5 s: steps 1, 5, 9, ..., 97 (25 drawings in 12.5 s).
  EXPECT_EQ(term.lines_drawn(), 25);
  EXPECT_EQ(term.writes.front(), "\r\033[Kstep 1/100 1% | 0:00 elapsed, ETA 0:12 | loss 1");
  EXPECT_EQ(term.writes.back(), "\r\033[Kstep 97/100 97% | 0:12 elapsed, ETA 0:00 | loss 97");
  // finish() draws the newest step that was held back, then ends the line.
  progress.finish();
  ASSERT_EQ(term.writes.size(), 27u);
  EXPECT_EQ(term.writes[25], "\r\033[Kstep 100/100 100% | 0:12 elapsed, ETA 0:00 | loss 100");
  EXPECT_EQ(term.writes[26], "\n");
}

TEST(Progress, SlowStepsDrawEveryTime) {
  FakeTerminal term;
  Progress progress(5, 1, 1, term.sink(true));
  for (int64_t step = 1; step <= 5; ++step) {
    term.now += 0.5;
    progress.step(step, "");
  }
  EXPECT_EQ(term.lines_drawn(), 5);
  progress.finish();
  EXPECT_EQ(term.lines_drawn(), 5);  // nothing held back
  EXPECT_EQ(term.writes.back(), "\n");
}

TEST(Progress, NotLiveWritesNothingToTheTerminal) {
  FakeTerminal term;
  Progress progress(4, 2, 1, term.sink(false));  // log lines instead (core/log.h)
  for (int64_t step = 1; step <= 4; ++step) progress.step(step, "");
  progress.finish();
  EXPECT_TRUE(term.writes.empty());
}

}  // namespace
