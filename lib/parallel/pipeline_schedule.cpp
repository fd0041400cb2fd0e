// Pipeline schedule generators: each lays out the order of compute steps on every stage; lower()
// then wraps every step with the receive it needs and the send it feeds.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace tessera::parallel {

const char* op_name(PipelineOp op) {
  switch (op) {
    case PipelineOp::recv_fwd: return "recv_fwd";
    case PipelineOp::forward: return "forward";
    case PipelineOp::send_fwd: return "send_fwd";
    case PipelineOp::recv_bwd: return "recv_bwd";
    case PipelineOp::backward: return "backward";
    case PipelineOp::send_bwd: return "send_bwd";
    case PipelineOp::backward_w: return "backward_w";
  }
  return "?";
}

bool is_compute(PipelineOp op) {
  return op == PipelineOp::forward || op == PipelineOp::backward || op == PipelineOp::backward_w;
}
bool is_send(PipelineOp op) { return op == PipelineOp::send_fwd || op == PipelineOp::send_bwd; }
bool is_recv(PipelineOp op) { return op == PipelineOp::recv_fwd || op == PipelineOp::recv_bwd; }

std::string PipelineSchedule::describe(const PipelineInstruction& in) const {
  std::string text = std::string(op_name(in.op)) + " mb " + std::to_string(in.micro_batch);
  if (chunks > 1) text += " chunk " + std::to_string(in.chunk);
  return text;
}

std::optional<StageChunk> peer(const PipelineSchedule& s, int stage, const PipelineInstruction& in) {
  int step = 0;
  if (in.op == PipelineOp::send_fwd || in.op == PipelineOp::recv_bwd) step = 1;
  if (in.op == PipelineOp::send_bwd || in.op == PipelineOp::recv_fwd) step = -1;
  const int other = s.virtual_stage({stage, in.chunk}) + step;
  if (step == 0 || other < 0 || other >= s.virtual_stages()) return std::nullopt;
  return s.at_virtual(other);
}

namespace {

// Every program may run at most this many compute steps in all (p x m x v x 3 for zb).
constexpr int64_t kMaxComputeSteps = int64_t{1} << 22;

PipelineSchedule empty_schedule(const std::string& name, int p, int m, int v, bool split) {
  TESSERA_CHECK(p >= 1, "pipeline schedule '", name, "': the number of stages must be at least 1 (got ", p, ")");
  TESSERA_CHECK(m >= 1, "pipeline schedule '", name, "': the number of micro-batches must be at least 1 (got ", m, ")");
  TESSERA_CHECK(v >= 1, "pipeline schedule '", name, "': the number of chunks per stage must be at least 1 (got ", v, ")");
  const int64_t steps = int64_t{p} * m * v * (split ? 3 : 2);
  TESSERA_CHECK(steps <= kMaxComputeSteps, "pipeline schedule '", name, "': ", p, " stages x ", m,
                " micro-batches x ", v, " chunks is too large to lay out (", steps, " compute steps; at most ",
                kMaxComputeSteps, ")");
  PipelineSchedule s;
  s.name = name;
  s.stages = p;
  s.micro_batches = m;
  s.chunks = v;
  s.split_backward = split;
  s.programs.resize(static_cast<size_t>(p));
  return s;
}

using ComputeOrder = std::vector<PipelineInstruction>;  // compute steps only, in program order

// Fills s.programs[stage] from its compute steps: recv_fwd before a forward and send_fwd after it,
// recv_bwd before a backward and send_bwd after it, wherever the pipeline has a stage there.
void lower(PipelineSchedule& s, int stage, const ComputeOrder& order) {
  auto& program = s.programs[static_cast<size_t>(stage)];
  auto emit = [&](PipelineOp op, const PipelineInstruction& step) {
    const PipelineInstruction in{op, step.micro_batch, step.chunk};
    if (is_compute(op) || peer(s, stage, in)) program.push_back(in);
  };
  for (const PipelineInstruction& step : order) {
    if (step.op == PipelineOp::forward) {
      emit(PipelineOp::recv_fwd, step);
      emit(PipelineOp::forward, step);
      emit(PipelineOp::send_fwd, step);
    } else if (step.op == PipelineOp::backward) {
      emit(PipelineOp::recv_bwd, step);
      emit(PipelineOp::backward, step);
      emit(PipelineOp::send_bwd, step);
    } else {
      emit(step.op, step);
    }
  }
}

PipelineInstruction fwd(int mb, int chunk = 0) { return {PipelineOp::forward, mb, chunk}; }
PipelineInstruction bwd(int mb, int chunk = 0) { return {PipelineOp::backward, mb, chunk}; }

// 1F1B's compute order on one stage: warm-up forwards, one forward one backward, cool-down.
ComputeOrder one_f_one_b_order(int p, int m, int stage) {
  const int warmup = std::min(p - 1 - stage, m);
  ComputeOrder order;
  for (int i = 0; i < warmup; ++i) order.push_back(fwd(i));
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back(fwd(warmup + i));
    order.push_back(bwd(i));
  }
  for (int i = m - warmup; i < m; ++i) order.push_back(bwd(i));
  return order;
}

}  // namespace

PipelineSchedule gpipe(int p, int m) {
  PipelineSchedule s = empty_schedule("gpipe", p, m, 1, false);
  for (int stage = 0; stage < p; ++stage) {
    ComputeOrder order;
    for (int i = 0; i < m; ++i) order.push_back(fwd(i));
    for (int i = 0; i < m; ++i) order.push_back(bwd(i));
    lower(s, stage, order);
  }
  return s;
}

PipelineSchedule one_f_one_b(int p, int m) {
  PipelineSchedule s = empty_schedule("1f1b", p, m, 1, false);
  for (int stage = 0; stage < p; ++stage) lower(s, stage, one_f_one_b_order(p, m, stage));
  return s;
}

