// NcclCommunicator: NCCL bootstrap over MPI, argument checks, and each collective enqueued on the
// communicator's stream and waited for (watching NCCL's asynchronous errors and the timeout).
#include "comm/nccl_communicator.h"

#include "comm/tensor_pair_check.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "comm/mpi_runtime.h"

namespace tessera::comm {
namespace {

void nccl_check(ncclResult_t result, const std::string& what, const char* call,
                ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return;
  const char* detail = comm ? ncclGetLastError(comm) : nullptr;
  fail(what, ": ", call, " failed: ", ncclGetErrorString(result),
       detail && *detail ? std::string(" (") + detail + ")" : std::string());
}

void cuda_check(cudaError_t status, const std::string& what, const char* call) {
  if (status == cudaSuccess) return;
  fail(what, ": ", call, " failed: ", cudaGetErrorString(status));
}

// ncclGroupStart .. ncclGroupEnd as a scope: end() reports the group's failure; leaving the scope
// by an exception still closes the group.
class NcclGroup {
 public:
  explicit NcclGroup(const std::string& what, ncclComm_t comm) : what_(what), comm_(comm) {
    nccl_check(ncclGroupStart(), what_, "ncclGroupStart", comm_);
  }
  void end() {
    open_ = false;
    nccl_check(ncclGroupEnd(), what_, "ncclGroupEnd", comm_);
  }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

 private:
  const std::string& what_;
  ncclComm_t comm_;
  bool open_ = true;
};

// Reductions run on the element type; data movement runs on bytes, so every dtype moves.
ncclDataType_t reduce_type(const std::string& what, DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    default:
      break;
  }
  fail(what, ": cannot reduce ", dtype_name(t), " tensors (f32, bf16, f16 and i32 only)");
}

char* at(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}

size_t bytes_of(const Tensor& t, int64_t elements) {
  return static_cast<size_t>(elements) * dtype_size(t.dtype());
}

void check_tensor(const std::string& what, const char* label, const Tensor& t, bool exchange) {
  TESSERA_CHECK(t.defined(), what, ": ", label, " is undefined (a tensor without storage)");
  TESSERA_CHECK(!exchange || t.device() == Device::cuda, what, ": ", label, " is a ",
                device_name(t.device()),
                " tensor; NCCL moves device memory (host tensors go through Communicator)");
}

// Offsets (rank order) of per-rank counts; returns the sum.
int64_t to_offsets(const std::string& what, const char* label, std::span<const int64_t> counts,
                   int size, std::vector<int64_t>& offsets) {
  TESSERA_CHECK(static_cast<int64_t>(counts.size()) == size, what, ": ", label, " has ",
                counts.size(), " entries for a group of ", size, " ranks");
  offsets.resize(size);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    TESSERA_CHECK(counts[r] >= 0, what, ": ", label, "[", r, "] is ", counts[r]);
    offsets[r] = total;
    total += counts[r];
  }
  return total;
}

}  // namespace

NcclCommunicator::NcclCommunicator(const Communicator& group)
    : NcclCommunicator(group.mpi_comm(), group.name()) {}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, std::string name)
    : name_(std::move(name)), stats_(name_) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  const std::string what = "NcclCommunicator(" + name_ + ")";
  cuda_check(cudaGetDevice(&device_), what, "cudaGetDevice");
  if (size_ == 1) return;
  // Rank 0's unique id travels with the result of making it, so a failure there throws on every
  // rank instead of leaving the others in ncclCommInitRank.
  struct {
    ncclUniqueId id;
    int result;
  } boot{};
  if (rank_ == 0) boot.result = static_cast<int>(ncclGetUniqueId(&boot.id));
  MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, comm);
  if (boot.result != ncclSuccess) {
    fail(what, ": ncclGetUniqueId failed on rank 0: ",
         ncclGetErrorString(static_cast<ncclResult_t>(boot.result)));
  }
  try {
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what,
               "cudaStreamCreateWithFlags");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), what,
               "cudaEventCreateWithFlags");
    nccl_check(ncclCommInitRank(&nccl_, size_, boot.id, rank_), what, "ncclCommInitRank");
  } catch (...) {
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (nccl_) ncclCommDestroy(nccl_);
  if (ready_) cudaEventDestroy(ready_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::set_timeout(double seconds) {
  TESSERA_CHECK(seconds >= 0, "NcclCommunicator(", name_, "): timeout must be >= 0 s, got ",
                seconds);
  timeout_s_ = seconds;
}

void NcclCommunicator::begin_on_stream(const std::string& what) {
  TESSERA_CHECK(nccl_ != nullptr, what,
                ": the NCCL communicator was aborted after an earlier NCCL error");
  cuda_check(cudaEventRecord(ready_, cudaStreamLegacy), what, "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), what, "cudaStreamWaitEvent");
}

void NcclCommunicator::finish(const std::string& what, CommOp op, int64_t bytes,
                              const Timer& timer) {
  while (true) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess) break;
    if (state != cudaErrorNotReady) cuda_check(state, what, "cudaStreamQuery");
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(nccl_, &async), what, "ncclCommGetAsyncError", nccl_);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(nccl_);
      nccl_ = nullptr;
      fail(what, ": NCCL reported '", ncclGetErrorString(async),
           "' while waiting; the NCCL communicator was aborted");
    }
    if (timeout_s_ > 0 && timer.seconds() > timeout_s_) {
      int world_rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      std::fprintf(stderr, "error: rank %d: %s did not complete within %g s; aborting the job\n",
                   world_rank, what.c_str(), timeout_s_);
      abort_job(1);
    }
    std::this_thread::yield();
  }
  stats_.record(op, bytes, timer.millis());
}

