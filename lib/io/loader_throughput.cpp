// loader_throughput: timing the prefetcher's batches.
#include "io/loader_throughput.h"

#include "core/error.h"
#include "core/timer.h"
#include "io/image_prefetcher.h"
#include "io/token_prefetcher.h"

namespace tessera::io {

double loader_images_per_second(const ImageLoader& loader, int64_t global_batch, int64_t batches) {
  TESSERA_CHECK(batches >= 1, "loader benchmark: batches must be >= 1, got ", batches);
  ImagePrefetcher prefetcher(loader, 0, 0, global_batch);
  prefetcher.next();  // the first batch: the thread's start-up, not its rate
  Timer timer;
  for (int64_t b = 1; b < batches; ++b) prefetcher.next();
  const double seconds = timer.seconds();
  return seconds > 0 ? static_cast<double>((batches - 1) * global_batch) / seconds : 0.0;
}

double loader_tokens_per_second(const TokenLoader& loader, int64_t first_row, int64_t count, int64_t steps) {
  TESSERA_CHECK(steps >= 2, "loader benchmark: steps must be >= 2, got ", steps);
  TokenPrefetcher prefetcher([&](int64_t step, int32_t* out) { loader.train_rows(step, first_row, count, out); }, 0,
                             count * loader.row_len());
  prefetcher.next();  // the first step: the thread's start-up, not its rate
  Timer timer;
  for (int64_t s = 1; s < steps; ++s) prefetcher.next();
  const double seconds = timer.seconds();
  return seconds > 0 ? static_cast<double>((steps - 1) * count * loader.row_len()) / seconds : 0.0;
}

}  // namespace tessera::io
