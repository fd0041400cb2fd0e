// Communicator over MPI: argument checks, MPI-3 non-blocking collectives behind every operation (a
// blocking call is its non-blocking form waited at once), CommHandle with its watchdog, the
// collective fingerprint check, and the routes of device tensors (host copies, or NCCL).
#include "comm/communicator.h"

#include "comm/host_staging.h"
#include "comm/tensor_pair_check.h"

#include <climits>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "comm/mpi_runtime.h"
#include "comm/nccl_communicator.h"
#include "core/timer.h"

namespace tessera::comm {

namespace {
// Throws naming the operation and the MPI call when MPI reports a failure (only seen where the
// communicator's error handler returns codes; the default handler aborts the job itself).
void mpi_check(int rc, const std::string& what, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail(what, ": ", call, " failed: ", std::string(text, len));
}
}  // namespace

// --- CommHandle ----------------------------------------------------------------------------------

struct CommHandle::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::shared_ptr<CommStats> stats;
  CommOp op = CommOp::barrier;
  int64_t bytes = 0;
  std::string what;  // "all_reduce(dp)", for messages
  std::shared_ptr<const std::string> peers, context;  // for the watchdog's message
  bool record = true;  // false: not an operation of the caller's (a fingerprint exchange)
  double timeout_s = 0;
  Timer timer;  // started when the operation was
  // For a receive: the elements the message must carry (-1: no check) and their MPI type.
  int64_t expect_count = -1;
  MPI_Datatype type = MPI_BYTE;
  // What MPI reads or writes until completion: the tensors (their storage), counts and offsets.
  Tensor keep[2];
  std::vector<int> ints[4];
  WriteBack write_back;  // a device tensor's result, received on the host (comm/host_staging.h)

  void finish();  // waits (under the watchdog's timeout)
  bool test();    // completes it if it is done
  void completed(const MPI_Status& status);
};

void CommHandle::Pending::finish() {
  MPI_Status status;
  int rc = MPI_SUCCESS;
  if (timeout_s > 0) {
    int done = 0;
    while (true) {
      rc = MPI_Test(&request, &done, &status);
      if (rc != MPI_SUCCESS || done) break;
      if (timer.seconds() > timeout_s) {
        int world_rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        const std::string line = timeout_message(world_rank, what, peers ? *peers : "",
                                                 timeout_s, context ? *context : "");
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
        abort_job(1);
      }
      std::this_thread::yield();
    }
  } else {
    rc = MPI_Wait(&request, &status);
  }
  mpi_check(rc, what, timeout_s > 0 ? "MPI_Test" : "MPI_Wait");
  completed(status);
}

bool CommHandle::Pending::test() {
  MPI_Status status;
  int done = 0;
  mpi_check(MPI_Test(&request, &done, &status), what, "MPI_Test");
  if (done) completed(status);
  return done != 0;
}

void CommHandle::Pending::completed(const MPI_Status& status) {
  if (expect_count >= 0) {
    int got = 0;
    MPI_Get_count(&status, type, &got);
    TESSERA_CHECK(got == expect_count, what, ": expected a message of ", expect_count,
                  " elements from rank ", status.MPI_SOURCE, ", got ", got);
  }
  write_back();  // (a short message leaves the staged tensor as it was)
  if (record) stats->record(op, bytes, timer.millis());
}

CommHandle::CommHandle() = default;
CommHandle::CommHandle(std::unique_ptr<Pending> pending) : pending_(std::move(pending)) {}

CommHandle::CommHandle(CommHandle&& other) noexcept : pending_(std::move(other.pending_)) {}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    finish_quietly();
    pending_ = std::move(other.pending_);
  }
  return *this;
}

CommHandle::~CommHandle() { finish_quietly(); }

void CommHandle::finish_quietly() noexcept {
  if (!pending_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    // No exception may leave here; the failure is still reported on this rank.
    std::fprintf(stderr, "error: %s\n", e.what());
  }
}

bool CommHandle::test() {
  if (!pending_) return true;
  if (!pending_->test()) return false;
  pending_.reset();
  return true;
}

void CommHandle::wait() {
  if (!pending_) return;
  std::unique_ptr<Pending> p = std::move(pending_);  // complete (or failed) either way
  p->finish();
}

