// MachineModel: lookups for the time model, and machine.json written and read back with every
// field checked (nlohmann-json).
#include "plan/machine_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::plan {
namespace {

using nlohmann::json;

const char* domain(bool across_nodes) { return across_nodes ? "inter_node" : "intra_node"; }

// A field of `j` that must be there with the given type; `what` names it in the message.
const json& field(const json& j, const std::string& key, const std::string& what, const std::string& where) {
  TESSERA_CHECK(j.is_object() && j.contains(key), where, ": machine file lacks ", what, key);
  return j.at(key);
}

double positive(const json& j, const std::string& key, const std::string& what, const std::string& where,
                bool zero_ok = false) {
  const json& v = field(j, key, what, where);
  TESSERA_CHECK(v.is_number(), where, ": ", what, key, " must be a number, got ", v.dump());
  const double x = v.get<double>();
  TESSERA_CHECK(std::isfinite(x) && (x > 0 || (zero_ok && x == 0)), where, ": ", what, key, " must be ",
                zero_ok ? "at least 0" : "positive", ", got ", v.dump());
  return x;
}

std::string text(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, "", where);
  TESSERA_CHECK(v.is_string(), where, ": ", key, " must be a string, got ", v.dump());
  return v.get<std::string>();
}

int whole(const json& j, const std::string& key, const std::string& where) {
  const json& v = field(j, key, "", where);
  TESSERA_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= (1 << 24), where, ": ", key,
                " must be a whole number >= 1, got ", v.dump());
  return v.get<int>();
}

}  // namespace

double MachineModel::gemm_rate(const std::string& precision, double flops) const {
  auto it = gemm.find(precision);
  if (it == gemm.end()) it = gemm.find("f32");
  TESSERA_CHECK(it != gemm.end() && !it->second.empty(), "machine file: no GEMM rate for ", precision, " or f32");
  for (const GemmClass& c : it->second)
    if (flops <= c.max_flops) return c.flops_per_s;
  return it->second.back().flops_per_s;
}

double MachineModel::kernel_seconds(const std::string& kind) const {
  const auto it = kernel_seconds_per_element.find(kind);
  TESSERA_CHECK(it != kernel_seconds_per_element.end(), "machine file: no per-element cost of the ", kind, " kernels");
  return it->second;
}

CollectiveFit MachineModel::collective(const std::string& op, int size, bool across_nodes) const {
  const auto d = collectives.find(domain(across_nodes));
  const auto o = d == collectives.end() ? decltype(d->second.end()){} : d->second.find(op);
  TESSERA_CHECK(d != collectives.end() && o != d->second.end() && !o->second.empty(), "machine file: no ", op,
                " measured ", across_nodes ? "across nodes" : "inside a node", " (calibrated on ", ranks, " rank(s), ",
                nodes, " node(s)): run parallel_plan calibrate under mpirun with the ranks the search is for",
                across_nodes ? ", spanning at least two nodes" : "");
  const std::map<int, CollectiveFit>& sizes = o->second;
  if (op == "send_recv") return sizes.begin()->second;  // a message between two ranks, in any group
  if (const auto exact = sizes.find(size); exact != sizes.end()) return exact->second;
  // The nearest measured size, rescaled as a ring algorithm scales.
  auto nearest = sizes.begin();
  for (auto s = sizes.begin(); s != sizes.end(); ++s)
    if (std::abs(s->first - size) < std::abs(nearest->first - size)) nearest = s;
  const double g0 = nearest->first, g = size;
  CollectiveFit fit = nearest->second;
  if (g0 > 1 && g > 1) {
    fit.latency_s *= (g - 1) / (g0 - 1);
    fit.seconds_per_byte *= ((g - 1) / g) / ((g0 - 1) / g0);
  }
  return fit;
}

double MachineModel::oversubscription(int ranks_per_node) const {
  if (cores_per_node <= 0) return 1.0;
  return std::max(1.0, static_cast<double>(ranks_per_node) * threads_per_rank / cores_per_node);
}

std::string to_json(const MachineModel& m) {
  json j;
  j["format"] = kMachineFormat;
  j["format_version"] = kMachineFormatVersion;
  j["machine"] = {{"host", m.host},   {"cpu", m.cpu},     {"gemm_library", m.gemm_library},
                  {"created", m.created}, {"threads_per_rank", m.threads_per_rank}, {"ranks", m.ranks},
                  {"ranks_per_node", m.ranks_per_node}, {"nodes", m.nodes}};
  if (m.cores_per_node > 0) j["machine"]["cores_per_node"] = m.cores_per_node;
  for (const auto& [precision, classes] : m.gemm)
    for (const GemmClass& c : classes)
      j["gemm"][precision].push_back({{"class", c.name}, {"max_flops", c.max_flops}, {"flops_per_s", c.flops_per_s}});
  j["attention_flops_per_s"] = m.attention_flops_per_s;
  j["copy_bytes_per_s"] = m.copy_bytes_per_s;
  if (m.operand_bytes_per_s > 0) j["operand_bytes_per_s"] = m.operand_bytes_per_s;
  j["kernel_call_s"] = m.kernel_call_s;
  if (m.waiting_rank_share > 0) j["waiting_rank_share"] = m.waiting_rank_share;
  if (m.sync_lag_s > 0) j["sync_lag_s"] = m.sync_lag_s;
  if (m.sync_wake_s > 0) j["sync_wake_s"] = m.sync_wake_s;
  for (const auto& [k, s] : m.kernel_seconds_per_element) j["kernel_seconds_per_element"][k] = s;
  j["collectives"] = json::object();
  for (const auto& [d, ops] : m.collectives)
    for (const auto& [op, sizes] : ops)
      for (const auto& [size, fit] : sizes)
        j["collectives"][d][op].push_back(
            {{"group_size", size}, {"latency_s", fit.latency_s}, {"seconds_per_byte", fit.seconds_per_byte}});
  return j.dump(2) + "\n";
}

