// Shared pieces of the CUDA-twin tests (tests/cuda/test_cuda_*.cpp): the device check (no GPU is a
// failure, never a skip), device buffers copied to and from host vectors, seeded Philox data, and
// an element-wise closeness check that names the worst element.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/philox.h"

namespace tessera::cuda_test {

inline bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// First statement of every CUDA test: without a device the test fails and says why.
#define TESSERA_REQUIRE_CUDA()                                                         \
  do {                                                                                 \
    if (!::tessera::cuda_test::cuda_device_present()) GTEST_FAIL() << "no CUDA device"; \
  } while (0)

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A device array of T, owned (cudaMalloc / cudaFree).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_) check(cudaMalloc(&ptr_, count_ * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw std::runtime_error("DeviceBuffer::upload: size mismatch");
    if (count_) check(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<T> host() const {
    std::vector<T> out(count_);
    if (count_) check(cudaMemcpy(out.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }
  // Every byte set to `byte` (0xff makes every float a NaN: shows elements an op failed to write).
  void fill_bytes(int byte) {
    if (count_) check(cudaMemset(ptr_, byte, count_ * sizeof(T)), "cudaMemset");
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// n values of mean + std * N(0, 1) from Philox stream `stream`.
inline std::vector<float> normal(size_t n, uint64_t stream, float std = 1.0f, float mean = 0.0f) {
  std::vector<float> v(n);
  philox_fill_normal(v.data(), static_cast<int64_t>(n), 20240601, stream, 0, mean, std);
  return v;
}

// |got - want| <= atol + rtol * |want| everywhere (NaN never passes unless both are NaN).
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want,
                                            double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = err - (atol + rtol * std::fabs(want[i]));
    if (!(excess <= 0.0)) {
      ++bad;
      if (!(excess <= worst_excess)) {
        worst_excess = std::isnan(excess) ? INFINITY : excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " elements differ beyond atol " << atol
                                       << " + rtol " << rtol << "; worst at " << worst << ": got " << got[worst]
                                       << ", want " << want[worst];
}

// Bitwise equality of float arrays (for ops that must match the CPU exactly).
inline ::testing::AssertionResult bit_equal(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::cuda_test