void NcclCommunicator::check_peer(const std::string& what, const char* role, int peer) const {
  TESSERA_CHECK(peer >= 0 && peer < size_, what, ": ", role, " ", peer,
                " is not a rank of a group of ", size_);
  TESSERA_CHECK(peer != rank_, what, ": ", role, " ", peer,
                " is this rank (a rank does not message itself)");
}

// --- all-reduce, reduce-scatter ---

void NcclCommunicator::all_reduce(Tensor& t, int nccl_op, const char* op_name) {
  const std::string what = where(op_name);
  check_tensor(what, "tensor", t, size_ > 1);
  const ncclDataType_t type = reduce_type(what, t.dtype());
  if (size_ == 1) return;
  Timer timer;
  begin_on_stream(what);
  nccl_check(ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type,
                           static_cast<ncclRedOp_t>(nccl_op), nccl_, stream_),
             what, "ncclAllReduce", nccl_);
  finish(what, CommOp::all_reduce, static_cast<int64_t>(t.nbytes()), timer);
}

void NcclCommunicator::all_reduce_sum(Tensor& t) { all_reduce(t, ncclSum, "all_reduce_sum"); }
void NcclCommunicator::all_reduce_max(Tensor& t) { all_reduce(t, ncclMax, "all_reduce_max"); }

void NcclCommunicator::reduce_scatter(const Tensor& input, Tensor& output) {
  const std::string what = where("reduce_scatter");
  check_tensor(what, "input", input, size_ > 1);
  check_tensor(what, "output", output, size_ > 1);
  check_pair(what, input, output);
  const ncclDataType_t type = reduce_type(what, input.dtype());
  TESSERA_CHECK(input.numel() == size_ * output.numel(), what, ": input has ", input.numel(),
                " elements, not ", size_, " ranks x output's ", output.numel());
  if (size_ == 1) return output.copy_from(input);
  Timer timer;
  begin_on_stream(what);
  nccl_check(ncclReduceScatter(input.raw(), output.raw(), static_cast<size_t>(output.numel()), type,
                               ncclSum, nccl_, stream_),
             what, "ncclReduceScatter", nccl_);
  finish(what, CommOp::reduce_scatter, static_cast<int64_t>(input.nbytes()), timer);
}

// Uneven blocks: one ncclReduce per block, rooted at the rank that keeps it, fused in a group.
void NcclCommunicator::reduce_scatter(const Tensor& input, Tensor& output,
                                      std::span<const int64_t> counts) {
  const std::string what = where("reduce_scatter");
  check_tensor(what, "input", input, size_ > 1);
  check_tensor(what, "output", output, size_ > 1);
  check_pair(what, input, output);
  const ncclDataType_t type = reduce_type(what, input.dtype());
  std::vector<int64_t> offsets;
  const int64_t total = to_offsets(what, "counts", counts, size_, offsets);
  TESSERA_CHECK(input.numel() == total, what, ": input has ", input.numel(),
                " elements, counts sum to ", total);
  TESSERA_CHECK(output.numel() == counts[rank_], what, ": output has ", output.numel(),
                " elements, counts[", rank_, "] is ", counts[rank_]);
  if (size_ == 1) return output.copy_from(input);
  Timer timer;
  begin_on_stream(what);
  NcclGroup group(what, nccl_);
  for (int r = 0; r < size_; ++r) {
    if (counts[r] == 0) continue;
    // Only the root's receive buffer is written; the others pass their block (in place).
    char* block = at(input, offsets[r]);
    void* sum = r == rank_ ? output.raw() : block;
    nccl_check(
        ncclReduce(block, sum, static_cast<size_t>(counts[r]), type, ncclSum, r, nccl_, stream_),
        what, "ncclReduce", nccl_);
  }
  group.end();
  finish(what, CommOp::reduce_scatter, static_cast<int64_t>(input.nbytes()), timer);
}

