// MPI start-up and shutdown.
#include "comm/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>
#include <utility>

namespace tessera::comm {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // MPI_THREAD_MULTIPLE: ZeRO-3's overlapped gathers are moved forward by a helper thread
  // (comm/progress_thread.h); every other MPI call stays on the main thread.
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

namespace {
// This rank's index among its node's ranks, and their number (MPI_COMM_TYPE_SHARED).
std::pair<int, int> node_rank_and_size() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int rank = 0, size = 1;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return {rank, size};
}
}  // namespace

int node_local_rank() { return node_rank_and_size().first; }
int node_local_size() { return node_rank_and_size().second; }

void abort_job(int code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace tessera::comm
