// A vision transformer's token plumbing on the CPU: images cut into patches, patch projections
// assembled into token sequences (class token, positions), and a sequence pooled to one vector.
// Pure copies and in-order sums: the CUDA twins (kernels/cuda/patches.cu) match bit for bit.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace tessera::kernels::cpu {
namespace {
constexpr int64_t kParallelMin = 1 << 14;  // elements below which one thread does it all
}

// patches[b, py * (W/p) + px, (i * p + j) * C + c] = images[b, py * p + i, px * p + j, c]: each
// patch row i is p * C contiguous floats of image row py * p + i.
void image_to_patches(float* patches, const float* images, int64_t batch, int64_t height, int64_t width,
                      int64_t channels, int64_t patch) {
  const int64_t across = width / patch, down = height / patch, run = patch * channels;
  const int64_t rows = batch * down * across * patch;  // one patch row each
#pragma omp parallel for schedule(static) if (rows * run > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % patch, px = (r / patch) % across, py = (r / (patch * across)) % down;
    const int64_t b = r / (patch * across * down);
    const float* src = images + ((b * height + py * patch + i) * width + px * patch) * channels;
    std::memcpy(patches + r * run, src, static_cast<size_t>(run) * sizeof(float));
  }
}

// out[b, t] = (t < first ? cls : proj[b, t - first]) + pos[t], first = 1 with a class token, else 0.
void image_tokens_forward(float* out, const float* proj, const float* cls, const float* pos, int64_t batch,
                          int64_t patches, int64_t channels) {
  const int64_t first = cls ? 1 : 0, tokens = patches + first, n = batch * tokens;
#pragma omp parallel for schedule(static) if (n * channels > kParallelMin)
  for (int64_t bt = 0; bt < n; ++bt) {
    const int64_t b = bt / tokens, t = bt % tokens;
    const float* x = t < first ? cls : proj + (b * patches + t - first) * channels;
    const float* p = pos + t * channels;
    float* o = out + bt * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) o[c] = x[c] + p[c];
  }
}

// dproj[b, p] = dout[b, p + first]; s = sum over b (in order) of dout[b, t]; dpos[t] += s, and
// dcls += s at t = 0 when there is a class token.
void image_tokens_backward(float* dproj, float* dcls, float* dpos, const float* dout, int64_t batch,
                           int64_t patches, int64_t channels) {
  const int64_t first = dcls ? 1 : 0, tokens = patches + first, width = tokens * channels;
  const bool parallel = batch * width > kParallelMin;
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static) nowait
    for (int64_t bp = 0; bp < batch * patches; ++bp) {
      const int64_t b = bp / patches, p = bp % patches;
      std::memcpy(dproj + bp * channels, dout + (b * tokens + p + first) * channels,
                  static_cast<size_t>(channels) * sizeof(float));
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < width; ++i) {
      float s = 0.0f;
      for (int64_t b = 0; b < batch; ++b) s += dout[b * width + i];
      dpos[i] += s;
      if (i < channels && dcls) dcls[i] += s;
    }
  }
}

// pooled[b] = x[b, 0] (first) or (sum over t, in order, of x[b, t]) / T (mean).
void token_pool_forward(float* pooled, const float* x, int64_t batch, int64_t tokens, int64_t channels, bool mean) {
  const float count = static_cast<float>(tokens);
#pragma omp parallel for schedule(static) if (batch * tokens * channels > kParallelMin)
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = x + b * tokens * channels;
    float* o = pooled + b * channels;
    if (!mean) {
      std::memcpy(o, xb, static_cast<size_t>(channels) * sizeof(float));
      continue;
    }
    std::fill(o, o + channels, 0.0f);
    for (int64_t t = 0; t < tokens; ++t)
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) o[c] += xb[t * channels + c];
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) o[c] /= count;
  }
}

// dx[b, t] = dpooled[b] at t = 0, else 0 (first); dpooled[b] / T everywhere (mean). Overwrites dx.
void token_pool_backward(float* dx, const float* dpooled, int64_t batch, int64_t tokens, int64_t channels,
                         bool mean) {
  const float count = static_cast<float>(tokens);
  const int64_t n = batch * tokens;
#pragma omp parallel for schedule(static) if (n * channels > kParallelMin)
  for (int64_t bt = 0; bt < n; ++bt) {
    const int64_t t = bt % tokens;
    const float* g = dpooled + (bt / tokens) * channels;
    float* d = dx + bt * channels;
    if (mean) {
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) d[c] = g[c] / count;
    } else if (t == 0) {
      std::memcpy(d, g, static_cast<size_t>(channels) * sizeof(float));
    } else {
      std::fill(d, d + channels, 0.0f);
    }
  }
}

}  // namespace tessera::kernels::cpu
