// Communicator: one MPI group (the world, or a mesh axis's sub-communicator) with the collectives
// and point-to-point messages tessera uses on host and device tensors, blocking and asynchronous (CommHandle).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/collective_check.h"
#include "comm/comm_stats.h"
#include "comm/device_route.h"
#include "core/tensor.h"

namespace tessera::comm {

// An operation in flight. wait() completes it and records it in its communicator's stats (time
// from the start to wait()'s return); the destructor waits when nobody did. Move-only; the buffers
// it was started on stay alive until it completes. An empty handle (default, or an operation on a
// group of one rank) is already complete.
class CommHandle {
 public:
  CommHandle();  // empty: nothing pending
  CommHandle(CommHandle&& other) noexcept;
  CommHandle& operator=(CommHandle&& other) noexcept;  // completes what this handle held first
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  ~CommHandle();

  void wait();
  bool test();  // true (and completed, recorded) when the operation is done; never blocks
  bool pending() const { return pending_ != nullptr; }

 private:
  friend class Communicator;
  struct Pending;
  explicit CommHandle(std::unique_ptr<Pending> pending);
  void finish_quietly() noexcept;  // wait(), reporting instead of throwing (destructor, move)
  std::unique_ptr<Pending> pending_;
};

// Tensors here are contiguous and hold f32, i32, u8 or a 16-bit type (u16, bf16, f16, moved as raw
// 16-bit words). They live on the host, or on a device (CUDA): a device tensor travels through a
// host copy made when the operation starts, its result copied back when it completes
// (comm/host_staging.h; any MPI serves, at the cost of the copies), or, with --comm-backend nccl
// and a GPU per rank, a collective on device tensors runs over NCCL (comm/device_route.h; its
// asynchronous forms then complete before they return). Reductions take f32 and i32 only. Every argument is
// checked on the calling rank before any MPI call, and a failure throws tessera::Error naming the
// operation and the group, e.g. "reduce_scatter(dp): input has 10 elements, counts sum to 12";
// since every rank checks the same arguments, a bad call throws everywhere and nothing hangs.
// A tensor, or per-rank counts summing, above INT_MAX elements is refused: MPI-3 counts and
// displacements are ints (split such a call).
// A group of one rank makes no MPI call: in-place operations return at once, the others copy
// input to output; its arguments are still checked (except where they live: with no exchange,
// tensors on any device are accepted). Sending to oneself is refused in every group.
class Communicator {
 public:
  static Communicator world();
  Communicator(MPI_Comm comm, std::string name);  // does not take ownership of comm
  // A copy is another handle on the same MPI group with its own, copied, stats.
  Communicator(const Communicator& other);
  Communicator& operator=(const Communicator& other);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  MPI_Comm mpi_comm() const { return comm_; }

  // The group's members as world ranks, in group rank order.
  const std::vector<int>& world_ranks() const { return *world_ranks_; }

  // Wall-clock limit on one operation, from its start to its completion, in seconds; 0 (the
  // default) waits forever. An operation past it prints "error: rank R: all_reduce_sum(dp) [peers:
  // world ranks 0,1,2,3] did not complete within N s at <context>; aborting the job" (R: world
  // rank; the text is timeout_message() of collective_check.h) and aborts the whole job with exit
  // code 1 (MPI_Abort). The same rule holds in NcclCommunicator.
  void set_timeout(double seconds);
  double timeout() const { return timeout_s_; }

  // Where the caller is, e.g. "step 12, micro-batch 3": named by the watchdog's message and a
  // collective mismatch. An operation keeps the context it was started under; "" (the default)
  // names none.
  void set_context(std::string context);
  const std::string& context() const { return *context_; }

  // When on, every collective is preceded by an exchange of fingerprints over the group (op,
  // dtype, element count or per-rank counts hash, root; an MPI_Allgather of a fixed-size record,
  // under the same timeout): if any member's differs, every rank throws tessera::Error
  // "collective mismatch in group dp at <context>: rank 0 calls all_reduce_sum f32 x 1024, rank 2
  // calls all_gather f32 x 256" (world ranks; the first member differing from member 0) before
  // the collective is called. Apps turn that into "error: ..." and abort the job. Point-to-point
  // messages are not fingerprinted, nor is all_to_all's per-rank count vector (counts differ per
  // rank by design; op and dtype still are). Must be the same on every member of the group (an
  // exchange only some members start would hang). Off by default.
  void set_check_collectives(bool on) { check_collectives_ = on; }
  // How collectives on device tensors travel: "host" (the default) or "nccl" (comm/device_route.h;
  // --comm-backend). Shared with this group's copies; set before its first device collective.
  void set_device_backend(const std::string& backend) { route_->set_backend(backend); }
  bool check_collectives() const { return check_collectives_; }

  // --- all-reduce: in place, elementwise over the group ---
  void all_reduce_sum(Tensor& t);  // f32 or i32
  void all_reduce_max(Tensor& t);  // f32 or i32
  double all_reduce_sum(double value);
  int64_t all_reduce_max(int64_t value);
  double all_reduce_max(double value);
  // Several scalars in one collective (a step's metrics), in place.
  void all_reduce_sum(std::span<double> values);
  void all_reduce_max(std::span<double> values);

