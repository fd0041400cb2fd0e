// TokenPrefetcher: reads the token rows of the next steps on one background thread into a ring of
// buffers allocated once (depth + 1 steps), so a step finds its rows ready; a read error (a token
// outside the vocabulary, a short file) reaches the consumer at the step that needed the rows.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "io/step_prefetcher.h"

namespace tessera::io {

// One step's rows for this rank (whatever rows the fill function writes), and the step they are of.
// With a loss mask: the rows' mask values and the targets that count in the step's global batch.
// With --document-mask: the rows' segments (io/token_loader.h train_segments).
struct TokenBatch {
  int64_t step = -1;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // as long as tokens, or empty (no mask)
  int64_t mask_count = 0;
  std::vector<int32_t> segments;  // seq_len a row, or empty (no document mask)
};

class TokenPrefetcher : public StepPrefetcher<TokenBatch> {
 public:
  // fill(step, out) writes one step's `tokens_per_step` tokens. Steps first_step, first_step + 1,
  // ... are made up to `depth` (>= 1) ahead of the one handed out.
  using FillTokens = std::function<void(int64_t step, int32_t* out)>;
  TokenPrefetcher(FillTokens fill, int64_t first_step, int64_t tokens_per_step, int depth = 3);
  // fill(batch) writes step batch.step's tokens (tokens_per_step of them; 0: the rank reads none),
  // with_mask its mask and mask_count, and segments_per_step segments.
  using FillBatch = std::function<void(TokenBatch&)>;
  TokenPrefetcher(FillBatch fill, int64_t first_step, int64_t tokens_per_step, bool with_mask,
                  int64_t segments_per_step = 0, int depth = 3);
};

}  // namespace tessera::io