// --- checks --------------------------------------------------------------------------------------

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::u16:
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
    case DType::u8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

// A tensor MPI (or a size-1 copy) may touch: defined and within MPI-3's int counts. A device
// tensor is exchanged through a host copy (comm/host_staging.h).
void check_tensor(const std::string& what, const char* label, const Tensor& t) {
  TESSERA_CHECK(t.defined(), what, ": ", label, " is undefined (a tensor without storage)");
  TESSERA_CHECK(t.numel() <= INT_MAX, what, ": ", label, " has ", t.numel(),
                " elements, above the MPI-3 count limit of ", INT_MAX, "; split the call");
}

void check_reducible(const std::string& what, const Tensor& t) {
  TESSERA_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::i32, what, ": cannot reduce ",
                dtype_name(t.dtype()), " tensors (f32 and i32 only)");
}

// Per-rank counts as MPI ints with their offsets (rank order); returns the sum.
int64_t to_counts(const std::string& what, const char* label, std::span<const int64_t> counts,
                  int size, std::vector<int>& ints, std::vector<int>& offsets) {
  TESSERA_CHECK(static_cast<int64_t>(counts.size()) == size, what, ": ", label, " has ",
                counts.size(), " entries for a group of ", size, " ranks");
  ints.resize(size);
  offsets.resize(size);
  int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    TESSERA_CHECK(counts[r] >= 0, what, ": ", label, "[", r, "] is ", counts[r]);
    TESSERA_CHECK(total + counts[r] <= INT_MAX, what, ": ", label, " sum past ", INT_MAX,
                  " elements, the MPI-3 count limit; split the call");
    ints[r] = static_cast<int>(counts[r]);
    offsets[r] = static_cast<int>(total);
    total += counts[r];
  }
  return total;
}

}  // namespace

// --- Communicator --------------------------------------------------------------------------------

Communicator Communicator::world() { return Communicator(MPI_COMM_WORLD, "world"); }

Communicator::Communicator(MPI_Comm comm, std::string name)
    : comm_(comm),
      name_(std::move(name)),
      context_(std::make_shared<const std::string>()),
      stats_(std::make_shared<CommStats>(name_)),
      route_(std::make_shared<DeviceRoute>()) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  // The members as world ranks, for messages.
  std::vector<int> mine(size_), world(size_);
  for (int r = 0; r < size_; ++r) mine[r] = r;
  MPI_Group group, world_group;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_translate_ranks(group, size_, mine.data(), world_group, world.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  peers_ = std::make_shared<const std::string>(format_peers(world));
  world_ranks_ = std::make_shared<const std::vector<int>>(std::move(world));
}

Communicator::Communicator(const Communicator& other)
    : comm_(other.comm_),
      name_(other.name_),
      rank_(other.rank_),
      size_(other.size_),
      timeout_s_(other.timeout_s_),
      check_collectives_(other.check_collectives_),
      world_rank_(other.world_rank_),
      world_ranks_(other.world_ranks_),
      peers_(other.peers_),
      context_(other.context_),
      stats_(std::make_shared<CommStats>(*other.stats_)),
      route_(other.route_) {}

Communicator& Communicator::operator=(const Communicator& other) {
  if (this != &other) {
    comm_ = other.comm_;
    name_ = other.name_;
    rank_ = other.rank_;
    size_ = other.size_;
    timeout_s_ = other.timeout_s_;
    check_collectives_ = other.check_collectives_;
    world_rank_ = other.world_rank_;
    world_ranks_ = other.world_ranks_;
    peers_ = other.peers_;
    context_ = other.context_;
    stats_ = std::make_shared<CommStats>(*other.stats_);
    route_ = other.route_;
  }
  return *this;
}

void Communicator::set_timeout(double seconds) {
  TESSERA_CHECK(seconds >= 0, "communicator ", name_, ": timeout must be >= 0 s, got ", seconds);
  timeout_s_ = seconds;
}

void Communicator::set_context(std::string context) {
  context_ = std::make_shared<const std::string>(std::move(context));
}

std::string Communicator::where(const char* op) const {
  return std::string(op) + "(" + name_ + ")";
}