// --- all-gather ---

void NcclCommunicator::all_gather(const Tensor& input, Tensor& output) {
  const std::string what = where("all_gather");
  check_tensor(what, "input", input, size_ > 1);
  check_tensor(what, "output", output, size_ > 1);
  check_pair(what, input, output);
  TESSERA_CHECK(output.numel() == size_ * input.numel(), what, ": output has ", output.numel(),
                " elements, not ", size_, " ranks x input's ", input.numel());
  if (size_ == 1) return output.copy_from(input);
  Timer timer;
  begin_on_stream(what);
  nccl_check(ncclAllGather(input.raw(), output.raw(), input.nbytes(), ncclUint8, nccl_, stream_),
             what, "ncclAllGather", nccl_);
  finish(what, CommOp::all_gather, static_cast<int64_t>(output.nbytes()), timer);
}

// Uneven blocks: one ncclBroadcast per block, from the rank that holds it, fused in a group.
void NcclCommunicator::all_gather(const Tensor& input, Tensor& output,
                                  std::span<const int64_t> counts) {
  const std::string what = where("all_gather");
  check_tensor(what, "input", input, size_ > 1);
  check_tensor(what, "output", output, size_ > 1);
  check_pair(what, input, output);
  std::vector<int64_t> offsets;
  const int64_t total = to_offsets(what, "counts", counts, size_, offsets);
  TESSERA_CHECK(output.numel() == total, what, ": output has ", output.numel(),
                " elements, counts sum to ", total);
  TESSERA_CHECK(input.numel() == counts[rank_], what, ": input has ", input.numel(),
                " elements, counts[", rank_, "] is ", counts[rank_]);
  if (size_ == 1) return output.copy_from(input);
  Timer timer;
  begin_on_stream(what);
  NcclGroup group(what, nccl_);
  for (int r = 0; r < size_; ++r) {
    if (counts[r] == 0) continue;
    char* block = at(output, offsets[r]);
    const void* source = r == rank_ ? input.raw() : block;  // read on the root only
    nccl_check(
        ncclBroadcast(source, block, bytes_of(output, counts[r]), ncclUint8, r, nccl_, stream_),
        what, "ncclBroadcast", nccl_);
  }
  group.end();
  finish(what, CommOp::all_gather, static_cast<int64_t>(output.nbytes()), timer);
}

// --- all-to-all: grouped sends and receives, this rank's own block copied on the stream ---

void NcclCommunicator::all_to_all(const Tensor& input, Tensor& output) {
  const std::string what = where("all_to_all");
  check_tensor(what, "input", input, size_ > 1);
  check_tensor(what, "output", output, size_ > 1);
  check_pair(what, input, output);
  TESSERA_CHECK(input.numel() == output.numel(), what, ": input has ", input.numel(),
                " elements, output has ", output.numel());
  TESSERA_CHECK(input.numel() % size_ == 0, what, ": input has ", input.numel(),
                " elements, not divisible into ", size_, " equal blocks");
  const std::vector<int64_t> counts(size_, input.numel() / size_);
  all_to_all(input, output, counts, counts);
}

void NcclCommunicator::all_to_all(const Tensor& input, Tensor& output,
                                  std::span<const int64_t> send_counts,
                                  std::span<const int64_t> recv_counts) {
  const std::string what = where("all_to_all");
  check_tensor(what, "input", input, size_ > 1);
  check_tensor(what, "output", output, size_ > 1);
  check_pair(what, input, output);
  std::vector<int64_t> send_offsets, recv_offsets;
  const int64_t sent = to_offsets(what, "send_counts", send_counts, size_, send_offsets);
  const int64_t got = to_offsets(what, "recv_counts", recv_counts, size_, recv_offsets);
  TESSERA_CHECK(input.numel() == sent, what, ": input has ", input.numel(),
                " elements, send_counts sum to ", sent);
  TESSERA_CHECK(output.numel() == got, what, ": output has ", output.numel(),
                " elements, recv_counts sum to ", got);
  TESSERA_CHECK(send_counts[rank_] == recv_counts[rank_], what, ": this rank (", rank_,
                ") sends itself ", send_counts[rank_], " elements but receives ",
                recv_counts[rank_]);
  if (size_ == 1) return output.copy_from(input);
  Timer timer;
  begin_on_stream(what);
  if (send_counts[rank_] > 0) {
    cuda_check(
        cudaMemcpyAsync(at(output, recv_offsets[rank_]), at(input, send_offsets[rank_]),
                        bytes_of(input, send_counts[rank_]), cudaMemcpyDeviceToDevice, stream_),
        what, "cudaMemcpyAsync");
  }
  NcclGroup group(what, nccl_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (send_counts[r] > 0) {
      nccl_check(ncclSend(at(input, send_offsets[r]), bytes_of(input, send_counts[r]), ncclUint8, r,
                          nccl_, stream_),
                 what, "ncclSend", nccl_);
    }
    if (recv_counts[r] > 0) {
      nccl_check(ncclRecv(at(output, recv_offsets[r]), bytes_of(output, recv_counts[r]), ncclUint8,
                          r, nccl_, stream_),
                 what, "ncclRecv", nccl_);
    }
  }
  group.end();
  finish(what, CommOp::all_to_all, static_cast<int64_t>(input.nbytes()), timer);
}

