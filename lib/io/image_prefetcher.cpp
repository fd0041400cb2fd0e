// ImagePrefetcher: the step ring with buffers of one batch's images and labels.
#include "io/image_prefetcher.h"

#include "core/error.h"

namespace tessera::io {

namespace {

std::vector<ImageBatch> image_slots(int64_t first_step, int64_t rows, int64_t image_floats, int depth) {
  TESSERA_CHECK(depth >= 1, "image prefetcher: depth must be at least 1, got ", depth);
  TESSERA_CHECK(first_step >= 0 && rows >= 0 && image_floats >= 1, "image prefetcher: invalid batch (first step ",
                first_step, ", ", rows, " rows of ", image_floats, " floats)");
  std::vector<ImageBatch> slots(static_cast<size_t>(depth) + 1);
  for (ImageBatch& b : slots) {
    b.images.resize(static_cast<size_t>(rows * image_floats));
    b.labels.resize(static_cast<size_t>(rows));
  }
  return slots;
}

}  // namespace

ImagePrefetcher::ImagePrefetcher(FillImages fill, int64_t first_step, int64_t rows, int64_t image_floats, int depth)
    : StepPrefetcher<ImageBatch>(
          [fill = std::move(fill)](ImageBatch& b) { fill(b.step, b.images.data(), b.labels.data()); }, first_step,
          image_slots(first_step, rows, image_floats, depth)) {}

ImagePrefetcher::ImagePrefetcher(const ImageLoader& loader, int64_t first_step, int64_t first_row,
                                 int64_t count, int depth)
    : ImagePrefetcher(
          [&loader, first_row, count](int64_t step, float* images, int32_t* labels) {
            loader.train_batch(step, first_row, count, images, labels);
          },
          first_step, (loader.check_rows(first_row, count), count), loader.image_floats(), depth) {}

}  // namespace tessera::io