  // --- reduce-scatter (sum): rank r receives the sum over ranks of block r of the input ---
  // Equal blocks: input.numel() == size() * output.numel().
  void reduce_scatter(const Tensor& input, Tensor& output);
  // Per-rank blocks: counts[r] elements for rank r, laid out in rank order; input.numel() ==
  // sum(counts), output.numel() == counts[rank()].
  void reduce_scatter(const Tensor& input, Tensor& output, std::span<const int64_t> counts);

  // --- all-gather: every rank's input, concatenated in rank order, on every rank ---
  void all_gather(const Tensor& input, Tensor& output);  // output.numel() == size() * input.numel()
  // input.numel() == counts[rank()], output.numel() == sum(counts).
  void all_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts);

  // --- all-to-all: block j of this rank's input goes to rank j, whose output holds the blocks
  // from every rank in rank order ---
  // Equal blocks: input.numel() == output.numel(), divisible by size().
  void all_to_all(const Tensor& input, Tensor& output);
  // send_counts[j] elements go to rank j and recv_counts[i] come from rank i; input.numel() ==
  // sum(send_counts), output.numel() == sum(recv_counts). (send_counts[j] on rank i must equal
  // recv_counts[i] on rank j; no rank can check that alone.)
  void all_to_all(const Tensor& input, Tensor& output, std::span<const int64_t> send_counts,
                  std::span<const int64_t> recv_counts);

  void broadcast(Tensor& t, int root);  // root's t to every rank's t (same numel and dtype)
  // --- reduce (sum) to one rank: root's t becomes the elementwise sum over the group (in place);
  // the other ranks' t is left as it was ---
  void reduce_sum(Tensor& t, int root);  // f32 or i32

  // --- point to point: tagged, between two different ranks of the group ---
  void send(const Tensor& t, int dest, int tag = 0);
  void recv(Tensor& t, int source, int tag = 0);  // t.numel() must be the message's size

  void barrier();

  // --- asynchronous forms: the same checks and results, completed by the handle ---
  // Until the handle completes, the tensors must not be touched (by this rank's code).
  CommHandle iall_reduce_sum(Tensor& t);
  CommHandle ireduce_scatter(const Tensor& input, Tensor& output);
  CommHandle ireduce_scatter(const Tensor& input, Tensor& output, std::span<const int64_t> counts);
  CommHandle iall_gather(const Tensor& input, Tensor& output);
  CommHandle iall_gather(const Tensor& input, Tensor& output, std::span<const int64_t> counts);
  CommHandle isend(const Tensor& t, int dest, int tag = 0);
  CommHandle irecv(Tensor& t, int source, int tag = 0);

  const CommStats& stats() const { return *stats_; }
  CommStats& stats() { return *stats_; }  // e.g. stats().reset()

 private:
  std::string where(const char* op) const;  // "all_reduce(dp)"
  CommHandle all_reduce_start(Tensor& t, MPI_Op op, const char* op_name);
  // The host scalars' all-reduce: count values of one MPI type, in place, checked and recorded.
  void all_reduce_values(void* values, int count, MPI_Datatype type, const char* dtype, int64_t value_bytes,
                         MPI_Op op, const char* op_name);
  CommHandle reduce_scatter_start(const Tensor& input, Tensor& output,
                                  std::span<const int64_t> counts, bool equal, const char* op_name);
  CommHandle all_gather_start(const Tensor& input, Tensor& output, std::span<const int64_t> counts,
                              bool equal, const char* op_name);
  CommHandle all_to_all_start(const Tensor& input, Tensor& output,
                              std::span<const int64_t> send_counts,
                              std::span<const int64_t> recv_counts, bool equal);
  CommHandle send_start(const Tensor& t, int dest, int tag, const char* op_name);
  CommHandle recv_start(Tensor& t, int source, int tag, const char* op_name);
  // Runs `op` (a call on the group's NcclCommunicator) and records it when the operation's tensors,
  // all on the device, take the NCCL route (comm/device_route.h); false when they take the host route.
  template <class Op>
  bool over_nccl(std::initializer_list<const Tensor*> tensors, CommOp kind, int64_t bytes, Op&& op);
  // Gathers `bytes` bytes from every member into all (rank order), under the timeout; not recorded.
  void exchange(const void* mine, void* all, int bytes, const std::string& what);
  // Makes the record for an operation about to start on this group.
  std::unique_ptr<CommHandle::Pending> begin(CommOp op, int64_t bytes, std::string what) const;
  // Called by every collective once its arguments passed and right before its MPI call: applies
  // the fault hooks (false: skip the call) and, when checking, exchanges the fingerprint.
  bool enter_collective(const std::string& what, const char* op, const char* dtype, int64_t count,
                        std::span<const int64_t> counts = {}, bool has_counts = false,
                        int root = -1);

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 0;
  bool check_collectives_ = false;
  int world_rank_ = 0;
  // Shared with copies and with the operations in flight (both immutable once made).
  std::shared_ptr<const std::vector<int>> world_ranks_;
  std::shared_ptr<const std::string> peers_;    // format_peers(world_ranks)
  std::shared_ptr<const std::string> context_;  // set_context
  std::shared_ptr<CommStats> stats_;  // shared with the handles in flight
  std::shared_ptr<DeviceRoute> route_;  // shared with copies: one decision, one NCCL communicator
};

}  // namespace tessera::comm
