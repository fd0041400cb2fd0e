// CUDA twins of kernels/cpu/patches.cpp (a vision transformer's token plumbing): one thread per
// output element, sums over the batch or the tokens in the CPU's order, so results match the CPU
// bit for bit.
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// patches[b, py * (W/p) + px, (i * p + j) * C + c] = images[b, py * p + i, px * p + j, c]; element
// e of the patch output is element (e mod p*C) of patch row e / (p*C), as on the CPU.
__global__ void image_to_patches_kernel(float* patches, const float* images, int64_t n, int64_t height,
                                        int64_t width, int64_t channels, int64_t patch, int64_t across,
                                        int64_t down) {
  const int64_t run = patch * channels;
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t r = e / run, k = e % run;
    const int64_t i = r % patch, px = (r / patch) % across, py = (r / (patch * across)) % down;
    const int64_t b = r / (patch * across * down);
    patches[e] = images[((b * height + py * patch + i) * width + px * patch) * channels + k];
  }
}

// out[b, t, c] = (t < first ? cls[c] : proj[b, t - first, c]) + pos[t, c].
__global__ void image_tokens_forward_kernel(float* out, const float* proj, const float* cls, const float* pos,
                                            int64_t n, int64_t patches, int64_t tokens, int64_t channels) {
  const int64_t first = tokens - patches;
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t c = e % channels, bt = e / channels, b = bt / tokens, t = bt % tokens;
    const float x = t < first ? cls[c] : proj[(b * patches + t - first) * channels + c];
    out[e] = x + pos[t * channels + c];
  }
}

// dproj[b, p, c] = dout[b, p + first, c].
__global__ void image_tokens_dproj_kernel(float* dproj, const float* dout, int64_t n, int64_t patches, int64_t tokens,
                                          int64_t channels) {
  const int64_t first = tokens - patches;
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t c = e % channels, bp = e / channels, b = bp / patches, p = bp % patches;
    dproj[e] = dout[(b * tokens + p + first) * channels + c];
  }
}

// s = sum over b, in order, of dout[b, i]; dpos[i] += s; dcls[i] += s for the class token's row.
__global__ void image_tokens_dpos_kernel(float* dcls, float* dpos, const float* dout, int64_t batch, int64_t width,
                                         int64_t channels) {
  for (int64_t i = global_thread(); i < width; i += global_stride()) {
    float s = 0.0f;
    for (int64_t b = 0; b < batch; ++b) s += dout[b * width + i];
    dpos[i] += s;
    if (dcls && i < channels) dcls[i] += s;
  }
}

// pooled[b, c] = x[b, 0, c], or (sum over t in order of x[b, t, c]) / T.
__global__ void token_pool_forward_kernel(float* pooled, const float* x, int64_t batch, int64_t tokens,
                                          int64_t channels, bool mean) {
  const float count = static_cast<float>(tokens);
  for (int64_t e = global_thread(); e < batch * channels; e += global_stride()) {
    const float* xb = x + (e / channels) * tokens * channels + e % channels;
    if (!mean) {
      pooled[e] = xb[0];
      continue;
    }
    float s = 0.0f;
    for (int64_t t = 0; t < tokens; ++t) s += xb[t * channels];
    pooled[e] = s / count;
  }
}

// dx[b, t, c] = dpooled[b, c] / T (mean), or dpooled[b, c] at t = 0 and 0 elsewhere (first).
__global__ void token_pool_backward_kernel(float* dx, const float* dpooled, int64_t n, int64_t tokens,
                                           int64_t channels, bool mean) {
  const float count = static_cast<float>(tokens);
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t c = e % channels, bt = e / channels, t = bt % tokens;
    const float g = dpooled[(bt / tokens) * channels + c];
    dx[e] = mean ? g / count : (t == 0 ? g : 0.0f);
  }
}

// Enqueues a grid-stride kernel over n items (nothing when n is 0).
template <typename... Params, typename... Args>
void run_over(const char* op, void (*kernel)(Params...), int64_t n, Args... args) {
  if (n <= 0) return;
  launch(op, kernel, dim3(grid_for(n, kThreads)), dim3(kThreads), 0, args...);
}

}  // namespace

void image_to_patches(float* patches, const float* images, int64_t batch, int64_t height, int64_t width,
                      int64_t channels, int64_t patch) {
  const int64_t across = width / patch, down = height / patch, n = batch * height * width * channels;
  run_over("image_to_patches", image_to_patches_kernel, n, patches, images, n, height, width, channels, patch,
           across, down);
  finish("image_to_patches");
}

void image_tokens_forward(float* out, const float* proj, const float* cls, const float* pos, int64_t batch,
                          int64_t patches, int64_t channels) {
  const int64_t tokens = patches + (cls ? 1 : 0), n = batch * tokens * channels;
  run_over("image_tokens_forward", image_tokens_forward_kernel, n, out, proj, cls, pos, n, patches, tokens,
           channels);
  finish("image_tokens_forward");
}

void image_tokens_backward(float* dproj, float* dcls, float* dpos, const float* dout, int64_t batch,
                           int64_t patches, int64_t channels) {
  const int64_t tokens = patches + (dcls ? 1 : 0), n = batch * patches * channels;
  run_over("image_tokens_backward", image_tokens_dproj_kernel, n, dproj, dout, n, patches, tokens, channels);
  run_over("image_tokens_backward", image_tokens_dpos_kernel, tokens * channels, dcls, dpos, dout, batch,
           tokens * channels, channels);
  finish("image_tokens_backward");
}

void token_pool_forward(float* pooled, const float* x, int64_t batch, int64_t tokens, int64_t channels, bool mean) {
  run_over("token_pool_forward", token_pool_forward_kernel, batch * channels, pooled, x, batch, tokens, channels,
           mean);
  finish("token_pool_forward");
}

void token_pool_backward(float* dx, const float* dpooled, int64_t batch, int64_t tokens, int64_t channels,
                         bool mean) {
  const int64_t n = batch * tokens * channels;
  run_over("token_pool_backward", token_pool_backward_kernel, n, dx, dpooled, n, tokens, channels, mean);
  finish("token_pool_backward");
}

}  // namespace tessera::kernels::cuda
