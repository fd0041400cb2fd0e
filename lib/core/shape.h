// Shape: the extents of a contiguous tensor, outermost first.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tessera {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank() : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  std::string str() const {
    std::string s = "[";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace tessera
