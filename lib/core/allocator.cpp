// Host allocations (64-byte aligned, on huge pages from 2 MiB) and, when built with CUDA, device
// allocations, counted per device.
#include "core/allocator.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <new>
#include <thread>

#include "core/error.h"
#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera {
namespace {

struct Counters {
  std::atomic<int64_t> current{0}, peak{0}, allocations{0};
};
Counters g_counters[2];  // process-wide by nature, like the device's own memory
Counters g_host_tier;

void count(Counters& c, int64_t delta) {
  const int64_t now = c.current.fetch_add(delta) + delta;
  if (delta > 0) {
    c.allocations.fetch_add(1);
    int64_t peak = c.peak.load();
    while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {}
  }
}

// Host memory, 64-byte aligned. Blocks of 2 MiB and more start on a 2 MiB boundary and ask the
// kernel for transparent huge pages over their whole 2 MiB pages: the weights, gradients and
// optimizer state then cost a TLB entry per 2 MiB instead of per 4 KiB. On the benchmark machine
// (THP "madvise") this took GPT-2 124M's optimizer pass from 115 to 96 ms per step. Where THP is
// off the advice is ignored; memory use is unchanged (the padding before an aligned block is
// address space, never touched).
void* host_allocate(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  void* ptr = nullptr;
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  if (posix_memalign(&ptr, alignment, bytes) != 0) return nullptr;
  if (bytes >= kHugePage) madvise(ptr, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return ptr;
}

#ifdef TESSERA_HAVE_CUDA
void cuda_check(cudaError_t status, const char* what) {
  TESSERA_CHECK(status == cudaSuccess, "CUDA ", what, " failed: ", cudaGetErrorString(status));
}

// cudaMalloc; when the device is full, once more after handing the stream-ordered pool's free
// memory back to the driver (the kernels' scratch pool keeps what it frees: kernels/cuda/cuda_check.cpp).
cudaError_t device_malloc(void** ptr, size_t bytes) {
  const cudaError_t status = cudaMalloc(ptr, bytes);
  if (status != cudaErrorMemoryAllocation) return status;
  (void)cudaGetLastError();  // the failed call's error is read here, not by a later op's check
  int device = 0;
  cudaMemPool_t pool = nullptr;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess)
    return status;
  if (const cudaError_t sync = cudaDeviceSynchronize(); sync != cudaSuccess) return sync;  // an earlier fault
  if (cudaMemPoolTrimTo(pool, 0) != cudaSuccess) return status;
  const cudaError_t retry = cudaMalloc(ptr, bytes);
  if (retry != cudaSuccess) (void)cudaGetLastError();
  return retry;
}
#endif

}  // namespace

void* allocate_bytes(Device device, size_t bytes) {
  void* ptr = nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (device == Device::cpu) {
    ptr = rounded ? host_allocate(rounded) : nullptr;
    TESSERA_CHECK(ptr || !rounded, "out of host memory allocating ", bytes, " bytes");
  } else {
#ifdef TESSERA_HAVE_CUDA
    if (rounded) cuda_check(device_malloc(&ptr, rounded), "cudaMalloc");
#else
    fail("this build of tessera has no CUDA support (reconfigure with -DTESSERA_CUDA=ON on a machine with nvcc)");
#endif
  }
  count(g_counters[static_cast<int>(device)], static_cast<int64_t>(bytes));
  return ptr;
}

void free_bytes(Device device, void* ptr, size_t bytes) {
  if (device == Device::cpu) {
    std::free(ptr);
  } else {
#ifdef TESSERA_HAVE_CUDA
    // CUDA ops are asynchronous: kernels queued on the legacy stream may still use this memory.
    // cudaFree would wait in practice, but only "may" by its contract: wait explicitly.
    if (ptr) {
      (void)cudaStreamSynchronize(cudaStreamLegacy);
      cudaFree(ptr);
    }
#endif
  }
  count(g_counters[static_cast<int>(device)], -static_cast<int64_t>(bytes));
}