void Communicator::exchange(const void* mine, void* all, int bytes, const std::string& what) {
  auto p = begin(CommOp::all_gather, 0, what);
  p->record = false;
  mpi_check(MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm_, &p->request), p->what,
            "MPI_Iallgather");
  CommHandle(std::move(p)).wait();
}

template <class Op>
bool Communicator::over_nccl(std::initializer_list<const Tensor*> tensors, CommOp kind, int64_t bytes, Op&& op) {
  for (const Tensor* t : tensors)
    if (t->device() == Device::cpu) return false;  // (a host tensor among them: the host route)
  const auto exchange = [&](const void* mine, void* all, int n) {
    this->exchange(mine, all, n, where("device route") + " exchange");
  };
  NcclCommunicator* nccl = route_->nccl(exchange, comm_, name_, timeout_s_);
  if (!nccl) return false;
#ifdef TESSERA_HAVE_NCCL  // (without NCCL the route is never nccl, and `op`, generic, is never instantiated)
  nccl->set_timeout(timeout_s_);
  const Timer timer;
  op(*nccl);
  stats_->record(kind, bytes, timer.millis());
  return true;
#else
  (void)kind, (void)bytes, (void)op;
  return false;
#endif
}

std::unique_ptr<CommHandle::Pending> Communicator::begin(CommOp op, int64_t bytes,
                                                         std::string what) const {
  auto p = std::make_unique<CommHandle::Pending>();
  p->stats = stats_;
  p->op = op;
  p->bytes = bytes;
  p->what = std::move(what);
  p->timeout_s = timeout_s_;
  p->peers = peers_;
  p->context = context_;
  return p;
}

bool Communicator::enter_collective(const std::string& what, const char* op, const char* dtype,
                                    int64_t count, std::span<const int64_t> counts,
                                    bool has_counts, int root) {
  const FaultAction fault = next_collective_fault(world_rank_);
  if (fault == FaultAction::skip) return false;  // test hook: this rank never arrives
  if (!check_collectives_) return true;
  CollectiveFingerprint fp = make_fingerprint(op, dtype, count, counts, has_counts, root);
  if (fault == FaultAction::mismatch) ++fp.count;  // test hook: a wrong count, only in the print
  std::vector<CollectiveFingerprint> all(size_);
  exchange(&fp, all.data(), sizeof fp, what + " fingerprint exchange");
  if (auto mismatch = find_mismatch(all, *world_ranks_, name_, *context_)) throw Error(*mismatch);
  return true;
}

// --- all-reduce ---

CommHandle Communicator::all_reduce_start(Tensor& t, MPI_Op op, const char* op_name) {
  const std::string what = where(op_name);
  check_tensor(what, "tensor", t);
  check_reducible(what, t);
  if (size_ == 1) return {};
  if (!enter_collective(what, op == MPI_SUM ? "all_reduce_sum" : "all_reduce_max",
                        dtype_name(t.dtype()), t.numel()))
    return {};
  if (over_nccl({&t}, CommOp::all_reduce, static_cast<int64_t>(t.nbytes()), [&](auto& nccl) {
        op == MPI_SUM ? nccl.all_reduce_sum(t) : nccl.all_reduce_max(t);
      }))
    return {};
  auto p = begin(CommOp::all_reduce, static_cast<int64_t>(t.nbytes()), what);
  Tensor host = staged_send(t);
  p->keep[0] = host;
  p->write_back = WriteBack(host, t);
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, host.raw(), static_cast<int>(t.numel()), mpi_type(t.dtype()),
                           op, comm_, &p->request),
            p->what, "MPI_Iallreduce");
  return CommHandle(std::move(p));
}

void Communicator::all_reduce_sum(Tensor& t) {
  all_reduce_start(t, MPI_SUM, "all_reduce_sum").wait();
}
void Communicator::all_reduce_max(Tensor& t) {
  all_reduce_start(t, MPI_MAX, "all_reduce_max").wait();
}
CommHandle Communicator::iall_reduce_sum(Tensor& t) {
  return all_reduce_start(t, MPI_SUM, "iall_reduce_sum");
}

