// TensorParallel1D: the region edges' collectives.
#include "parallel/tensor_parallel.h"

namespace tessera::parallel {

const Tensor& TensorParallel1D::enter(const Tensor& x, Tensor& whole) const {
  if (!splits_rows()) return x;
  group_.all_gather(x, whole);
  return whole;
}

void TensorParallel1D::enter_backward(Tensor& dx, Tensor& whole_dx) const {
  if (splits_rows()) {
    group_.reduce_scatter(whole_dx, dx);
    return;
  }
  if (&dx != &whole_dx) dx.copy_from(whole_dx);
  all_reduce(dx);
}

void TensorParallel1D::exit(Tensor& y, Tensor& whole_y) const {
  if (splits_rows()) {
    group_.reduce_scatter(whole_y, y);
    return;
  }
  if (&y != &whole_y) y.copy_from(whole_y);
  all_reduce(y);
}

const Tensor& TensorParallel1D::exit_backward(const Tensor& dy, Tensor& whole) const {
  if (!splits_rows()) return dy;
  group_.all_gather(dy, whole);
  return whole;
}

void TensorParallel1D::all_reduce(Tensor& t) const {
  if (group_.size() > 1) group_.all_reduce_sum(t);
}

void TensorParallel1D::all_reduce_max(Tensor& t) const {
  if (group_.size() > 1) group_.all_reduce_max(t);
}

}  // namespace tessera::parallel