MachineModel parse_machine_json(const std::string& content, const std::string& where) {
  json j;
  try {
    j = json::parse(content);
  } catch (const json::parse_error& e) {
    fail(where, ": not a machine file (malformed JSON: ", e.what(), ")");
  }
  TESSERA_CHECK(j.is_object() && j.contains("format") && j["format"] == kMachineFormat, where,
                ": not a tessera machine file (its \"format\" is not \"", kMachineFormat,
                "\"; write one with parallel_plan calibrate)");
  const json& version = field(j, "format_version", "", where);
  TESSERA_CHECK(version.is_number_integer() && version.get<int>() == kMachineFormatVersion, where,
                ": machine file format_version ", version.dump(), "; this build reads version ", kMachineFormatVersion,
                " (calibrate again)");
  MachineModel m;
  const json& id = field(j, "machine", "", where);
  m.host = text(id, "host", where);
  m.cpu = text(id, "cpu", where);
  m.gemm_library = text(id, "gemm_library", where);
  m.created = text(id, "created", where);
  m.threads_per_rank = whole(id, "threads_per_rank", where);
  m.ranks = whole(id, "ranks", where);
  m.ranks_per_node = whole(id, "ranks_per_node", where);
  m.nodes = whole(id, "nodes", where);
  if (id.contains("cores_per_node")) m.cores_per_node = whole(id, "cores_per_node", where);  // optional: older files lack it
  const json& gemm = field(j, "gemm", "", where);
  TESSERA_CHECK(gemm.is_object() && gemm.contains("f32"), where, ": machine file lacks gemm.f32");
  for (const auto& [precision, classes] : gemm.items()) {
    TESSERA_CHECK(classes.is_array() && !classes.empty(), where, ": gemm.", precision, " must be a list of classes");
    double last = 0;
    for (const json& c : classes) {
      const std::string what = "gemm." + precision + "[].";
      GemmClass g{text(c, "class", where), positive(c, "max_flops", what, where), positive(c, "flops_per_s", what, where)};
      TESSERA_CHECK(g.max_flops > last, where, ": ", what, "max_flops must increase from class to class");
      last = g.max_flops;
      m.gemm[precision].push_back(g);
    }
  }
  m.attention_flops_per_s = positive(j, "attention_flops_per_s", "", where);
  m.copy_bytes_per_s = positive(j, "copy_bytes_per_s", "", where);
  if (j.contains("operand_bytes_per_s")) m.operand_bytes_per_s = positive(j, "operand_bytes_per_s", "", where);  // optional
  m.kernel_call_s = positive(j, "kernel_call_s", "", where, true);
  if (j.contains("waiting_rank_share")) {  // optional: older files and one-core-per-rank machines lack it
    m.waiting_rank_share = positive(j, "waiting_rank_share", "", where, true);
    TESSERA_CHECK(m.waiting_rank_share <= 1, where, ": waiting_rank_share must be at most 1, got ", m.waiting_rank_share);
  }
  // optional, as waiting_rank_share
  if (j.contains("sync_lag_s")) m.sync_lag_s = positive(j, "sync_lag_s", "", where, true);
  if (j.contains("sync_wake_s")) m.sync_wake_s = positive(j, "sync_wake_s", "", where, true);
  const json& kernels = field(j, "kernel_seconds_per_element", "", where);
  for (const std::string& k : kernel_class_names())
    m.kernel_seconds_per_element[k] = positive(kernels, k, "kernel_seconds_per_element.", where, true);
  const json& colls = field(j, "collectives", "", where);
  TESSERA_CHECK(colls.is_object(), where, ": collectives must be an object");
  for (const auto& [d, ops] : colls.items()) {
    TESSERA_CHECK(d == "intra_node" || d == "inter_node", where, ": collectives.", d,
                  ": expected intra_node or inter_node");
    for (const auto& [op, fits] : ops.items()) {
      bool known = false;
      for (const std::string& n : collective_names()) known |= n == op;
      TESSERA_CHECK(known, where, ": collectives.", d, ".", op, ": not a collective the time model knows");
      TESSERA_CHECK(fits.is_array(), where, ": collectives.", d, ".", op, " must be a list");
      for (const json& f : fits) {
        const std::string what = "collectives." + d + "." + op + "[].";
        const int size = whole(f, "group_size", where);
        m.collectives[d][op][size] = {positive(f, "latency_s", what, where, true),
                                      positive(f, "seconds_per_byte", what, where, true)};
      }
    }
  }
  return m;
}

MachineModel read_machine_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, path, ": cannot read the machine file (write one with parallel_plan calibrate --output ", path, ")");
  std::ostringstream content;
  content << in.rdbuf();
  return parse_machine_json(content.str(), path);
}

}  // namespace tessera::plan
