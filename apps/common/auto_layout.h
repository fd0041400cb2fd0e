// --layout auto (gpt_train, moe_train, vit_train): every rank runs the same layout search (apps/common/layout_search.h)
// over the job's ranks, with the machine file --machine names or, without one, a short calibration
// first (plan/calibration.h), and trains with the fastest layout that fits: the command line with
// that layout's flags in place of --layout auto and --machine. Layout flags given beside it are
// refused: the search would contradict them.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tessera::cli {

struct AutoLayout {
  std::vector<std::string> args;  // the trainer's arguments, the chosen layout's flags at the end
  std::string summary;            // "--layout auto: --dp 4 ... (predicted 6.0 ms per step, ...)"
};

// nullopt when `args` (argv without the program) do not ask for --layout auto. Collective over the
// world when it calibrates; deterministic, so every rank chooses the same layout. Throws naming the
// problem (a layout flag beside it, no layout that fits: the smallest plan and the reasons each
// layout was rejected).
std::optional<AutoLayout> resolve_auto_layout(const std::vector<std::string>& args, bool moe, bool vit = false);

// A trainer's command line with --layout auto resolved: argc()/argv() are the program's own when it
// does not ask for it, else the program name and the chosen arguments (rank 0 logs the summary).
class ResolvedArgv {
 public:
  ResolvedArgv(int argc, char** argv, bool moe, bool vit, bool log_summary);
  int argc() const { return argc_; }
  char** argv() const { return argv_; }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
  int argc_;
  char** argv_;
};

}  // namespace tessera::cli
