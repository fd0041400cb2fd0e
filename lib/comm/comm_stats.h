// CommStats: what one communicator group has exchanged, per kind of operation (calls, payload
// bytes, wall time), with totals. Filled by Communicator and NcclCommunicator; read by the trainer.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace tessera::comm {

// The kinds of operation a communicator counts.
enum class CommOp : int {
  all_reduce = 0,
  reduce_scatter,
  all_gather,
  all_to_all,
  broadcast,
  reduce,
  send,
  recv,
  barrier,
};
constexpr int kCommOps = 9;
const char* comm_op_name(CommOp op);  // "all_reduce", "reduce_scatter", ...

struct OpStats {
  int64_t calls = 0;
  int64_t bytes = 0;  // payload bytes, by the convention below
  double ms = 0;      // exposed time: the caller's time inside the operation's calls
};

// Payload bytes per call, from this rank's point of view:
//   all_reduce      the tensor's size (the buffer being reduced)
//   reduce_scatter  the input's size (all blocks, before scattering)
//   all_gather      the output's size (all blocks, after gathering)
//   all_to_all      the size this rank sends
//   broadcast       the tensor's size, on the root and on every receiver
//   reduce          the tensor's size, on the root and on every sender
//   send, recv      the message's size
//   barrier         0
// Time is exposed time: what the caller spent inside the operation's calls. For a blocking call,
// from its start until it returns; for an asynchronous one, posting it plus its handle's test()
// and wait() calls, so the time it ran in flight while the caller computed is not counted (an
// operation that overlapped fully records about the cost of posting it). A group of one rank
// exchanges nothing and records nothing.
class CommStats {
 public:
  explicit CommStats(std::string group = "") : group_(std::move(group)) {}

  void record(CommOp op, int64_t bytes, double ms);
  void reset();  // zero every counter; the group name stays

  const std::string& group() const { return group_; }
  const OpStats& op(CommOp op) const { return ops_[static_cast<int>(op)]; }
  int64_t total_calls() const { return calls_; }
  int64_t total_bytes() const { return bytes_; }
  double total_ms() const { return ms_; }
  // One line for logs, kinds used only: "dp: all_reduce 12 calls 4.000 MB 3.200 ms, barrier ...".
  std::string summary() const;

 private:
  std::string group_;
  std::array<OpStats, kCommOps> ops_{};
  int64_t calls_ = 0, bytes_ = 0;  // totals over every kind
  double ms_ = 0;
};

}  // namespace tessera::comm
