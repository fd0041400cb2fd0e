// MpiRuntime: MPI_Init_thread (asking for MPI_THREAD_MULTIPLE, for comm/progress_thread.h) /
// MPI_Finalize as an RAII object owned by main(). A failure on any rank ends the whole job through
// abort_job(), so no rank waits forever for a failed peer.
#pragma once

namespace tessera::comm {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// This rank's index among the world's ranks on its node (MPI_COMM_TYPE_SHARED), in world rank
// order: which GPU of the node it takes. Collective over the world.
int node_local_rank();

// The number of the world's ranks on this node (MPI_COMM_TYPE_SHARED). Collective over the world.
int node_local_size();

// Ends every rank of the job with `code` (MPI_Abort on the world).
[[noreturn]] void abort_job(int code);

}  // namespace tessera::comm
