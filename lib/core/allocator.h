// Tracked allocation: every byte a Tensor holds goes through here, so current and peak bytes are
// known per device (reported as peak_mem_bytes in the metrics), and for the host tier apart.
// The host tier is host memory that holds what was offloaded from the compute device (optimizer
// states under --offload cpu or --offload-optim-frac): pinned (cudaMallocHost) in a CUDA build
// with a GPU, plain aligned memory otherwise. Its bytes count only in host_tier_stats(), never in
// memory_stats(Device::cpu), so that on a CPU-only build, where the compute device is the host,
// the device tier's budget logic (--device-memory-limit) is measured and tested as on a GPU.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tessera {

struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;
};

void* allocate_bytes(Device device, size_t bytes);  // 64-byte aligned on cpu; zero bytes is valid
void free_bytes(Device device, void* ptr, size_t bytes);
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);  // peak := current

// Host-tier memory: host-addressable (Device::cpu tensors), 64-byte aligned, counted apart.
void* allocate_host_tier_bytes(size_t bytes);
void free_host_tier_bytes(void* ptr, size_t bytes);
MemoryStats host_tier_stats();
void reset_host_tier_peak();

// Copies between any two devices (host<->device, device<->device, host<->host).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// `rows` rows of `width` bytes, from a row every src_pitch bytes to a row every dst_pitch bytes, both
// on `device` (cudaMemcpy2D there, ordered after the queued ops).
void copy_rows_bytes(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                     Device device);
void zero_bytes(void* dst, Device device, size_t bytes);
// The host memory a new allocation may take now: MemAvailable of /proc/meminfo (-1: unknown). What
// start-up checks compare planned bytes with, before allocating them.
int64_t available_host_bytes();
bool cuda_available();  // built with CUDA and at least one device visible
// Makes CUDA device index % (devices visible) this process's (cudaSetDevice) and returns it; a
// node's ranks pass their node-local rank, so that they spread over its GPUs (several ranks share
// one when they outnumber them). Before any device memory is allocated. Needs cuda_available().
int use_cuda_device(int index);

}  // namespace tessera
