// Gradient norm and clipping factor. The norm is over the whole flat gradient buffer (padding is
// zero, so it does not count); later layers sum it over every shard of every mesh axis.
#pragma once
#include "nn/param_store.h"

namespace tessera::optim {

double grad_norm(nn::ParamStore& store);
// This rank's share of the model's squared gradient norm, from the gradients it holds: elements
// [begin, begin + grads.numel()) of the flat order. Under tensor parallelism (tp ranks) a
// parameter split over the group counts whole, a replicated one 1/tp; under expert parallelism
// (ep ranks) an expert's tensor counts whole, any other 1/ep; so that the sum over the tp and ep
// groups counts every parameter once.
double squared_norm_share(const nn::ParamStore& store, const Tensor& grads, int64_t begin, int tp, int ep = 1);
// The factor that brings the norm to max_norm when it is above (1 otherwise, and 1 when max_norm <= 0),
// with PyTorch's clip_grad_norm_ convention max_norm / (norm + 1e-6).
float clip_factor(double norm, double max_norm);

}  // namespace tessera::optim
