// Communicator over MPI for host tensors.
#include "comm/communicator.h"

#include <climits>

namespace tessera::comm {
namespace {
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::i32: return MPI_INT32_T;
    case DType::u16: case DType::bf16: case DType::f16: return MPI_UINT16_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}
}  // namespace

Communicator Communicator::world() { return Communicator(MPI_COMM_WORLD, "world"); }

Communicator::Communicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

void Communicator::all_reduce_sum(Tensor& t) {
  if (size_ == 1) return;  // nothing to exchange, nothing counted
  TESSERA_CHECK(t.dtype() == DType::f32 && t.device() == Device::cpu, "all_reduce_sum(", name_,
                "): host f32 tensors only (device tensors need the NCCL communicator)");
  TESSERA_CHECK(t.numel() <= INT_MAX, "all_reduce_sum(", name_, "): tensor too large for one call");
  ++stats_.calls;
  stats_.bytes += static_cast<int64_t>(t.nbytes());
  MPI_Allreduce(MPI_IN_PLACE, t.raw(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, comm_);
}

double Communicator::all_reduce_sum(double value) {
  if (size_ == 1) return value;
  ++stats_.calls;
  stats_.bytes += sizeof(double);
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, comm_);
  return value;
}

int64_t Communicator::all_reduce_max(int64_t value) {
  if (size_ == 1) return value;
  ++stats_.calls;
  stats_.bytes += sizeof(int64_t);
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, comm_);
  return value;
}

void Communicator::broadcast(Tensor& t, int root) {
  if (size_ == 1) return;
  TESSERA_CHECK(t.device() == Device::cpu, "broadcast(", name_, "): host tensors only");
  ++stats_.calls;
  stats_.bytes += static_cast<int64_t>(t.nbytes());
  MPI_Bcast(t.raw(), static_cast<int>(t.numel()), mpi_type(t.dtype()), root, comm_);
}

void Communicator::barrier() {
  if (size_ > 1) MPI_Barrier(comm_);
}

}  // namespace tessera::comm
