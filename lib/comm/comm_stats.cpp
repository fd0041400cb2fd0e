// CommStats: per-operation counters of a communicator group.
#include "comm/comm_stats.h"

#include <cstdio>

namespace tessera::comm {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce:
      return "all_reduce";
    case CommOp::reduce_scatter:
      return "reduce_scatter";
    case CommOp::all_gather:
      return "all_gather";
    case CommOp::all_to_all:
      return "all_to_all";
    case CommOp::broadcast:
      return "broadcast";
    case CommOp::reduce:
      return "reduce";
    case CommOp::send:
      return "send";
    case CommOp::recv:
      return "recv";
    case CommOp::barrier:
      return "barrier";
  }
  return "unknown";
}

void CommStats::record(CommOp op, int64_t op_bytes, double op_ms) {
  OpStats& s = ops_[static_cast<int>(op)];
  ++s.calls;
  s.bytes += op_bytes;
  s.ms += op_ms;
  ++calls_;
  bytes_ += op_bytes;
  ms_ += op_ms;
}

void CommStats::reset() {
  ops_ = {};
  calls_ = 0;
  bytes_ = 0;
  ms_ = 0;
}

std::string CommStats::summary() const {
  std::string line = group_ + ":";
  bool any = false;
  for (int i = 0; i < kCommOps; ++i) {
    const OpStats& s = ops_[i];
    if (s.calls == 0) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s %s %lld call%s %.3f MB %.3f ms", any ? "," : "",
                  comm_op_name(static_cast<CommOp>(i)), static_cast<long long>(s.calls),
                  s.calls == 1 ? "" : "s", static_cast<double>(s.bytes) / 1e6, s.ms);
    line += buf;
    any = true;
  }
  if (!any) line += " no communication";
  return line;
}

}  // namespace tessera::comm
