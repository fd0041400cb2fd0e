// Calibration: timed loops over tessera's kernels and communicators, and least-squares fits of
// the collectives' latency and bandwidth.
#include "plan/calibration.h"

#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "plan/calibration_kernels.h"
#include "plan/calibration_timing.h"

namespace tessera::plan {
namespace {

using Clock = CalibrationClock;

// A communicator of the MPI group this rank joins by `color` (MPI_UNDEFINED: none), freed with it.
struct SplitComm {
  MPI_Comm comm = MPI_COMM_NULL;
  SplitComm(MPI_Comm parent, int color, int key) { MPI_Comm_split(parent, color, key, &comm); }
  ~SplitComm() {
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
  SplitComm(const SplitComm&) = delete;
  SplitComm& operator=(const SplitComm&) = delete;
};

// Least squares of seconds = latency + bytes x per_byte in relative error (each size weighted by
// 1 / seconds^2, so the largest message does not set the latency of the small ones), both kept at
// least 0.
CollectiveFit fit(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double w = 1.0 / std::max(seconds[i] * seconds[i], 1e-24);
    sw += w;
    sx += w * bytes[i];
    sy += w * seconds[i];
    sxx += w * bytes[i] * bytes[i];
    sxy += w * bytes[i] * seconds[i];
  }
  CollectiveFit f;
  const double d = sw * sxx - sx * sx;
  f.seconds_per_byte = d > 0 ? std::max(0.0, (sw * sxy - sx * sy) / d) : 0.0;
  f.latency_s = sw > 0 ? std::max(0.0, (sy - f.seconds_per_byte * sx) / sw) : 0.0;
  if (f.seconds_per_byte == 0 && sx > 0) f.seconds_per_byte = std::max(0.0, sy - f.latency_s * sw) / sx;
  return f;
}

// One call of `op` (as machine.json names it) on `group`: `in` of N floats, `out` as output_for.
void call_collective(comm::Communicator& group, const std::string& op, Tensor& in, Tensor& out) {
  if (op == "all_reduce") group.all_reduce_sum(in);
  else if (op == "all_gather") group.all_gather(in, out);
  else if (op == "reduce_scatter") group.reduce_scatter(in, out);
  else if (op == "all_to_all") group.all_to_all(in, out);
  else if (op == "send_recv") {  // ranks 0 and 1 ping-pong; one way is half the round trip
    if (group.rank() == 0) {
      group.send(in, 1);
      group.recv(in, 1);
    } else if (group.rank() == 1) {
      group.recv(in, 0);
      group.send(in, 0);
    }
  }
}

Tensor output_for(const std::string& op, int64_t elements, int g) {
  if (op == "all_gather") return Tensor::empty({elements * g});
  if (op == "reduce_scatter") return Tensor::empty({elements / g});
  if (op == "all_to_all") return Tensor::empty({elements});
  return Tensor{};
}

// The median of this rank's times, the slowest rank's of `group`.
double slowest_median(comm::Communicator& group, std::vector<double> times) {
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  Tensor worst = Tensor::empty({1});
  worst.data<float>()[0] = static_cast<float>(times[times.size() / 2]);
  group.all_reduce_max(worst);
  return worst.data<float>()[0];
}

// Seconds of one call of `op` with messages of `elements` floats on `group` (as comm_bytes counts
// them), the median of `repeats` calls, the slowest rank's.
double time_collective(comm::Communicator& group, const std::string& op, int64_t elements, int repeats) {
  const int g = group.size();
  Tensor in = filled({elements}, 1.0f), out = output_for(op, elements, g);
  const auto once = [&] { call_collective(group, op, in, out); };
  once();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    group.barrier();
    const Clock::time_point start = Clock::now();
    once();
    times.push_back(seconds_since(start) / (op == "send_recv" ? 2.0 : 1.0));
  }
  return slowest_median(group, times);
}

// Seconds one call of `op` with messages of `elements` floats adds to a step where it sits between
// pieces of compute (160 x 160 x 160 GEMMs, about a tenth of a millisecond each alone), as a
// layer's collective does: the difference between loops of compute with and without the call, per
// call. Each loop runs 64 calls, long enough (tens of milliseconds where ranks outnumber cores) that
// the ranks share the cores in both loops as they do in training. Where ranks share cores, a
// collective waits for every member to be scheduled again and its bytes compete with the compute
// for the cores, so this is well above what a barrier-started call takes (time_collective); on a
// core per rank the two agree. The slowest rank's median of `repeats` loops.
double time_collective_between_compute(comm::Communicator& group, const std::string& op, int64_t elements,
                                       int repeats) {
  const int64_t n = 160, calls = 64;
  Tensor a = filled({n, n}, 0.5f), b = filled({n, n}, 0.25f), c = Tensor::empty({n, n});
  const auto work = [&] { ops::matmul(a, false, b, true, c, 1.0f, 0.0f, ops::MatmulInputs::f32); };
  Tensor in = filled({elements}, 1.0f), out = output_for(op, elements, group.size());
  const auto collective = [&] { call_collective(group, op, in, out); };
  const auto loop = [&](bool with_collective) {
    group.barrier();
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < calls; ++i) {
      work();
      if (with_collective) collective();
    }
    return seconds_since(start);
  };
  loop(true);
  std::vector<double> with, without;
  for (int r = 0; r < repeats; ++r) {
    with.push_back(loop(true));
    without.push_back(loop(false));
  }
  const double difference = slowest_median(group, with) - slowest_median(group, without);
  return std::max(0.0, difference / static_cast<double>(calls) / (op == "send_recv" ? 2.0 : 1.0));
}