void Communicator::all_reduce_values(void* values, int count, MPI_Datatype type, const char* dtype,
                                     int64_t value_bytes, MPI_Op op, const char* op_name) {
  if (size_ == 1 || count == 0) return;
  const std::string what = where(op_name);
  if (!enter_collective(what, op_name, dtype, count)) return;
  auto p = begin(CommOp::all_reduce, value_bytes * count, what);
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, values, count, type, op, comm_, &p->request), p->what, "MPI_Iallreduce");
  CommHandle(std::move(p)).wait();
}

double Communicator::all_reduce_sum(double value) {
  all_reduce_values(&value, 1, MPI_DOUBLE, "f64", sizeof(double), MPI_SUM, "all_reduce_sum");
  return value;
}

double Communicator::all_reduce_max(double value) {
  all_reduce_values(&value, 1, MPI_DOUBLE, "f64", sizeof(double), MPI_MAX, "all_reduce_max");
  return value;
}

int64_t Communicator::all_reduce_max(int64_t value) {
  all_reduce_values(&value, 1, MPI_INT64_T, "i64", sizeof(int64_t), MPI_MAX, "all_reduce_max");
  return value;
}

void Communicator::all_reduce_sum(std::span<double> values) {
  all_reduce_values(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, "f64", sizeof(double), MPI_SUM,
                    "all_reduce_sum");
}

void Communicator::all_reduce_max(std::span<double> values) {
  all_reduce_values(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, "f64", sizeof(double), MPI_MAX,
                    "all_reduce_max");
}

// --- reduce-scatter ---

CommHandle Communicator::reduce_scatter_start(const Tensor& input, Tensor& output,
                                              std::span<const int64_t> counts, bool equal,
                                              const char* op_name) {
  const std::string what = where(op_name);
  check_tensor(what, "input", input);
  check_tensor(what, "output", output);
  check_pair(what, input, output);
  check_reducible(what, input);
  std::vector<int> ints, offsets;
  if (equal) {
    TESSERA_CHECK(input.numel() == size_ * output.numel(), what, ": input has ", input.numel(),
                  " elements, not ", size_, " ranks x output's ", output.numel());
  } else {
    const int64_t total = to_counts(what, "counts", counts, size_, ints, offsets);
    TESSERA_CHECK(input.numel() == total, what, ": input has ", input.numel(),
                  " elements, counts sum to ", total);
    TESSERA_CHECK(output.numel() == counts[rank_], what, ": output has ", output.numel(),
                  " elements, counts[", rank_, "] is ", counts[rank_]);
  }
  if (size_ == 1) {
    output.copy_from(input);
    return {};
  }
  if (!enter_collective(what, "reduce_scatter", dtype_name(input.dtype()), input.numel(), counts,
                        !equal))
    return {};
  if (over_nccl({&input, &output}, CommOp::reduce_scatter, static_cast<int64_t>(input.nbytes()), [&](auto& nccl) {
        equal ? nccl.reduce_scatter(input, output) : nccl.reduce_scatter(input, output, counts);
      }))
    return {};
  auto p = begin(CommOp::reduce_scatter, static_cast<int64_t>(input.nbytes()), what);
  const Tensor in = p->keep[0] = staged_send(input);
  const Tensor out = p->keep[1] = staged_receive(output);
  p->write_back = WriteBack(out, output);
  const MPI_Datatype type = mpi_type(input.dtype());
  if (equal) {
    mpi_check(MPI_Ireduce_scatter_block(in.raw(), out.raw(), static_cast<int>(output.numel()),
                                        type, MPI_SUM, comm_, &p->request),
              p->what, "MPI_Ireduce_scatter_block");
  } else {
    p->ints[0] = std::move(ints);
    mpi_check(MPI_Ireduce_scatter(in.raw(), out.raw(), p->ints[0].data(), type, MPI_SUM,
                                  comm_, &p->request),
              p->what, "MPI_Ireduce_scatter");
  }
  return CommHandle(std::move(p));
}

