// TensorLayout: how a model's layers are split over the tensor-parallel group, as the layers see
// it: which slice of a split dimension this rank holds, and the communication at the edges of a
// tensor-parallel region (a column-split layer ... a row-split layer: an attention or MLP branch,
// the vocab-parallel embedding and head). The base class is the one-rank layout (whole tensors,
// no communication); lib/parallel implements the parallel modes, so the layers are written once.
//
// A region is entered with the token rows this rank holds and left with them; inside, every rank
// works on all N rows. Whether a rank holds all rows outside regions (1D) or a 1/tp share of them
// (sequence-split, Megatron's sequence parallelism) is the layout's business:
//                      enter (forward / backward)          exit (forward / backward)
//   1D:                identity / all-reduce dx            all-reduce y / identity
//   sequence-split:    all-gather x / reduce-scatter dx    reduce-scatter y / all-gather dy
#pragma once
#include "core/tensor.h"
#include "nn/param_store.h"

namespace tessera::nn {

// All-row workspace of a region's edges, shared by the regions of a model (undefined, and unused,
// when the layout does not split rows): the gathered input, and the whole output or gradient.
struct RegionWorkspace {
  Tensor in, out;
};

class TensorLayout {
 public:
  virtual ~TensorLayout() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // This rank's slice of dimension `dim` (extent, in `groups` equal blocks, each divisible by
  // size()); `what` names the dimension in the error when it does not divide.
  Shard split(int dim, int64_t extent, int64_t groups, const char* what) const;

  // Rows this rank holds outside regions, of n token rows.
  virtual bool splits_rows() const { return false; }
  int64_t local_rows(int64_t n) const;

  // Region edges. `whole` is [N, ...] workspace (it may be the rows tensor itself when the layout
  // does not split rows). enter returns the tensor the region reads: x, or whole filled from x.
  virtual const Tensor& enter(const Tensor& x, Tensor& whole) const { (void)whole; return x; }
  // dx (this rank's rows) from the region's partial input gradient whole_dx (all rows).
  virtual void enter_backward(Tensor& dx, Tensor& whole_dx) const { if (&dx != &whole_dx) dx.copy_from(whole_dx); }
  // y (this rank's rows) from the region's partial output whole_y (all rows).
  virtual void exit(Tensor& y, Tensor& whole_y) const { if (&y != &whole_y) y.copy_from(whole_y); }
  // The region's output gradient over all rows, from dy (this rank's rows): dy, or whole from dy.
  virtual const Tensor& exit_backward(const Tensor& dy, Tensor& whole) const { (void)whole; return dy; }
  // Where a region writes its whole output (or input gradient) before exit (enter_backward): the
  // workspace when rows are split, else the rows tensor itself.
  Tensor& whole(Tensor& rows, RegionWorkspace& w) const { return splits_rows() ? w.out : rows; }
  // The workspace for regions of n rows and `channels` features.
  RegionWorkspace workspace(int64_t n, int64_t channels, Device device) const;

  // Sums over the group, in place (the vocab-parallel loss's row statistics; gradients of
  // parameters that see only this rank's rows).
  virtual void all_reduce(Tensor& t) const { (void)t; }
  virtual void all_reduce_max(Tensor& t) const { (void)t; }

  static const TensorLayout& single();  // the one-rank layout
};

}  // namespace tessera::nn