// Fits every collective on the groups this rank's color puts it in (size g each), recording them
// under `domain` on every rank (the world's rank 0 of each size's first group broadcasts its fit).
void calibrate_collectives(comm::Communicator& world, MachineModel& m, const std::string& domain, int color, int key,
                           int g, bool leader, const CalibrationOptions& options) {
  const SplitComm split(world.mpi_comm(), color, key);
  for (const std::string& op : collective_names()) {
    // A message's time does not depend on the group: send_recv is measured once per domain, between
    // the group's first two ranks, and kept under group size 2.
    if (op == "send_recv" && domain == "intra_node" && g != 2) continue;
    std::vector<double> fitted(2, 0.0);
    if (split.comm != MPI_COMM_NULL) {
      comm::Communicator group(split.comm, domain + "_" + std::to_string(g));
      std::vector<double> bytes, seconds;
      // Each size's time is what a training step sees: the barrier-started call's, or, where larger
      // (cores shared between ranks), the call's cost between pieces of compute.
      for (int64_t elements : {int64_t{1} << 10, int64_t{1} << 15, int64_t{1} << 18, int64_t{1} << 20}) {
        const int64_t n = elements / g * g;  // divisible by the group (reduce-scatter, all-to-all)
        const int repeats = options.collective_repeats;
        seconds.push_back(std::max(time_collective(group, op, n, repeats),
                                   time_collective_between_compute(group, op, n, repeats)));
        bytes.push_back(static_cast<double>(op == "all_gather" ? n * g : n) * sizeof(float));
      }
      const CollectiveFit f = fit(bytes, seconds);
      fitted = {f.latency_s, f.seconds_per_byte};
    }
    // Every rank learns the leader's fit.
    double values[3] = {leader ? fitted[0] : 0.0, leader ? fitted[1] : 0.0, leader ? 1.0 : 0.0};
    MPI_Allreduce(MPI_IN_PLACE, values, 3, MPI_DOUBLE, MPI_SUM, world.mpi_comm());
    TESSERA_CHECK(values[2] == 1.0, "calibrate: ", values[2], " leaders for ", op, " on ", g, " ranks");
    m.collectives[domain][op][op == "send_recv" ? 2 : g] = {values[0], values[1]};
  }
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// The cores this node's ranks may run on: the union of their CPU affinity masks over `node` (the
// ranks sharing this node), counted. Where ranks outnumber these cores they share them (the time
// model's oversubscription).
int node_cores(MPI_Comm node) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < online && c < CPU_SETSIZE; ++c) CPU_SET(c, &mine);
  }
  std::vector<unsigned char> bits(CPU_SETSIZE, 0);
  for (int c = 0; c < CPU_SETSIZE; ++c) bits[c] = CPU_ISSET(c, &mine) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, bits.data(), CPU_SETSIZE, MPI_UNSIGNED_CHAR, MPI_BOR, node);
  int cores = 0;
  for (unsigned char b : bits) cores += b;
  return std::max(1, cores);
}

