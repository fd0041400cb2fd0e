// TokenPrefetcher: the step ring with buffers of one step's tokens.
#include "io/token_prefetcher.h"

#include "core/error.h"

namespace tessera::io {

namespace {

std::vector<TokenBatch> token_slots(int64_t first_step, int64_t tokens_per_step, int depth, bool with_mask = false,
                                    int64_t segments_per_step = 0) {
  TESSERA_CHECK(depth >= 1, "token prefetcher: depth must be at least 1, got ", depth);
  TESSERA_CHECK(first_step >= 0 && tokens_per_step >= 0 && segments_per_step >= 0, "token prefetcher: invalid first step ",
                first_step, ", tokens per step ", tokens_per_step, " or segments per step ", segments_per_step);
  std::vector<TokenBatch> slots(static_cast<size_t>(depth) + 1);
  for (TokenBatch& b : slots) {
    b.tokens.resize(static_cast<size_t>(tokens_per_step));
    if (with_mask) b.mask.resize(static_cast<size_t>(tokens_per_step));
    b.segments.resize(static_cast<size_t>(segments_per_step));
  }
  return slots;
}

}  // namespace

TokenPrefetcher::TokenPrefetcher(FillTokens fill, int64_t first_step, int64_t tokens_per_step, int depth)
    : StepPrefetcher<TokenBatch>([fill = std::move(fill)](TokenBatch& b) { fill(b.step, b.tokens.data()); }, first_step,
                                 token_slots(first_step, tokens_per_step, depth)) {}

TokenPrefetcher::TokenPrefetcher(FillBatch fill, int64_t first_step, int64_t tokens_per_step, bool with_mask,
                                 int64_t segments_per_step, int depth)
    : StepPrefetcher<TokenBatch>(std::move(fill), first_step,
                                 token_slots(first_step, tokens_per_step, depth, with_mask, segments_per_step)) {}

}  // namespace tessera::io
