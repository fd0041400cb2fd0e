// Progress display: a live, rewritten line when stdout is a terminal (and not under mpirun or a
// batch scheduler); plain log lines otherwise.
#pragma once
#include <string>

namespace tessera::train {

class Progress {
 public:
  Progress(int64_t total_steps, int64_t log_every);
  void step(int64_t step, const std::string& summary);  // summary: "loss 3.21 | lr ... "
  void message(const std::string& line);                // a line that stays (eval results, saves)
  void finish();

 private:
  bool live_;
  int64_t total_, log_every_;
  bool dirty_ = false;
};

}  // namespace tessera::train
