// Tensor: a contiguous, typed block of memory on one device, with a shape. Copies and views share
// the storage (cheap); clone() copies the data. Storage comes from the tracked allocator.
#pragma once
#include <memory>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace tessera {

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu);
  // Zeros on the host tier (core/allocator.h): a cpu tensor whose bytes count in host_tier_stats().
  static Tensor host_tier_zeros(Shape shape, DType dtype = DType::f32);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() const { return static_cast<char*>(storage_ ? storage_->ptr : nullptr) + offset_; }
  template <typename T>
  T* data() const {
    TESSERA_CHECK(dtype_ == dtype_of<T>(), "tensor holds ", dtype_name(dtype_), ", accessed as ",
                  dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }
  // bf16/f16 tensors are read as their raw 16-bit patterns.
  uint16_t* bits16() const {
    TESSERA_CHECK(dtype_size(dtype_) == 2, "bits16() on a ", dtype_name(dtype_), " tensor");
    return static_cast<uint16_t*>(raw());
  }

  // Views sharing storage: the same elements under another shape, or a contiguous sub-range.
  Tensor reshape(Shape shape) const;
  Tensor slice(int64_t first_element, Shape shape) const;
  Tensor rows(int64_t first, int64_t count) const;  // a range of the outermost dimension

  Tensor clone() const;
  Tensor to(Device device) const;
  void copy_from(const Tensor& src);  // same numel and dtype, any devices
  void zero();

 private:
  struct Storage {
    void* ptr = nullptr;
    size_t bytes = 0;
    Device device = Device::cpu;
    bool host_tier = false;
    ~Storage() { host_tier ? free_host_tier_bytes(ptr, bytes) : free_bytes(device, ptr, bytes); }
  };
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

}  // namespace tessera
