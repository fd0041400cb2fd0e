// The ranks' options and data compared: a digest each, then the entries where the digests differ.
#include "comm/rank_agreement.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "comm/string_exchange.h"
#include "core/fnv1a.h"

namespace tessera::comm {
namespace {

// One entry per line, "key\tvalue", keys sorted; tabs and newlines inside are escaped so that
// the text splits back into the same entries.
std::string serialise(std::vector<std::pair<std::string, std::string>> entries) {
  std::sort(entries.begin(), entries.end());
  auto escaped = [](const std::string& s) {
    std::string out;
    for (char c : s) out += c == '\t' ? std::string("\\t") : c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
    return out;
  };
  std::string text;
  for (const auto& [key, value] : entries) text += escaped(key) + "\t" + escaped(value) + "\n";
  return text;
}

std::map<std::string, std::string> parse(const std::string& text) {
  std::map<std::string, std::string> entries;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    entries[line.substr(0, tab)] = tab == std::string::npos ? std::string() : line.substr(tab + 1);
  }
  return entries;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string said = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) said += ", ";
    said += std::to_string(ranks[i]);
    if (j > i) said += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return said;
}

std::string rank_differences(const std::vector<std::pair<std::string, std::string>>& entries, Communicator& group) {
  const std::string text = serialise(entries);
  // The digests through MPI directly: a fixed-size exchange that no option can change, and not one
  // of the job's counted collectives (the fault hooks of collective_check.h count from training's).
  const uint64_t digest = Fnv1a().add(text).value();
  std::vector<uint64_t> digests(static_cast<size_t>(group.size()));
  TESSERA_CHECK(MPI_Allgather(&digest, 1, MPI_UINT64_T, digests.data(), 1, MPI_UINT64_T, group.mpi_comm()) ==
                    MPI_SUCCESS,
                "rank_differences: MPI_Allgather failed");
  const bool same = std::all_of(digests.begin(), digests.end(), [&](uint64_t d) { return d == digest; });
  if (same) return {};

  // Some differ: every rank's entries, and for each key the ranks holding each value.
  const std::vector<std::string> texts = all_gather_strings(text, group);
  std::vector<std::map<std::string, std::string>> by_rank;
  std::set<std::string> keys;
  for (const std::string& t : texts) {
    by_rank.push_back(parse(t));
    for (const auto& [key, value] : by_rank.back()) keys.insert(key);
  }
  std::string said;
  for (const std::string& key : keys) {
    std::map<std::string, std::vector<int>> holders;  // value -> ranks ("(not given)": absent)
    for (int r = 0; r < group.size(); ++r) {
      const auto it = by_rank[static_cast<size_t>(r)].find(key);
      holders[it == by_rank[static_cast<size_t>(r)].end() ? "(not given)" : it->second].push_back(r);
    }
    if (holders.size() == 1) continue;
    said += std::string(said.empty() ? "" : "; ") + key + ":";
    std::string sep = " ";
    for (const auto& [value, ranks] : holders) {
      said += sep + (value.empty() ? "\"\"" : value) + " on " + rank_list(ranks);
      sep = ", ";
    }
  }
  return said;
}

}  // namespace tessera::comm