void Communicator::reduce_scatter(const Tensor& input, Tensor& output) {
  reduce_scatter_start(input, output, {}, true, "reduce_scatter").wait();
}
void Communicator::reduce_scatter(const Tensor& input, Tensor& output,
                                  std::span<const int64_t> counts) {
  reduce_scatter_start(input, output, counts, false, "reduce_scatter").wait();
}
CommHandle Communicator::ireduce_scatter(const Tensor& input, Tensor& output) {
  return reduce_scatter_start(input, output, {}, true, "ireduce_scatter");
}
CommHandle Communicator::ireduce_scatter(const Tensor& input, Tensor& output,
                                         std::span<const int64_t> counts) {
  return reduce_scatter_start(input, output, counts, false, "ireduce_scatter");
}

// --- all-gather ---

CommHandle Communicator::all_gather_start(const Tensor& input, Tensor& output,
                                          std::span<const int64_t> counts, bool equal,
                                          const char* op_name) {
  const std::string what = where(op_name);
  check_tensor(what, "input", input);
  check_tensor(what, "output", output);
  check_pair(what, input, output);
  std::vector<int> ints, offsets;
  if (equal) {
    TESSERA_CHECK(output.numel() == size_ * input.numel(), what, ": output has ", output.numel(),
                  " elements, not ", size_, " ranks x input's ", input.numel());
  } else {
    const int64_t total = to_counts(what, "counts", counts, size_, ints, offsets);
    TESSERA_CHECK(output.numel() == total, what, ": output has ", output.numel(),
                  " elements, counts sum to ", total);
    TESSERA_CHECK(input.numel() == counts[rank_], what, ": input has ", input.numel(),
                  " elements, counts[", rank_, "] is ", counts[rank_]);
  }
  if (size_ == 1) {
    output.copy_from(input);
    return {};
  }
  if (!enter_collective(what, "all_gather", dtype_name(input.dtype()),
                        equal ? input.numel() : output.numel(), counts, !equal))
    return {};
  if (over_nccl({&input, &output}, CommOp::all_gather, static_cast<int64_t>(output.nbytes()), [&](auto& nccl) {
        equal ? nccl.all_gather(input, output) : nccl.all_gather(input, output, counts);
      }))
    return {};
  auto p = begin(CommOp::all_gather, static_cast<int64_t>(output.nbytes()), what);
  const Tensor in = p->keep[0] = staged_send(input);
  const Tensor out = p->keep[1] = staged_receive(output);
  p->write_back = WriteBack(out, output);
  const MPI_Datatype type = mpi_type(input.dtype());
  if (equal) {
    const int n = static_cast<int>(input.numel());
    mpi_check(MPI_Iallgather(in.raw(), n, type, out.raw(), n, type, comm_, &p->request),
              p->what, "MPI_Iallgather");
  } else {
    p->ints[0] = std::move(ints);
    p->ints[1] = std::move(offsets);
    mpi_check(MPI_Iallgatherv(in.raw(), static_cast<int>(input.numel()), type, out.raw(),
                              p->ints[0].data(), p->ints[1].data(), type, comm_, &p->request),
              p->what, "MPI_Iallgatherv");
  }
  return CommHandle(std::move(p));
}

void Communicator::all_gather(const Tensor& input, Tensor& output) {
  all_gather_start(input, output, {}, true, "all_gather").wait();
}
void Communicator::all_gather(const Tensor& input, Tensor& output,
                              std::span<const int64_t> counts) {
  all_gather_start(input, output, counts, false, "all_gather").wait();
}
CommHandle Communicator::iall_gather(const Tensor& input, Tensor& output) {
  return all_gather_start(input, output, {}, true, "iall_gather");
}
CommHandle Communicator::iall_gather(const Tensor& input, Tensor& output,
                                     std::span<const int64_t> counts) {
  return all_gather_start(input, output, counts, false, "iall_gather");
}

// --- all-to-all ---

