// Splitting the blocks over the pipeline's virtual stages.
#include "models/model_layout.h"

#include <vector>

#include "core/error.h"

namespace tessera::models {

std::pair<int64_t, int64_t> stage_blocks(int64_t layers, int parts, int v) {
  TESSERA_CHECK(parts >= 1 && v >= 0 && v < parts, "stage_blocks: virtual stage ", v, " of ", parts);
  TESSERA_CHECK(layers >= parts, "--layers ", layers, " cannot be split over ", parts,
                " pipeline (virtual) stages: each needs at least one block (lower --pp or --virtual-stages)");
  // Preference for the extra blocks: the middle stages, then the first, then the last.
  std::vector<int> order;
  for (int s = 1; s + 1 < parts; ++s) order.push_back(s);
  order.push_back(0);
  if (parts > 1) order.push_back(parts - 1);
  std::vector<int64_t> count(parts, layers / parts);
  for (int64_t i = 0; i < layers % parts; ++i) ++count[order[i]];
  int64_t first = 0;
  for (int s = 0; s < v; ++s) first += count[s];
  return {first, first + count[v]};
}

}  // namespace tessera::models
