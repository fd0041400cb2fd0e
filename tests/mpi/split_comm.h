// SplitComm: an MPI sub-communicator of the world (MPI_Comm_split), freed at the end of the scope;
// shared by the MPI tests that build groups of their own.
#pragma once
#include <mpi.h>

class SplitComm {
 public:
  SplitComm(int color, int key) { MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm_); }
  ~SplitComm() { MPI_Comm_free(&comm_); }
  SplitComm(const SplitComm&) = delete;
  SplitComm& operator=(const SplitComm&) = delete;
  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};