CommHandle Communicator::all_to_all_start(const Tensor& input, Tensor& output,
                                          std::span<const int64_t> send_counts,
                                          std::span<const int64_t> recv_counts, bool equal) {
  const std::string what = where("all_to_all");
  check_tensor(what, "input", input);
  check_tensor(what, "output", output);
  check_pair(what, input, output);
  std::vector<int> sends, send_offsets, recvs, recv_offsets;
  if (equal) {
    TESSERA_CHECK(input.numel() == output.numel(), what, ": input has ", input.numel(),
                  " elements, output has ", output.numel());
    TESSERA_CHECK(input.numel() % size_ == 0, what, ": input has ", input.numel(),
                  " elements, not divisible into ", size_, " equal blocks");
  } else {
    const int64_t sent = to_counts(what, "send_counts", send_counts, size_, sends, send_offsets);
    const int64_t got = to_counts(what, "recv_counts", recv_counts, size_, recvs, recv_offsets);
    TESSERA_CHECK(input.numel() == sent, what, ": input has ", input.numel(),
                  " elements, send_counts sum to ", sent);
    TESSERA_CHECK(output.numel() == got, what, ": output has ", output.numel(),
                  " elements, recv_counts sum to ", got);
    TESSERA_CHECK(send_counts[rank_] == recv_counts[rank_], what, ": this rank (", rank_,
                  ") sends itself ", send_counts[rank_], " elements but receives ",
                  recv_counts[rank_]);
  }
  if (size_ == 1) {
    output.copy_from(input);
    return {};
  }
  // Per-rank send counts differ between ranks by design: only op and dtype are compared then.
  if (!enter_collective(what, "all_to_all", dtype_name(input.dtype()), equal ? input.numel() : -1,
                        {}, !equal))
    return {};
  if (over_nccl({&input, &output}, CommOp::all_to_all, static_cast<int64_t>(input.nbytes()), [&](auto& nccl) {
        equal ? nccl.all_to_all(input, output) : nccl.all_to_all(input, output, send_counts, recv_counts);
      }))
    return {};
  auto p = begin(CommOp::all_to_all, static_cast<int64_t>(input.nbytes()), what);
  const Tensor in = p->keep[0] = staged_send(input);
  const Tensor out = p->keep[1] = staged_receive(output);
  p->write_back = WriteBack(out, output);
  const MPI_Datatype type = mpi_type(input.dtype());
  if (equal) {
    const int n = static_cast<int>(input.numel() / size_);
    mpi_check(MPI_Ialltoall(in.raw(), n, type, out.raw(), n, type, comm_, &p->request),
              p->what, "MPI_Ialltoall");
  } else {
    p->ints[0] = std::move(sends);
    p->ints[1] = std::move(send_offsets);
    p->ints[2] = std::move(recvs);
    p->ints[3] = std::move(recv_offsets);
    mpi_check(MPI_Ialltoallv(in.raw(), p->ints[0].data(), p->ints[1].data(), type, out.raw(),
                             p->ints[2].data(), p->ints[3].data(), type, comm_, &p->request),
              p->what, "MPI_Ialltoallv");
  }
  return CommHandle(std::move(p));
}

void Communicator::all_to_all(const Tensor& input, Tensor& output) {
  all_to_all_start(input, output, {}, {}, true).wait();
}
void Communicator::all_to_all(const Tensor& input, Tensor& output,
                              std::span<const int64_t> send_counts,
                              std::span<const int64_t> recv_counts) {
  all_to_all_start(input, output, send_counts, recv_counts, false).wait();
}

// --- broadcast, reduce, barrier ---

void Communicator::broadcast(Tensor& t, int root) {
  const std::string what = where("broadcast");
  check_tensor(what, "tensor", t);
  TESSERA_CHECK(root >= 0 && root < size_, what, ": root ", root, " is not a rank of a group of ",
                size_);
  if (size_ == 1) return;
  if (!enter_collective(what, "broadcast", dtype_name(t.dtype()), t.numel(), {}, false, root))
    return;
  if (over_nccl({&t}, CommOp::broadcast, static_cast<int64_t>(t.nbytes()),
                [&](auto& nccl) { nccl.broadcast(t, root); }))
    return;
  auto p = begin(CommOp::broadcast, static_cast<int64_t>(t.nbytes()), what);
  const Tensor host = p->keep[0] = rank_ == root ? staged_send(t) : staged_receive(t);
  if (rank_ != root) p->write_back = WriteBack(host, t);
  mpi_check(MPI_Ibcast(host.raw(), static_cast<int>(t.numel()), mpi_type(t.dtype()), root, comm_,
                       &p->request),
            p->what, "MPI_Ibcast");
  CommHandle(std::move(p)).wait();
}

