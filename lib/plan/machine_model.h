// MachineModel: what the time model (plan/time_model.h) knows of a machine, as `parallel_plan
// calibrate` measured it and machine.json stores it: GEMM rates by shape class and precision,
// memory-copy bandwidth, the step's other kernels per element, and each collective as latency +
// bytes / bandwidth per group size, inside a node and across nodes. Plain JSON (format
// "tessera-machine", version kMachineFormatVersion); a file is checked whole before it is trusted.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::plan {

inline constexpr const char* kMachineFormat = "tessera-machine";
inline constexpr int kMachineFormatVersion = 1;

// A GEMM class: products of at most max_flops FLOPs (2 M N K) compute at flops_per_s with their
// operands in cache (the last class of a precision takes every larger product); the time model adds
// the operands' traffic (MachineModel::operand_seconds).
struct GemmClass {
  std::string name;  // "small", "medium", "large"
  double max_flops = 0;
  double flops_per_s = 0;
};

// One collective on one group size: seconds = latency_s + bytes x seconds_per_byte, bytes as the
// metrics' comm_bytes count them (all-reduce: the tensor; all-gather: the output; reduce-scatter and
// all-to-all: the input; send/recv: the message).
struct CollectiveFit {
  double latency_s = 0;
  double seconds_per_byte = 0;
  double seconds(double bytes) const { return latency_s + bytes * seconds_per_byte; }
};

// The collectives the time model uses, by the names machine.json keys them with.
inline const std::vector<std::string>& collective_names() {
  static const std::vector<std::string> names = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                 "send_recv"};
  return names;
}
// Per-element kernel classes (seconds per element): norm (layernorm/rmsnorm rows), softmax (the
// loss over the logits), elementwise (activations, residual adds), adamw (per parameter updated).
// attention is a rate like a GEMM's: its FLOPs per second (forward; backward counts 2.5 times).
inline const std::vector<std::string>& kernel_class_names() {
  static const std::vector<std::string> names = {"norm", "softmax", "elementwise", "adamw"};
  return names;
}

struct MachineModel {
  // identity
  std::string host, cpu, gemm_library, created;
  int threads_per_rank = 1, ranks = 1, ranks_per_node = 1, nodes = 1;
  // The cores a node's ranks may run on (the union of their CPU affinity masks at calibration);
  // 0: not recorded (files older than the field, hand-written ones), read as a core per thread.
  // Optional in the file ("machine.cores_per_node").
  int cores_per_node = 0;
  // Where ranks share cores: the share of a core a rank waiting for a message still takes, against
  // a computing rank's (0: it gives its share to the ranks that compute; 1: it spins as hard as
  // they compute). Optional in the file ("waiting_rank_share", calibrated where oversubscribed);
  // 0 where absent.
  double waiting_rank_share = 0;
  // Where ranks share cores, what a step's synchronisation after its compute costs beyond the
  // collectives' own times: the slowest rank's lag behind the mean (the scheduler does not share the
  // cores evenly over tens of milliseconds, and the step waits for the last rank), and the wake-up
  // of each step-end collective (its members descheduled while they waited). Optional in the file
  // ("sync_lag_s", "sync_wake_s", calibrated where oversubscribed); 0 where absent.
  double sync_lag_s = 0, sync_wake_s = 0;
  // compute
  std::map<std::string, std::vector<GemmClass>> gemm;  // "f32", "bf16" -> classes by max_flops
  double attention_flops_per_s = 0;
  std::map<std::string, double> kernel_seconds_per_element;
  double copy_bytes_per_s = 0;
  // Where the GEMM rates are measured with their operands in cache (a CPU calibration), the bandwidth
  // at which a step's products read and write their operands beyond that, per rank: one way of a
  // lone rank's copy bandwidth over the ranks sharing a core. Optional in the file
  // ("operand_bytes_per_s"); 0 where absent (a GPU's GEMM rates, written from its specifications or
  // measured on cold operands, include the traffic).
  double operand_bytes_per_s = 0;
  double kernel_call_s = 0;  // the fixed cost of one kernel call (dispatch, threads' start), any size
  // communication: "intra_node" / "inter_node" -> collective -> group size -> fit
  std::map<std::string, std::map<std::string, std::map<int, CollectiveFit>>> collectives;

  // The rate of a GEMM of `flops` FLOPs under `precision` ("f32" or "bf16"; bf16 falls back to f32
  // where it was not measured).
  double gemm_rate(const std::string& precision, double flops) const;
  double kernel_seconds(const std::string& kind) const;  // throws naming a class the file lacks
  // Seconds to bring `bytes` of a GEMM's operands in from memory or write them out, at
  // operand_bytes_per_s; 0 where the file has none (its GEMM rates include the traffic).
  double operand_seconds(double bytes) const { return operand_bytes_per_s > 0 ? bytes / operand_bytes_per_s : 0; }
  // The fit of `op` on a group of `size` ranks, inside a node or across nodes: the measured size,
  // else the nearest measured one rescaled as a ring (latency x (g-1), bandwidth term x (g-1)/g).
  // Throws naming what the file lacks (no collective measured: calibrate with more ranks).
  CollectiveFit collective(const std::string& op, int size, bool across_nodes) const;
  // How many times over a node's cores `ranks_per_node` ranks of threads_per_rank threads each
  // subscribe them: ranks_per_node x threads_per_rank / cores_per_node, at least 1 (1 where
  // cores_per_node is not recorded). Above 1, ranks share cores (plan/time_model.h says what changes).
  double oversubscription(int ranks_per_node) const;
};

std::string to_json(const MachineModel& m);  // pretty-printed
// Reads and checks a machine file: the format and version, every field's presence and sign.
// Throws naming the file and the first problem.
MachineModel read_machine_file(const std::string& path);
MachineModel parse_machine_json(const std::string& text, const std::string& where);

}  // namespace tessera::plan