MemoryStats memory_stats(Device device) {
  const Counters& c = g_counters[static_cast<int>(device)];
  return {c.current.load(), c.peak.load(), c.allocations.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = g_counters[static_cast<int>(device)];
  c.peak = c.current.load();
}

void* allocate_host_tier_bytes(size_t bytes) {
  void* ptr = nullptr;
  const size_t rounded = (bytes + 63) / 64 * 64;
#ifdef TESSERA_HAVE_CUDA
  if (rounded && cuda_available()) {  // pinned: copies to and from the GPU run at full speed
    cuda_check(cudaMallocHost(&ptr, rounded), "cudaMallocHost");
    count(g_host_tier, static_cast<int64_t>(bytes));
    return ptr;
  }
#endif
  ptr = rounded ? host_allocate(rounded) : nullptr;
  TESSERA_CHECK(ptr || !rounded, "out of host memory allocating ", bytes, " bytes of the host tier");
  count(g_host_tier, static_cast<int64_t>(bytes));
  return ptr;
}

void free_host_tier_bytes(void* ptr, size_t bytes) {
#ifdef TESSERA_HAVE_CUDA
  if (ptr && cuda_available()) {
    cudaFreeHost(ptr);
    count(g_host_tier, -static_cast<int64_t>(bytes));
    return;
  }
#endif
  std::free(ptr);
  count(g_host_tier, -static_cast<int64_t>(bytes));
}

MemoryStats host_tier_stats() { return {g_host_tier.current.load(), g_host_tier.peak.load(), g_host_tier.allocations.load()}; }

void reset_host_tier_peak() { g_host_tier.peak = g_host_tier.current.load(); }

namespace {

// The thread that initialised the program: the training thread, whose OpenMP threads the kernels
// use (loader, I/O and watchdog threads must not start thread teams of their own).
const std::thread::id g_main_thread = std::this_thread::get_id();

// Runs fn(offset, bytes) over [0, bytes) split among the OpenMP threads when the range is large
// (one thread does not reach the memory bandwidth: zeroing 0.5 GB took 50 ms on one thread of the
// benchmark machine, 27 on two), whole on the calling thread otherwise.
template <typename Fn>
void on_host_threads(size_t bytes, Fn fn) {
  constexpr size_t kParallelBytes = size_t{1} << 22;
  constexpr size_t kAlign = 4096;
  if (bytes < kParallelBytes || omp_in_parallel() || omp_get_max_threads() == 1 ||
      std::this_thread::get_id() != g_main_thread)
    return fn(0, bytes);
#pragma omp parallel
  {
    const size_t parts = static_cast<size_t>(omp_get_num_threads());
    const size_t per = (bytes / parts + kAlign - 1) / kAlign * kAlign;
    const size_t at = std::min(bytes, per * static_cast<size_t>(omp_get_thread_num()));
    const size_t n = std::min(bytes - at, per);
    if (n > 0) fn(at, n);
  }
}

}  // namespace

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    on_host_threads(bytes, [&](size_t at, size_t n) {
      std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, n);
    });
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
#else
  fail("copy to or from a cuda tensor in a build without CUDA");
#endif
}

void copy_rows_bytes(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                     Device device) {
  if (width == 0 || rows == 0) return;
  if (device == Device::cpu) {
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    const int64_t n = static_cast<int64_t>(rows);
#pragma omp parallel for schedule(static) if (width * rows > (size_t{1} << 18))
    for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * dst_pitch, s + i * src_pitch, width);
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  cuda_check(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice), "cudaMemcpy2D");
#else
  fail("a row copy on a cuda tensor in a build without CUDA");
#endif
}

void zero_bytes(void* dst, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    on_host_threads(bytes, [&](size_t at, size_t n) { std::memset(static_cast<char*>(dst) + at, 0, n); });
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  cuda_check(cudaMemset(dst, 0, bytes), "cudaMemset");
#endif
}

int use_cuda_device(int index) {
#ifdef TESSERA_HAVE_CUDA
  int n = 0;
  cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  TESSERA_CHECK(n > 0, "no CUDA device is visible");
  const int device = index % n;
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  return device;
#else
  fail("use_cuda_device(", index, "): a build without CUDA");
#endif
}

int64_t available_host_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

bool cuda_available() {
#ifdef TESSERA_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}

}  // namespace tessera
