// TiedWeights: the mirror's gradient to the first stage, the updated table back.
#include "parallel/tied_weights.h"

#include <algorithm>

#include "kernels/ops.h"

namespace tessera::parallel {
namespace {
constexpr int kGradTag = 7001, kValueTag = 7002;
}

TiedWeights::TiedWeights(nn::ParamStore* store, ParamUnits* units, size_t unit, nn::ParamStore* mirror, int param,
                         comm::Communicator& pp, comm::Communicator& data)
    : store_(store), units_(units), unit_(unit), mirror_(mirror), param_(param), pp_(pp), data_(data) {
  TESSERA_CHECK(!(store && mirror), "TiedWeights: a stage holds the parameter or its mirror, not both");
  const nn::ParamStore* s = store ? store : mirror;
  if (s) buffer_ = Tensor::empty(s->spec(param).local_shape);
}

void TiedWeights::zero_mirror_grad() {
  if (last()) mirror_->grad(param_).zero();
}

void TiedWeights::add_mirror_grads(Tensor held, int64_t begin) {
  if (last()) {
    buffer_.copy_from(mirror_->grad(param_));
    data_.all_reduce_sum(buffer_);
    pp_.send(buffer_, 0, kGradTag);
  } else if (first()) {
    pp_.recv(buffer_, pp_.size() - 1, kGradTag);
    // The part of the parameter inside the held range.
    const nn::ParamSpec& s = store_->spec(param_);
    const int64_t lo = std::max(s.offset, begin);
    const int64_t hi = std::min(s.offset + s.local_shape.numel(), begin + held.numel());
    if (lo >= hi) return;
    Tensor target = held.slice(lo - begin, {hi - lo});
    Tensor add = buffer_.reshape({buffer_.numel()}).slice(lo - s.offset, {hi - lo});
    if (add.device() != held.device()) add = add.to(held.device());  // a copy only across devices
    ops::add_inplace(target, add);
  }
}

void TiedWeights::copy_to_mirror() {
  if (first()) {
    units_->gather(unit_, false);  // ZeRO-3: the whole table (no-op otherwise)
    buffer_.copy_from(store_->value(param_));
    units_->release(unit_);
    pp_.send(buffer_, pp_.size() - 1, kValueTag);
  } else if (last()) {
    pp_.recv(buffer_, 0, kValueTag);
    mirror_->value(param_).copy_from(buffer_);
    mirror_->values_written();
  }
}

}  // namespace tessera::parallel
