// Communicator: one MPI group (the world, or a mesh axis's sub-communicator) with the collectives
// tessera uses on host tensors, each counted in CommStats (calls and payload bytes).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tessera::comm {

struct CommStats {
  int64_t calls = 0;
  int64_t bytes = 0;
};

class Communicator {
 public:
  static Communicator world();
  Communicator(MPI_Comm comm, std::string name);  // does not take ownership

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  void all_reduce_sum(Tensor& t);         // f32 in place, elementwise sum over the group
  double all_reduce_sum(double value);
  int64_t all_reduce_max(int64_t value);
  void broadcast(Tensor& t, int root);
  void barrier();
  const CommStats& stats() const { return stats_; }

 private:
  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  CommStats stats_;
};

}  // namespace tessera::comm
