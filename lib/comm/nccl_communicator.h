// NcclCommunicator: one group's collectives and messages on DEVICE tensors over NCCL, bootstrapped
// over the group's MPI communicator, on a CUDA stream of its own. Built only with CUDA and NCCL.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>

#include "comm/comm_stats.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "core/timer.h"

struct ncclComm;     // nccl.h's ncclComm_t is ncclComm*
struct CUstream_st;  // cuda_runtime.h's cudaStream_t is CUstream_st*
struct CUevent_st;   // and cudaEvent_t is CUevent_st*

namespace tessera::comm {

// Tensors here are cuda tensors on the current device. Reductions take f32, bf16, f16 and i32;
// data movement takes every dtype. Each call is blocking as the caller sees it: it waits on the
// legacy default stream (where tessera's kernels run), enqueues on this communicator's stream and
// returns once that stream has finished, so stats hold start-to-completion wall time (which
// includes the kernels still queued before the call: tessera's CUDA ops are asynchronous). Arguments are
// checked on every rank before any NCCL call and failures throw tessera::Error naming the operation
// and group ("all_gather(tp): ..."); an NCCL or CUDA failure names the call ("ncclAllReduce failed:
// ..."). While waiting, an asynchronous NCCL error aborts the NCCL communicator and throws; a
// timeout (set_timeout) aborts the job. A group of one rank creates no NCCL communicator and makes
// no NCCL call (copies where input and output differ). The counts follow Communicator's, without
// its INT_MAX limit (NCCL counts are size_t).
class NcclCommunicator {
 public:
  // Collective over `comm`: rank 0 makes the NCCL unique id, MPI_Bcast shares it, every rank calls
  // ncclCommInitRank. Select each rank's device (cudaSetDevice) before; it stays this one's device.
  NcclCommunicator(MPI_Comm comm, std::string name);
  explicit NcclCommunicator(const Communicator& group);  // the same group and name
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  int device() const { return device_; }
  CUstream_st* stream() const { return stream_; }  // a cudaStream_t

  void set_timeout(double seconds);  // 0 (the default) waits forever
  double timeout() const { return timeout_s_; }

  void all_reduce_sum(Tensor& t);  // in place
  void all_reduce_max(Tensor& t);
  void reduce_scatter(const Tensor& input, Tensor& output);  // sum; equal blocks
  void reduce_scatter(const Tensor& input, Tensor& output, std::span<const int64_t> counts);
  void all_gather(const Tensor& input, Tensor& output);
  void all_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts);
  void all_to_all(const Tensor& input, Tensor& output);
  void all_to_all(const Tensor& input, Tensor& output, std::span<const int64_t> send_counts,
                  std::span<const int64_t> recv_counts);
  void broadcast(Tensor& t, int root);
  void reduce_sum(Tensor& t, int root);  // sum onto root's t, in place; others' t unchanged
  // Point to point (NCCL has no tags: messages between two ranks match in order). A lone send or
  // recv completes only once its peer posts the other side; for exchanges where both ranks send,
  // use send_recv, which posts both in one NCCL group.
  void send(const Tensor& t, int dest);
  void recv(Tensor& t, int source);
  void send_recv(const Tensor& send, int dest, Tensor& recv, int source);

  const CommStats& stats() const { return stats_; }
  CommStats& stats() { return stats_; }

 private:
  std::string where(const char* op) const { return std::string(op) + "(" + name_ + ")"; }
  void begin_on_stream(const std::string& what);  // order after the default stream's work
  // Waits for this stream, watching for NCCL errors and the timeout; records the op in stats.
  void finish(const std::string& what, CommOp op, int64_t bytes, const Timer& timer);
  void all_reduce(Tensor& t, int nccl_op, const char* op_name);
  void check_peer(const std::string& what, const char* role, int peer) const;

  std::string name_;
  int rank_ = 0, size_ = 1, device_ = 0;
  double timeout_s_ = 0;
  ncclComm* nccl_ = nullptr;       // null in a group of one rank
  CUstream_st* stream_ = nullptr;  // null in a group of one rank
  CUevent_st* ready_ = nullptr;    // marks the default stream's work before each op
  CommStats stats_;
};

}  // namespace tessera::comm