// The unit of shared compute of the measurements below: a 160 x 160 x 160 f32 GEMM.
struct SharedGemms {
  static constexpr int64_t n = 160;
  Tensor a = filled({n, n}, 0.5f), b = filled({n, n}, 0.25f), c = Tensor::empty({n, n});
  void run() { ops::matmul(a, false, b, true, c, 1.0f, 0.0f, ops::MatmulInputs::f32); }
  // How many GEMMs last about `seconds` while all of `node`'s ranks compute on its `cores` (at
  // least 8), agreed by every rank: the slowest's estimate.
  int64_t count_lasting(comm::Communicator& node, int cores, double seconds) {
    run();
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < 8; ++i) run();
    const double each = seconds_since(start) / 8 * node.size() / std::max(1, cores);
    Tensor k = Tensor::empty({1});
    k.data<float>()[0] = static_cast<float>(std::ceil(seconds / std::max(each, 1e-6)));
    node.all_reduce_max(k);
    return std::max<int64_t>(8, static_cast<int64_t>(k.data<float>()[0]));
  }
};

// The one CPU this rank is bound to, or -1 where its affinity allows several (the scheduler places it).
int bound_cpu() {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) return c;
  return -1;
}

// Where a node's ranks share its cores: the share of a core a rank blocked in a receive still
// takes, against a computing rank's (MachineModel::waiting_rank_share). Two windows of K GEMMs
// each, started by a barrier and long enough for the ranks to take turns on the cores many times:
// in one every rank computes; in the other half of each core's ranks (half_window_part) compute and
// then send a word to a rank that waits for it in a receive (a pipeline stage in its bubble), five
// of each. With R ranks on C < R cores, c of them computing: the windows' medians have the ratio
// max(C, c + w (R - c)) / R.
double measure_waiting_rank_share(comm::Communicator& node, int cores) {
  const int r = node.size();
  SharedGemms gemms;
  const auto work = [&] { gemms.run(); };
  const int64_t calls = gemms.count_lasting(node, cores, 0.3);
  std::vector<int> cpus(static_cast<size_t>(r));
  const int mine = bound_cpu();
  MPI_Allgather(&mine, 1, MPI_INT, cpus.data(), 1, MPI_INT, node.mpi_comm());
  const HalfWindowPart part = half_window_part(cpus, node.rank());
  Tensor word = Tensor::empty({1});
  const auto window = [&](bool half) {
    node.barrier();
    const Clock::time_point start = Clock::now();
    if (!half || part.computes) {
      for (int64_t i = 0; i < calls; ++i) work();
      if (half && part.partner >= 0) node.send(word, part.partner);
    } else {
      node.recv(word, part.partner);
    }
    return seconds_since(start);
  };
  std::vector<double> all, half;
  for (int w = 0; w < 5; ++w) {
    all.push_back(window(false));
    half.push_back(window(true));
  }
  const double t_all = slowest_median(node, all), t_half = slowest_median(node, half);
  const int computing = static_cast<int>(std::lround(node.all_reduce_sum(part.computes ? 1.0 : 0.0)));
  if (r <= computing) return 0.0;
  const double effective = t_half / t_all * r;  // ranks wanting the cores at once in the half window
  return std::clamp((effective - computing) / (r - computing), 0.0, 1.0);
}

// Where ranks share cores, a step's synchronisation after its compute (MachineModel::sync_lag_s,
// sync_wake_s): 25 rounds of K GEMMs (about 30 ms of shared compute, as a small step's backward)
// each followed by a one-word all-reduce. Each round records every rank's arrival at the all-reduce
// and its return: the lag is the slowest arrival less the mean one; the wake-up is the all-reduce's
// time after the last arrival less a barrier-started one's. Medians over the rounds.
std::pair<double, double> measure_step_sync(comm::Communicator& node, int cores) {
  const int r = node.size();
  SharedGemms gemms;
  const auto work = [&] { gemms.run(); };
  const int64_t calls = gemms.count_lasting(node, cores, 0.03);
  Tensor word = Tensor::empty({1});
  std::vector<double> lags, wakes, alone;
  for (int round = 0; round < 25; ++round) {
    node.barrier();
    const Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < calls; ++i) work();
    const double arrive = seconds_since(start);
    node.all_reduce_sum(word);
    const double leave = seconds_since(start);
    const double mean_arrival = node.all_reduce_sum(arrive) / r;
    Tensor last = Tensor::empty({2});  // the last arrival, the last return
    last.data<float>()[0] = static_cast<float>(arrive);
    last.data<float>()[1] = static_cast<float>(leave);
    node.all_reduce_max(last);
    lags.push_back(last.data<float>()[0] - mean_arrival);
    wakes.push_back(last.data<float>()[1] - last.data<float>()[0]);
    node.barrier();
    const Clock::time_point call = Clock::now();
    node.all_reduce_sum(word);
    alone.push_back(seconds_since(call));
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double lag = std::max(0.0, median(lags)), wake = std::max(0.0, median(wakes) - slowest_median(node, alone));
  return {lag, wake};
}

}  // namespace

