// The compute half of the calibration: GEMM rates by class and precision, the attention kernel's
// rate, the step's other kernels per element and memory-copy bandwidth, each timed by every rank at
// once (GEMMs on operands in cache, the others on operands outside the core's private caches).
#pragma once
#include "comm/communicator.h"
#include "plan/machine_model.h"

namespace tessera::plan {

// Fills m.gemm, m.attention_flops_per_s, m.kernel_seconds_per_element, m.kernel_call_s and
// m.copy_bytes_per_s and m.operand_bytes_per_s; every measurement repeats for at least min_seconds. Collective over `world`.
void calibrate_kernels(comm::Communicator& world, MachineModel& m, double min_seconds);

}  // namespace tessera::plan
