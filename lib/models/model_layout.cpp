// Splitting the blocks over the pipeline's virtual stages.
#include "models/model_layout.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace tessera::models {

namespace {

std::string joined(const std::vector<int64_t>& counts) {
  std::string text;
  for (int64_t c : counts) {
    if (!text.empty()) text += ',';
    text += std::to_string(c);
  }
  return text;
}

}  // namespace

void check_stage_layers(int64_t layers, int parts, const std::vector<int64_t>& counts) {
  if (counts.empty()) return;
  TESSERA_CHECK(static_cast<int64_t>(counts.size()) == parts, "--pp-layers ", joined(counts), " names ",
                counts.size(), " stages, but the pipeline has ", parts,
                " (virtual) stages (--pp x --virtual-stages): give one block count per virtual stage");
  int64_t sum = 0;
  for (int64_t c : counts) {
    TESSERA_CHECK(c >= 1, "--pp-layers ", joined(counts), ": every stage needs at least one block");
    sum += c;
  }
  TESSERA_CHECK(sum == layers, "--pp-layers ", joined(counts), " adds up to ", sum, " blocks, but the model has --layers ",
                layers);
}

std::pair<int64_t, int64_t> stage_blocks(int64_t layers, int parts, int v, const std::vector<int64_t>& counts) {
  TESSERA_CHECK(parts >= 1 && v >= 0 && v < parts, "stage_blocks: virtual stage ", v, " of ", parts);
  check_stage_layers(layers, parts, counts);
  TESSERA_CHECK(layers >= parts, "--layers ", layers, " cannot be split over ", parts,
                " pipeline (virtual) stages: each needs at least one block (lower --pp or --virtual-stages)");
  std::vector<int64_t> count = counts;
  if (count.empty()) {
    // Preference for the extra blocks: the middle stages, then the first, then the last.
    std::vector<int> order;
    for (int s = 1; s + 1 < parts; ++s) order.push_back(s);
    order.push_back(0);
    if (parts > 1) order.push_back(parts - 1);
    count.assign(parts, layers / parts);
    for (int64_t i = 0; i < layers % parts; ++i) ++count[order[i]];
  }
  int64_t first = 0;
  for (int s = 0; s < v; ++s) first += count[s];
  return {first, first + count[v]};
}

}  // namespace tessera::models