PipelineSchedule interleaved(int p, int m, int v) {
  PipelineSchedule s = empty_schedule("interleaved", p, m, v, false);
  TESSERA_CHECK(v >= 2, "pipeline schedule 'interleaved' needs at least 2 chunks per stage (got ", v,
                "); with one chunk it is '1f1b'");
  TESSERA_CHECK(m % p == 0, "pipeline schedule 'interleaved' needs the micro-batches to be a multiple of the stages (",
                m, " micro-batches, ", p, " stages)");
  // The k-th forward (backward) of a stage: micro-batches go in rounds of p through the chunks,
  // forwards from the first chunk up, backwards from the last chunk down.
  const int round = p * v;
  auto micro_batch = [&](int k) { return k / round * p + k % p; };
  auto chunk = [&](int k) { return k % round / p; };
  const int total = m * v;
  for (int stage = 0; stage < p; ++stage) {
    const int warmup = std::min(total, (p - 1 - stage) * 2 + (v - 1) * p);
    ComputeOrder order;
    for (int k = 0; k < warmup; ++k) order.push_back(fwd(micro_batch(k), chunk(k)));
    for (int k = 0; k < total - warmup; ++k) {
      order.push_back(fwd(micro_batch(warmup + k), chunk(warmup + k)));
      order.push_back(bwd(micro_batch(k), v - 1 - chunk(k)));
    }
    for (int k = total - warmup; k < total; ++k) order.push_back(bwd(micro_batch(k), v - 1 - chunk(k)));
    lower(s, stage, order);
  }
  return s;
}

PipelineSchedule zero_bubble_h1(int p, int m) {
  PipelineSchedule s = empty_schedule("zb", p, m, 1, true);
  for (int stage = 0; stage < p; ++stage) {
    // W of micro-batch i waits until B of micro-batch i + stage: the later the stage, the longer
    // its W steps are deferred into the cool-down, where 1F1B idles.
    ComputeOrder order;
    int next_w = 0;
    for (const PipelineInstruction& step : one_f_one_b_order(p, m, stage)) {
      order.push_back(step);
      if (step.op == PipelineOp::backward && step.micro_batch >= stage)
        order.push_back({PipelineOp::backward_w, next_w++, 0});
    }
    while (next_w < m) order.push_back({PipelineOp::backward_w, next_w++, 0});
    lower(s, stage, order);
  }
  return s;
}

const char* schedule_names() { return "gpipe|1f1b|interleaved|zb"; }

PipelineSchedule make_schedule(const std::string& name, int p, int m, int v) {
  const bool known = name == "gpipe" || name == "1f1b" || name == "interleaved" || name == "zb";
  TESSERA_CHECK(known, "unknown pipeline schedule '", name, "' (expected ", schedule_names(), ")");
  if (name == "interleaved") return interleaved(p, m, v);
  TESSERA_CHECK(v == 1, "pipeline schedule '", name, "' runs one chunk per stage (got ", v,
                " virtual stages per stage); only 'interleaved' runs several");
  if (name == "gpipe") return gpipe(p, m);
  if (name == "1f1b") return one_f_one_b(p, m);
  return zero_bubble_h1(p, m);
}

size_t next_receive(const std::vector<PipelineInstruction>& program, size_t i) {
  for (size_t j = i + 1; j < program.size(); ++j)
    if (is_recv(program[j].op)) return j;
  return program.size();
}

bool releases_activations(const PipelineSchedule& s, const std::vector<PipelineInstruction>& program, size_t i) {
  const PipelineOp op = program[i].op;
  if (s.split_backward) return op == PipelineOp::backward_w;
  const bool sends_next = i + 1 < program.size() && program[i + 1].op == PipelineOp::send_bwd;
  return (op == PipelineOp::backward && !sends_next) || op == PipelineOp::send_bwd;
}

// A bound from the programs alone: a send to stage q is surely complete once this stage has
// received a message that q sent after waiting for it (q's program receives it earlier than it
// sends the other), so every copy counts until such a receive.
int message_copies_in_flight(const PipelineSchedule& schedule, int stage) {
  const auto position = [&](int q, PipelineOp op, int micro, int chunk) {
    const std::vector<PipelineInstruction>& program = schedule.programs.at(q);
    for (size_t i = 0; i < program.size(); ++i)
      if (program[i].op == op && program[i].micro_batch == micro && program[i].chunk == chunk) return i;
    throw Error("pipeline schedule: stage " + std::to_string(q) + " lacks the other end of a message");
  };
  std::vector<std::pair<int, size_t>> in_flight;  // (peer stage, where the peer receives it)
  size_t peak = 0;
  for (const PipelineInstruction& in : schedule.programs.at(stage)) {
    const std::optional<StageChunk> other = peer(schedule, stage, in);
    if (!other) continue;
    if (is_send(in.op)) {
      const PipelineOp receive = in.op == PipelineOp::send_fwd ? PipelineOp::recv_fwd : PipelineOp::recv_bwd;
      in_flight.push_back({other->stage, position(other->stage, receive, in.micro_batch, other->chunk)});
      peak = std::max(peak, in_flight.size());
    } else if (is_recv(in.op)) {
      const PipelineOp send = in.op == PipelineOp::recv_fwd ? PipelineOp::send_fwd : PipelineOp::send_bwd;
      const size_t sent_at = position(other->stage, send, in.micro_batch, other->chunk);
      std::erase_if(in_flight, [&](const std::pair<int, size_t>& f) { return f.first == other->stage && f.second < sent_at; });
    }
  }
  return static_cast<int>(peak);
}

}  // namespace tessera::parallel
