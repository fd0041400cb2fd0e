// The check every collective with an input and an output makes, for MPI and NCCL alike: the same
// dtype, and no overlap between the two buffers.
#pragma once
#include <string>

#include "core/tensor.h"

namespace tessera::comm {

inline void check_pair(const std::string& what, const Tensor& input, const Tensor& output) {
  TESSERA_CHECK(input.dtype() == output.dtype(), what, ": input is ", dtype_name(input.dtype()),
                ", output is ", dtype_name(output.dtype()));
  if (input.device() != output.device() || input.nbytes() == 0 || output.nbytes() == 0) return;
  const char* in = static_cast<const char*>(input.raw());
  const char* out = static_cast<const char*>(output.raw());
  TESSERA_CHECK(out + output.nbytes() <= in || in + input.nbytes() <= out, what,
                ": output overlaps input (this operation needs distinct buffers)");
}

}  // namespace tessera::comm