// --- broadcast, reduce, point to point ---

void NcclCommunicator::broadcast(Tensor& t, int root) {
  const std::string what = where("broadcast");
  check_tensor(what, "tensor", t, size_ > 1);
  TESSERA_CHECK(root >= 0 && root < size_, what, ": root ", root, " is not a rank of a group of ",
                size_);
  if (size_ == 1) return;
  Timer timer;
  begin_on_stream(what);
  nccl_check(ncclBroadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, nccl_, stream_), what,
             "ncclBroadcast", nccl_);
  finish(what, CommOp::broadcast, static_cast<int64_t>(t.nbytes()), timer);
}

void NcclCommunicator::reduce_sum(Tensor& t, int root) {
  const std::string what = where("reduce_sum");
  check_tensor(what, "tensor", t, size_ > 1);
  TESSERA_CHECK(root >= 0 && root < size_, what, ": root ", root, " is not a rank of a group of ",
                size_);
  const ncclDataType_t type = reduce_type(what, t.dtype());
  if (size_ == 1) return;
  Timer timer;
  begin_on_stream(what);
  // In place: sendbuff == recvbuff; NCCL writes recvbuff on the root only.
  nccl_check(ncclReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), type, ncclSum, root,
                        nccl_, stream_),
             what, "ncclReduce", nccl_);
  finish(what, CommOp::reduce, static_cast<int64_t>(t.nbytes()), timer);
}

void NcclCommunicator::send(const Tensor& t, int dest) {
  const std::string what = where("send");
  check_tensor(what, "tensor", t, true);
  check_peer(what, "destination", dest);
  Timer timer;
  begin_on_stream(what);
  NcclGroup group(what, nccl_);
  nccl_check(ncclSend(t.raw(), t.nbytes(), ncclUint8, dest, nccl_, stream_), what, "ncclSend",
             nccl_);
  group.end();
  finish(what, CommOp::send, static_cast<int64_t>(t.nbytes()), timer);
}

void NcclCommunicator::recv(Tensor& t, int source) {
  const std::string what = where("recv");
  check_tensor(what, "tensor", t, true);
  check_peer(what, "source", source);
  Timer timer;
  begin_on_stream(what);
  NcclGroup group(what, nccl_);
  nccl_check(ncclRecv(t.raw(), t.nbytes(), ncclUint8, source, nccl_, stream_), what, "ncclRecv",
             nccl_);
  group.end();
  finish(what, CommOp::recv, static_cast<int64_t>(t.nbytes()), timer);
}

// Counted as one send (with the wall time) and one receive (with none), so total_ms counts the
// exchange once.
void NcclCommunicator::send_recv(const Tensor& send, int dest, Tensor& recv, int source) {
  const std::string what = where("send_recv");
  check_tensor(what, "send tensor", send, true);
  check_tensor(what, "recv tensor", recv, true);
  check_peer(what, "destination", dest);
  check_peer(what, "source", source);
  Timer timer;
  begin_on_stream(what);
  NcclGroup group(what, nccl_);
  nccl_check(ncclSend(send.raw(), send.nbytes(), ncclUint8, dest, nccl_, stream_), what, "ncclSend",
             nccl_);
  nccl_check(ncclRecv(recv.raw(), recv.nbytes(), ncclUint8, source, nccl_, stream_), what,
             "ncclRecv", nccl_);
  group.end();
  finish(what, CommOp::send, static_cast<int64_t>(send.nbytes()), timer);
  stats_.record(CommOp::recv, static_cast<int64_t>(recv.nbytes()), 0.0);
}

}  // namespace tessera::comm