HalfWindowPart half_window_part(std::span<const int> cpus, int rank) {
  TESSERA_CHECK(rank >= 0 && static_cast<size_t>(rank) < cpus.size(), "half_window_part: rank ", rank, " of ",
                cpus.size());
  std::vector<int> alike;  // the ranks sharing this rank's CPU (or all unbound ones), in order
  for (size_t q = 0; q < cpus.size(); ++q)
    if (cpus[q] == cpus[static_cast<size_t>(rank)]) alike.push_back(static_cast<int>(q));
  const size_t at = static_cast<size_t>(std::find(alike.begin(), alike.end(), rank) - alike.begin());
  if (at % 2 == 1) return {false, alike[at - 1]};
  return {true, at + 1 < alike.size() ? alike[at + 1] : -1};
}

MachineModel calibrate(comm::Communicator& world, const CalibrationOptions& options) {
  MachineModel m;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  m.host = host;
  m.cpu = cpu_name();
  m.gemm_library = kernels::cpu::gemm_library_name();
  m.created = utc_now();
  m.threads_per_rank = omp_get_max_threads();
  m.ranks = world.size();
  // The nodes first: their ranks and cores, and where ranks share cores, what a waiting one takes
  // (and how long a compute window must last for the ranks to share the cores in it).
  MPI_Comm node_comm = MPI_COMM_NULL;
  MPI_Comm_split_type(world.mpi_comm(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &node_comm);
  int local = 0, per_node = 1;
  MPI_Comm_rank(node_comm, &local);
  MPI_Comm_size(node_comm, &per_node);
  int cores = node_cores(node_comm);
  MPI_Allreduce(MPI_IN_PLACE, &cores, 1, MPI_INT, MPI_MIN, world.mpi_comm());  // the smallest node's
  m.cores_per_node = cores;
  int most = per_node, nodes_seen = local == 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, world.mpi_comm());
  MPI_Allreduce(MPI_IN_PLACE, &nodes_seen, 1, MPI_INT, MPI_SUM, world.mpi_comm());
  m.ranks_per_node = most;
  m.nodes = nodes_seen;
  if (m.oversubscription(most) > 1) {  // every node measures at once; the first node's figure is kept
    comm::Communicator node(node_comm, "node");
    double share = measure_waiting_rank_share(node, cores);
    MPI_Bcast(&share, 1, MPI_DOUBLE, 0, world.mpi_comm());
    m.waiting_rank_share = share;
    auto [lag, wake] = measure_step_sync(node, cores);
    double sync[2] = {lag, wake};
    MPI_Bcast(sync, 2, MPI_DOUBLE, 0, world.mpi_comm());
    m.sync_lag_s = sync[0];
    m.sync_wake_s = sync[1];
  }
  MPI_Comm_free(&node_comm);

  const double t = m.oversubscription(most) > 1 ? std::max(options.min_seconds, options.shared_min_seconds)
                                                : options.min_seconds;

  calibrate_kernels(world, m, t);

  // Collectives inside a node: groups of g consecutive node-local ranks; across nodes: one rank
  // per node (the same node-local rank), when the world spans several nodes.
  m.collectives["intra_node"];
  std::vector<int> sizes;
  for (int g = 2; g <= most; g *= 2) sizes.push_back(g);
  if (most > 1 && sizes.back() != most) sizes.push_back(most);
  for (int g : sizes) {
    // The first node's ranks lead (world rank 0 is node rank 0 there); groups that would not be full
    // stay out. Every rank takes part in the splits.
    const bool in_group = local / g < per_node / g;
    const int node_id = world.rank() - local;  // the node's first world rank
    calibrate_collectives(world, m, "intra_node", in_group ? node_id * 1024 + local / g : MPI_UNDEFINED, local, g,
                          world.rank() == 0, options);
  }
  if (m.nodes > 1) {
    // One rank per node: groups of every node's node-local rank k (k < the smallest node's size).
    int fewest = per_node;
    MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_INT, MPI_MIN, world.mpi_comm());
    calibrate_collectives(world, m, "inter_node", local < fewest ? local : MPI_UNDEFINED, world.rank(), m.nodes,
                          world.rank() == 0, options);
  }
  return m;
}

}  // namespace tessera::plan
