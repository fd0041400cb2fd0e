// The per-op profile's table (op_profile.h).
#include "kernels/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

namespace tessera::kernels {

std::string format_op_profile(const OpProfile& profile) {
  // Merged by name text and device: the same literal may sit at several addresses.
  std::map<std::pair<std::string_view, std::string_view>, OpSum> rows;
  OpSum total;
  for (const auto& [device, sums] : {std::pair{"cpu", &profile.cpu}, std::pair{"cuda", &profile.cuda}}) {
    for (const auto& [name, sum] : *sums) {
      rows[{name, device}].merge(sum);
      total.merge(sum);
    }
  }
  std::vector<std::pair<std::pair<std::string_view, std::string_view>, OpSum>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });

  int width = 5;
  for (const auto& row : sorted) width = std::max(width, static_cast<int>(row.first.first.size()));
  std::string out = "op profile (TESSERA_OP_PROFILE=1): " + std::to_string(profile.steps) +
                    " steps; cpu ops in host time, cuda ops in device time (CUDA events); [kind]: timers without an op name\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-*s  %-6s %9s %12s %10s %7s\n", width, "op", "device", "calls", "total ms",
                "ms/step", "share");
  out += line;
  auto add_row = [&](std::string_view name, std::string_view device, const OpSum& sum) {
    char per_step[32] = "-";
    if (profile.steps > 0) std::snprintf(per_step, sizeof per_step, "%.3f", sum.ms / static_cast<double>(profile.steps));
    std::snprintf(line, sizeof line, "  %-*.*s  %-6.*s %9lld %12.3f %10s %6.1f%%\n", width, static_cast<int>(name.size()),
                  name.data(), static_cast<int>(device.size()), device.data(), static_cast<long long>(sum.calls),
                  sum.ms, per_step, total.ms > 0.0 ? 100.0 * sum.ms / total.ms : 0.0);
    out += line;
  };
  for (const auto& [key, sum] : sorted) add_row(key.first, key.second, sum);
  add_row("total", "", total);
  return out;
}

}  // namespace tessera::kernels