void Communicator::reduce_sum(Tensor& t, int root) {
  const std::string what = where("reduce_sum");
  check_tensor(what, "tensor", t);
  TESSERA_CHECK(root >= 0 && root < size_, what, ": root ", root, " is not a rank of a group of ",
                size_);
  check_reducible(what, t);
  if (size_ == 1) return;
  if (!enter_collective(what, "reduce_sum", dtype_name(t.dtype()), t.numel(), {}, false, root))
    return;
  if (over_nccl({&t}, CommOp::reduce, static_cast<int64_t>(t.nbytes()),
                [&](auto& nccl) { nccl.reduce_sum(t, root); }))
    return;
  auto p = begin(CommOp::reduce, static_cast<int64_t>(t.nbytes()), what);
  const Tensor host = p->keep[0] = staged_send(t);
  // In place on the root; the others only send (their receive buffer is not read by MPI).
  const bool is_root = rank_ == root;
  if (is_root) p->write_back = WriteBack(host, t);
  mpi_check(MPI_Ireduce(is_root ? MPI_IN_PLACE : host.raw(), is_root ? host.raw() : nullptr,
                        static_cast<int>(t.numel()), mpi_type(t.dtype()), MPI_SUM, root, comm_,
                        &p->request),
            p->what, "MPI_Ireduce");
  CommHandle(std::move(p)).wait();
}

void Communicator::barrier() {
  if (size_ == 1) return;
  const std::string what = where("barrier");
  if (!enter_collective(what, "barrier", "-", 0)) return;
  auto p = begin(CommOp::barrier, 0, what);
  mpi_check(MPI_Ibarrier(comm_, &p->request), p->what, "MPI_Ibarrier");
  CommHandle(std::move(p)).wait();
}

// --- point to point ---

namespace {
void check_peer(const std::string& what, const char* role, int peer, int rank, int size, int tag) {
  TESSERA_CHECK(peer >= 0 && peer < size, what, ": ", role, " ", peer,
                " is not a rank of a group of ", size);
  TESSERA_CHECK(peer != rank, what, ": ", role, " ", peer,
                " is this rank (a rank does not message itself)");
  // MPI guarantees tags up to 32767; that is the bound tessera uses everywhere.
  TESSERA_CHECK(tag >= 0 && tag <= 32767, what, ": tag ", tag, " is outside 0..32767");
}
}  // namespace

CommHandle Communicator::send_start(const Tensor& t, int dest, int tag, const char* op_name) {
  const std::string what = where(op_name);
  check_tensor(what, "tensor", t);
  check_peer(what, "destination", dest, rank_, size_, tag);
  auto p = begin(CommOp::send, static_cast<int64_t>(t.nbytes()), what);
  const Tensor host = p->keep[0] = staged_send(t);
  mpi_check(MPI_Isend(host.raw(), static_cast<int>(t.numel()), mpi_type(t.dtype()), dest, tag, comm_,
                      &p->request),
            p->what, "MPI_Isend");
  return CommHandle(std::move(p));
}

CommHandle Communicator::recv_start(Tensor& t, int source, int tag, const char* op_name) {
  const std::string what = where(op_name);
  check_tensor(what, "tensor", t);
  check_peer(what, "source", source, rank_, size_, tag);
  auto p = begin(CommOp::recv, static_cast<int64_t>(t.nbytes()), what);
  const Tensor host = p->keep[0] = staged_receive(t);
  p->write_back = WriteBack(host, t);
  p->expect_count = t.numel();
  p->type = mpi_type(t.dtype());
  mpi_check(
      MPI_Irecv(host.raw(), static_cast<int>(t.numel()), p->type, source, tag, comm_, &p->request),
      p->what, "MPI_Irecv");
  return CommHandle(std::move(p));
}

void Communicator::send(const Tensor& t, int dest, int tag) {
  send_start(t, dest, tag, "send").wait();
}
void Communicator::recv(Tensor& t, int source, int tag) {
  recv_start(t, source, tag, "recv").wait();
}
CommHandle Communicator::isend(const Tensor& t, int dest, int tag) {
  return send_start(t, dest, tag, "isend");
}
CommHandle Communicator::irecv(Tensor& t, int source, int tag) {
  return recv_start(t, source, tag, "irecv");
}

}  // namespace tessera::comm
