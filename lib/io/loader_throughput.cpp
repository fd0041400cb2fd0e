// loader_throughput: timing the prefetcher's batches.
#include "io/loader_throughput.h"

#include "core/error.h"
#include "core/timer.h"
#include "io/image_prefetcher.h"

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

}  // namespace tessera::io
