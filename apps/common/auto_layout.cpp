// --layout auto: the search's fastest layout spliced into the trainer's command line.
#include "apps/common/auto_layout.h"

#include <cstdio>

#include "apps/common/cli.h"
#include "apps/common/layout_search.h"
#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/log.h"
#include "plan/calibration.h"

namespace tessera::cli {
namespace {

// The value of option `name` in `args` ("--name value" or "--name=value"), removing both when `take`.
std::optional<std::string> option_value(std::vector<std::string>& args, const std::string& name, bool take) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--" + name && i + 1 < args.size()) {
      const std::string v = args[i + 1];
      if (take) args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      return v;
    }
    if (args[i].rfind("--" + name + "=", 0) == 0) {
      const std::string v = args[i].substr(name.size() + 3);
      if (take) args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      return v;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<AutoLayout> resolve_auto_layout(const std::vector<std::string>& given, bool moe, bool vit) {
  std::vector<std::string> args = given;
  for (const std::string& a : args)
    if (a == "--help" || a == "-h" || a == "--version") return std::nullopt;
  const std::optional<std::string> layout = option_value(args, "layout", false);
  if (!layout || *layout != "auto") return std::nullopt;
  option_value(args, "layout", true);
  for (const std::string& a : args)
    for (const std::string& name : layout_options())
      TESSERA_CHECK(a != "--" + name && a.rfind("--" + name + "=", 0) != 0, "--layout auto chooses --", name,
                    " itself: leave --", name, " out, or give the whole layout without --layout auto");
  const std::optional<std::string> machine_path = option_value(args, "machine", true);
  comm::Communicator world = comm::Communicator::world();
  plan::MachineModel machine;
  if (machine_path) {
    machine = plan::read_machine_file(*machine_path);
  } else {
    if (world.rank() == 0) log::info("--layout auto: no --machine file, calibrating this machine first (a few seconds)");
    plan::CalibrationOptions quick;
    quick.min_seconds = 0.005;
    quick.collective_repeats = 3;
    quick.shared_min_seconds = 0.1;
    machine = plan::calibrate(world, quick);
  }
  SearchInput input;
  input.ranks = world.size();
  input.ranks_per_node = comm::node_local_size();
  input.trainer_args = args;
  input.moe = moe;
  input.vit = vit;
  const std::optional<std::string> limit = option_value(args, "device-memory-limit", false);
  input.device_memory = limit ? parse_bytes(*limit, "--device-memory-limit") : 0;
  if (input.device_memory <= 0) {  // the host's available memory shared by the node's ranks
    const int64_t available = available_host_bytes();
    input.device_memory = available > 0 ? available / input.ranks_per_node : int64_t{1} << 40;
  }
  const SearchResult r = search_layouts(input, machine);
  if (r.ranked.empty()) {
    std::string smallest;
    for (const std::string& a : r.smallest_args) smallest += (smallest.empty() ? "" : " ") + a;
    TESSERA_CHECK(r.smallest_peak < 0, "--layout auto: no layout of ", input.ranks, " ranks fits in ",
                  input.device_memory, " bytes per rank: the smallest plan, ", smallest, ", needs ", r.smallest_peak,
                  " bytes (--device-memory-limit, or more ranks, or a smaller model or micro-batch); rejected: ",
                  r.rejected_text());
    fail("--layout auto: no valid layout of ", input.ranks, " ranks for this model and batch (", r.enumerated,
         " enumerated); rejected: ", r.rejected_text());
  }
  const LayoutChoice& top = r.ranked.front();
  AutoLayout chosen;
  chosen.args = args;
  chosen.args.insert(chosen.args.end(), top.args.begin(), top.args.end());
  char text[200];
  std::snprintf(text, sizeof text, " (predicted %.3f ms per step, planned peak %lld bytes per rank; the fastest of %zu",
                top.time.step_s * 1e3, static_cast<long long>(top.peak()), r.ranked.size());
  chosen.summary = "--layout auto: " + top.args_text() + text + " layouts that fit in " +
                   std::to_string(input.device_memory) + " bytes, " + std::to_string(r.enumerated) + " enumerated)";
  return chosen;
}

ResolvedArgv::ResolvedArgv(int argc, char** argv, bool moe, bool vit, bool log_summary) : argc_(argc), argv_(argv) {
  const std::optional<AutoLayout> a = resolve_auto_layout(std::vector<std::string>(argv + 1, argv + argc), moe, vit);
  if (!a) return;
  args_.push_back(argv[0]);
  args_.insert(args_.end(), a->args.begin(), a->args.end());
  for (std::string& t : args_) pointers_.push_back(t.data());
  argc_ = static_cast<int>(pointers_.size());
  argv_ = pointers_.data();
  if (log_summary) log::info(a->summary);
}

}  // namespace tessera::cli
