// Deterministic column sums of a [rows, cols] matrix given by a functor value(row, col), added
// into dst[cols] (+=): bias and layernorm weight gradients, without atomics.
#pragma once
#include <cstdint>

#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {

constexpr int kColumnTile = 32, kColumnLanes = 8;

// partial[chunk, col] = sum of value(r, col) over the chunk's rows: blocks of 32 columns x 8 row
// lanes, each lane summing every 8th row, then the 8 lanes in order.
template <typename Value>
__global__ void column_partials(float* partial, Value value, int64_t rows, int64_t cols,
                                int64_t rows_per_chunk) {
  __shared__ float lane_sums[kColumnLanes][kColumnTile + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float acc = 0.0f;
  if (col < cols)
    for (int64_t r = first + threadIdx.y; r < last; r += kColumnLanes) acc += value(r, col);
  lane_sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float sum = 0.0f;
    for (int y = 0; y < kColumnLanes; ++y) sum += lane_sums[y][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + col] = sum;
  }
}

// dst[col] += the chunks' partial sums, added in chunk order.
static __global__ void column_accumulate(float* dst, const float* partial, int64_t chunks, int64_t cols) {
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < cols;
       col += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) sum += partial[c * cols + col];
    dst[col] += sum;
  }
}

template <typename Value>
void accumulate_column_sums(const char* op, float* dst, Value value, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  constexpr int64_t kMaxChunks = 65535;  // grid.y
  int64_t rows_per_chunk = 256;
  if ((rows + rows_per_chunk - 1) / rows_per_chunk > kMaxChunks) rows_per_chunk = (rows + kMaxChunks - 1) / kMaxChunks;
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  Scratch partial(static_cast<size_t>(chunks * cols) * sizeof(float));
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile), static_cast<unsigned>(chunks));
  launch(op, column_partials<Value>, grid, dim3(kColumnTile, kColumnLanes), 0, partial.as<float>(), value, rows,
         cols, rows_per_chunk);
  launch(op, column_accumulate, dim3(grid_for(cols, 256)), dim3(256), 0, dst, partial.as<const float>(), chunks,
         cols);
}

}  // namespace tessera::kernels::cuda
