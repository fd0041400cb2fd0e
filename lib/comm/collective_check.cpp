// Collective fingerprints, the watchdog and mismatch texts, and the environment's fault hooks
// (see collective_check.h).
#include "comm/collective_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/fnv1a.h"

namespace tessera::comm {

namespace {
void copy_name(char* dst, size_t size, const char* src) {
  std::strncpy(dst, src, size - 1);
  dst[size - 1] = '\0';
}

std::string at_context(const std::string& context) {
  return context.empty() ? std::string() : " at " + context;
}
}  // namespace

CollectiveFingerprint make_fingerprint(const char* op, const char* dtype, int64_t count,
                                       std::span<const int64_t> counts, bool has_counts, int root) {
  CollectiveFingerprint fp;
  copy_name(fp.op, sizeof fp.op, op);
  copy_name(fp.dtype, sizeof fp.dtype, dtype);
  fp.count = count;
  fp.has_counts = has_counts ? 1 : 0;
  if (has_counts) {
    Fnv1a h;
    for (int64_t c : counts) h.add_value(c);
    fp.counts_hash = h.value();
  }
  fp.root = root;
  return fp;
}

bool same_collective(const CollectiveFingerprint& a, const CollectiveFingerprint& b) {
  return std::strcmp(a.op, b.op) == 0 && std::strcmp(a.dtype, b.dtype) == 0 &&
         a.count == b.count && a.counts_hash == b.counts_hash && a.has_counts == b.has_counts &&
         a.root == b.root;
}

std::string describe(const CollectiveFingerprint& fp) {
  std::string s = fp.op;
  if (std::strcmp(fp.op, "barrier") == 0) return s;
  s += " ";
  s += fp.dtype;
  if (fp.count >= 0) s += " x " + std::to_string(fp.count);
  if (fp.has_counts) {
    char hash[32];
    std::snprintf(hash, sizeof hash, "%08llx",
                  static_cast<unsigned long long>(fp.counts_hash & 0xffffffffull));
    s += std::string(" (per-rank counts, hash 0x") + hash + ")";
  }
  if (fp.root >= 0) s += " from root " + std::to_string(fp.root);
  return s;
}

std::optional<std::string> find_mismatch(std::span<const CollectiveFingerprint> fps,
                                         std::span<const int> world_ranks, const std::string& group,
                                         const std::string& context) {
  for (size_t r = 1; r < fps.size(); ++r) {
    if (same_collective(fps[0], fps[r])) continue;
    const int first = world_ranks.empty() ? 0 : world_ranks[0];
    const int other = r < world_ranks.size() ? world_ranks[r] : static_cast<int>(r);
    return "collective mismatch in group " + group + at_context(context) + ": rank " +
           std::to_string(first) + " calls " + describe(fps[0]) + ", rank " +
           std::to_string(other) + " calls " + describe(fps[r]);
  }
  return std::nullopt;
}

std::string format_peers(std::span<const int> world_ranks) {
  const size_t n = world_ranks.size();
  std::string s = "world ranks ";
  auto add = [&](size_t i) {
    if (s.back() != ' ') s += ",";
    s += std::to_string(world_ranks[i]);
  };
  if (n <= 16) {
    for (size_t i = 0; i < n; ++i) add(i);
    return s;
  }
  for (size_t i = 0; i < 8; ++i) add(i);
  s += ",...";
  for (size_t i = n - 2; i < n; ++i) add(i);
  return s + " (" + std::to_string(n) + " ranks)";
}

std::string timeout_message(int world_rank, const std::string& what, const std::string& peers,
                            double timeout_s, const std::string& context) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", timeout_s);
  return "error: rank " + std::to_string(world_rank) + ": " + what + " [peers: " + peers +
         "] did not complete within " + secs + " s" + at_context(context) + "; aborting the job";
}

int64_t& collectives_counted() {
  static int64_t counted = 0;
  return counted;
}

}  // namespace tessera::comm
