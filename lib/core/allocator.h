// Tracked allocation: every byte a Tensor holds goes through here, so current and peak bytes are
// known per device (reported as peak_mem_bytes in the metrics).
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

// Copies between any two devices (host<->device, device<->device, host<->host).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void zero_bytes(void* dst, Device device, size_t bytes);
bool cuda_available();  // built with CUDA and at least one device visible

}  // namespace tessera
