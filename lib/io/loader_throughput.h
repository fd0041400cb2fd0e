// loader_throughput: how many images per second the augmenting loader delivers on its background
// thread (ImagePrefetcher), as training consumes it, with no training attached. Benchmarks compare
// it with a training step's consumption (vit_train --benchmark-loader).
#pragma once
#include <cstdint>

#include "io/image_loader.h"
#include "io/token_loader.h"

namespace tessera::io {

// Takes `batches` global batches from a prefetcher over `loader` and returns images per second.
double loader_images_per_second(const ImageLoader& loader, int64_t global_batch, int64_t batches);

// Takes `steps` steps of rows [first_row, first_row + count) from a token prefetcher over `loader`
// (the rows one data-parallel rank reads, streamed from the file) and returns tokens per second.
double loader_tokens_per_second(const TokenLoader& loader, int64_t first_row, int64_t count, int64_t steps);

}  // namespace tessera::io
