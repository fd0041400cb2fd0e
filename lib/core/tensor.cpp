// Tensor construction, views and copies.
#include "core/tensor.h"

namespace tessera {

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (int64_t d : shape.dims()) TESSERA_CHECK(d >= 0, "negative extent in shape ", shape.str());
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_->device = device;
  t.storage_->ptr = allocate_bytes(device, t.storage_->bytes);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::host_tier_zeros(Shape shape, DType dtype) {
  for (int64_t d : shape.dims()) TESSERA_CHECK(d >= 0, "negative extent in shape ", shape.str());
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  t.storage_->host_tier = true;
  t.storage_->ptr = allocate_host_tier_bytes(t.storage_->bytes);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.zero();
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  TESSERA_CHECK(shape.numel() == numel(), "reshape of ", shape_.str(), " to ", shape.str(),
                " changes the number of elements");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int64_t first_element, Shape shape) const {
  TESSERA_CHECK(first_element >= 0 && first_element + shape.numel() <= numel(), "slice [",
                first_element, ", +", shape.numel(), ") outside a tensor of ", numel(), " elements");
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(first_element) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t first, int64_t count) const {
  TESSERA_CHECK(shape_.rank() >= 1, "rows() on a scalar");
  std::vector<int64_t> dims = shape_.dims();
  const int64_t row = dims[0] ? numel() / dims[0] : 0;
  TESSERA_CHECK(first >= 0 && first + count <= dims[0], "rows [", first, ", ", first + count,
                ") outside ", dims[0]);
  dims[0] = count;
  return slice(first * row, Shape(dims));
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  TESSERA_CHECK(src.numel() == numel() && src.dtype() == dtype_, "copy of ", src.shape().str(), " ",
                dtype_name(src.dtype()), " into ", shape_.str(), " ", dtype_name(dtype_));
  copy_bytes(raw(), device_, src.raw(), src.device(), nbytes());
}

void Tensor::zero() { zero_bytes(raw(), device_, nbytes()); }

}  // namespace tessera
