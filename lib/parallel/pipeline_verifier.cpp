// The pipeline verifier's simulation: every stage runs its program as far as its receives allow,
// round after round, until all are done or none can move (a deadlock); then the checks at the end.
#include "parallel/pipeline_verifier.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace tessera::parallel {
namespace {

using Kind = PipelineProblem::Kind;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::deadlock: return "deadlock";
    case Kind::mismatch: return "mismatch";
    case Kind::order: return "order";
  }
  return "?";
}

// What has happened to one micro-batch on one virtual stage.
struct MicroBatchState {
  bool received_input = false, forward = false, sent_output = false;
  bool received_grad = false, backward = false, sent_grad = false, backward_w = false;
};

// A message is known by its direction, the virtual stage it goes to and its micro-batch.
struct MessageKey {
  bool activation;  // send_fwd's activation, or send_bwd's gradient
  int to_virtual_stage;
  int micro_batch;
  auto operator<=>(const MessageKey&) const = default;
};

struct Message {
  int64_t time;
  int sender;
  int sender_index;
  bool received = false;
};

class Simulation {
 public:
  Simulation(const PipelineSchedule& s, std::vector<StepCosts> costs)
      : s_(s), costs_(std::move(costs)), pc_(s.programs.size()), clock_(s.programs.size()), live_(s.programs.size()),
        awaiting_(s.programs.size()),
        states_(static_cast<size_t>(s.virtual_stages()) * static_cast<size_t>(s.micro_batches)) {
    report_.stages.resize(s.programs.size());
  }

  PipelineReport run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int stage = 0; stage < stages(); ++stage)
        while (!finished(stage) && step(stage)) progress = true;
    }
    report_blocked_stages();
    for (int stage = 0; stage < stages(); ++stage)
      if (finished(stage)) report_missing_steps(stage);
    report_unreceived();
    statistics();
    return std::move(report_);
  }

 private:
  int stages() const { return static_cast<int>(s_.programs.size()); }
  const std::vector<PipelineInstruction>& program(int stage) const { return s_.programs[static_cast<size_t>(stage)]; }
  size_t& pc(int stage) { return pc_[static_cast<size_t>(stage)]; }
  bool finished(int stage) const { return pc_[static_cast<size_t>(stage)] >= program(stage).size(); }
  MicroBatchState& state(int stage, const PipelineInstruction& in) {
    return states_[static_cast<size_t>(s_.virtual_stage({stage, in.chunk})) * static_cast<size_t>(s_.micro_batches) +
                   static_cast<size_t>(in.micro_batch)];
  }

  void problem(Kind kind, int stage, int index, const PipelineInstruction& in, const std::string& what) {
    std::string where = "stage " + std::to_string(stage);
    if (index >= 0) where += ", instruction " + std::to_string(index);
    report_.problems.push_back(
        {kind, stage, index, where + " (" + s_.describe(in) + "): " + kind_name(kind) + ": " + what});
  }

  // Runs the stage's next instruction; false when it is a receive whose message has not been sent.
  // An instruction that is wrong is reported and skipped (compute() and communicate() return
  // skip(...), true, for it).
  bool step(int stage) {
    const int index = static_cast<int>(pc(stage));
    const PipelineInstruction& in = program(stage)[static_cast<size_t>(index)];
    auto skip = [&](Kind kind, const std::string& what) {
      problem(kind, stage, index, in, what);
      return true;
    };
    bool advanced = true;
    if (in.micro_batch < 0 || in.micro_batch >= s_.micro_batches)
      skip(Kind::order, "no such micro-batch (the schedule has " + std::to_string(s_.micro_batches) + ")");
    else if (in.chunk < 0 || in.chunk >= s_.chunks)
      skip(Kind::order, "no such chunk (stages hold " + std::to_string(s_.chunks) + ")");
    else
      advanced = is_compute(in.op) ? compute(stage, in, skip) : communicate(stage, in, skip);
    if (advanced) ++pc(stage);
    return advanced;
  }

  template <typename Skip>
  bool communicate(int stage, const PipelineInstruction& in, Skip& skip) {
    MicroBatchState& mb = state(stage, in);
    const bool activation = in.op == PipelineOp::send_fwd || in.op == PipelineOp::recv_fwd;
    const std::optional<StageChunk> other = peer(s_, stage, in);
    if (!other) {
      return skip(Kind::mismatch, activation == is_send(in.op)
                                      ? "there is no next virtual stage (this is the last one)"
                                      : "there is no previous virtual stage (this is the first one)");
    }
    if (is_recv(in.op)) {
      bool& received = activation ? mb.received_input : mb.received_grad;
      if (received) return skip(Kind::order, "received twice");
      const auto it = messages_.find({activation, s_.virtual_stage({stage, in.chunk}), in.micro_batch});
      if (it == messages_.end()) return false;
      it->second.received = received = true;
      clock_[static_cast<size_t>(stage)] = std::max(clock_[static_cast<size_t>(stage)], it->second.time);
      return true;
    }
    if (!(activation ? mb.forward : mb.backward))
      return skip(Kind::order, std::string("sends the ") + (activation ? "activation of a forward" : "gradient of a backward") +
                                   " that has not run on this stage and chunk");
    bool& sent = activation ? mb.sent_output : mb.sent_grad;
    if (sent) return skip(Kind::order, "sent twice");
    sent = true;
    messages_[{activation, s_.virtual_stage(*other), in.micro_batch}] =
        {clock_[static_cast<size_t>(stage)], stage, static_cast<int>(pc(stage))};
    return true;
  }

  template <typename Skip>
  bool compute(int stage, const PipelineInstruction& in, Skip& skip) {
    MicroBatchState& mb = state(stage, in);
    const int vstage = s_.virtual_stage({stage, in.chunk});
    const size_t st = static_cast<size_t>(stage);
    int cost = 0;
    if (in.op == PipelineOp::forward) {
      if (mb.forward) return skip(Kind::order, "forward run twice");
      if (vstage > 0 && !mb.received_input)
        return skip(Kind::order, "forward before its input was received (no recv_fwd before it)");
      mb.forward = true;
      cost = costs_[st].forward;
      ++live_[st];
      ++awaiting_[st];
    } else if (in.op == PipelineOp::backward) {
      if (mb.backward) return skip(Kind::order, "backward run twice");
      if (!mb.forward) return skip(Kind::order, "backward before its forward");
      if (vstage + 1 < s_.virtual_stages() && !mb.received_grad)
        return skip(Kind::order, "backward before its output gradient was received (no recv_bwd before it)");
      mb.backward = true;
      cost = s_.split_backward ? costs_[st].backward_input : costs_[st].backward_input + costs_[st].backward_weight;
      --awaiting_[st];
      if (!s_.split_backward) --live_[st];
    } else {
      if (!s_.split_backward) return skip(Kind::order, "backward_w in a schedule whose backward is not split");
      if (mb.backward_w) return skip(Kind::order, "backward_w run twice");
      if (!mb.backward) return skip(Kind::order, "backward_w before its backward");
      mb.backward_w = true;
      cost = costs_[st].backward_weight;
      --live_[st];
    }
    StageReport& r = report_.stages[st];
    r.timeline.push_back({static_cast<int>(clock_[st]), cost, in});
    clock_[st] += cost;
    r.busy += cost;
    r.peak_live = std::max(r.peak_live, live_[st]);
    r.peak_awaiting_backward = std::max(r.peak_awaiting_backward, awaiting_[st]);
    return true;
  }

  // First index >= from in the stage's program holding `in`, else the first anywhere, else -1.
  int find(int stage, const PipelineInstruction& in, size_t from) const {
    const auto& prog = program(stage);
    auto at = std::find(prog.begin() + static_cast<std::ptrdiff_t>(std::min(from, prog.size())), prog.end(), in);
    if (at == prog.end()) at = std::find(prog.begin(), prog.end(), in);
    return at == prog.end() ? -1 : static_cast<int>(at - prog.begin());
  }

  // The stages still blocked. The causes come first: stages waiting for a send that never comes,
  // then stages that wait for each other in a cycle (named), then the stages stalled behind them.
  void report_blocked_stages() {
    const auto first = static_cast<std::ptrdiff_t>(report_.problems.size());
    std::vector<int> waits_on(static_cast<size_t>(stages()), -1);
    for (int stage = 0; stage < stages(); ++stage)
      if (!finished(stage)) waits_on[static_cast<size_t>(stage)] = report_blocked(stage);
    auto cycle = [&](int stage) {  // "stage 2 -> stage 3 -> stage 2", or "" when not on a cycle
      std::string path = "stage " + std::to_string(stage);
      for (int at = waits_on[static_cast<size_t>(stage)], hops = 0; at >= 0 && hops < stages(); ++hops) {
        path += " -> stage " + std::to_string(at);
        if (at == stage) return path;
        at = waits_on[static_cast<size_t>(at)];
      }
      return std::string();
    };
    const auto blocked = report_.problems.begin() + first;
    for (auto it = blocked; it != report_.problems.end(); ++it)
      if (it->kind == Kind::deadlock && !cycle(it->stage).empty()) it->message += " (cycle: " + cycle(it->stage) + ")";
    const auto deadlocks = std::stable_partition(blocked, report_.problems.end(),
                                                 [](const PipelineProblem& p) { return p.kind != Kind::deadlock; });
    std::stable_partition(deadlocks, report_.problems.end(),
                          [&](const PipelineProblem& p) { return !cycle(p.stage).empty(); });
  }

  // A stage stuck on a receive: whom it waits for, and why that send does not come. Returns the
  // stage it waits for when that stage is blocked too (a deadlock), else -1.
  int report_blocked(int stage) {
    const int index = static_cast<int>(pc(stage));
    const PipelineInstruction& in = program(stage)[static_cast<size_t>(index)];
    const StageChunk from = *peer(s_, stage, in);
    const PipelineOp send = in.op == PipelineOp::recv_fwd ? PipelineOp::send_fwd : PipelineOp::send_bwd;
    const PipelineInstruction wanted{send, in.micro_batch, from.chunk};
    const std::string waits = "waits for " + s_.describe(wanted) + " from stage " + std::to_string(from.stage);
    const int at = find(from.stage, wanted, pc(from.stage));
    if (at < 0) {
      problem(Kind::mismatch, stage, index, in, waits + ", which stage " + std::to_string(from.stage) + " never sends");
      return -1;
    }
    if (static_cast<size_t>(at) < pc(from.stage)) {
      problem(Kind::mismatch, stage, index, in, waits + ", whose instruction " + std::to_string(at) + " failed");
      return -1;
    }
    const size_t blocked_at = pc(from.stage);
    problem(Kind::deadlock, stage, index, in,
            waits + " (its instruction " + std::to_string(at) + "), but stage " + std::to_string(from.stage) +
                " is blocked at instruction " + std::to_string(blocked_at) + " (" +
                s_.describe(program(from.stage)[blocked_at]) + ")");
    return from.stage;
  }

  void report_missing_steps(int stage) {
    for (int chunk = 0; chunk < s_.chunks; ++chunk) {
      for (int i = 0; i < s_.micro_batches; ++i) {
        const MicroBatchState& mb = state(stage, {PipelineOp::forward, i, chunk});
        const auto missing = [&](bool done, PipelineOp op) {
          if (!done) problem(Kind::order, stage, -1, {op, i, chunk}, "never runs");
        };
        missing(mb.forward, PipelineOp::forward);
        missing(mb.backward, PipelineOp::backward);
        if (s_.split_backward) missing(mb.backward_w, PipelineOp::backward_w);
      }
    }
  }

  // A message sent whose receiver has no receive for it in what is left of its program.
  void report_unreceived() {
    for (const auto& [key, message] : messages_) {
      if (message.received) continue;
      const StageChunk to = s_.at_virtual(key.to_virtual_stage);
      const PipelineOp recv = key.activation ? PipelineOp::recv_fwd : PipelineOp::recv_bwd;
      const auto& prog = program(to.stage);
      const PipelineInstruction wanted{recv, key.micro_batch, to.chunk};
      if (std::find(prog.begin() + static_cast<std::ptrdiff_t>(pc(to.stage)), prog.end(), wanted) != prog.end())
        continue;
      const PipelineInstruction& sent = program(message.sender)[static_cast<size_t>(message.sender_index)];
      std::string where = "stage " + std::to_string(to.stage);
      if (s_.chunks > 1) where += " chunk " + std::to_string(to.chunk);
      problem(Kind::mismatch, message.sender, message.sender_index, sent,
              "its message to " + where + " is never received (no " + s_.describe(wanted) + " there)");
    }
  }

  void statistics() {
    int64_t busy = 0;
    for (size_t st = 0; st < clock_.size(); ++st) {
      report_.makespan = std::max(report_.makespan, clock_[st]);
      busy += report_.stages[st].busy;
    }
    const int64_t area = report_.makespan * stages();
    report_.idle = area - busy;
    report_.bubble_fraction = area > 0 ? static_cast<double>(report_.idle) / static_cast<double>(area) : 0.0;
  }

  const PipelineSchedule& s_;
  std::vector<StepCosts> costs_;  // per stage
  std::vector<size_t> pc_;       // per stage: the next instruction
  std::vector<int64_t> clock_;   // per stage: when it is free
  std::vector<int> live_, awaiting_;
  std::vector<MicroBatchState> states_;  // [virtual stage][micro-batch]
  std::map<MessageKey, Message> messages_;
  PipelineReport report_;
};

std::string cell_label(const PipelineSchedule& s, const PipelineInstruction& in) {
  const char letter = in.op == PipelineOp::forward ? 'F' : in.op == PipelineOp::backward ? 'B' : 'W';
  std::string label(1, letter);
  label += std::to_string(in.micro_batch);
  if (s.chunks > 1) {
    label += ':';
    label += std::to_string(in.chunk);
  }
  return label;
}

std::string padded(const std::string& text, size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}

}  // namespace

PipelineReport verify_schedule(const PipelineSchedule& schedule, const StepCosts& costs) {
  TESSERA_CHECK(static_cast<int>(schedule.programs.size()) == schedule.stages, "pipeline schedule '", schedule.name,
                "' has ", schedule.programs.size(), " programs for ", schedule.stages, " stages");
  TESSERA_CHECK(schedule.stages >= 1 && schedule.micro_batches >= 1 && schedule.chunks >= 1, "pipeline schedule '",
                schedule.name, "' has no stages, micro-batches or chunks");
  return Simulation(schedule, std::vector<StepCosts>(static_cast<size_t>(schedule.stages), costs)).run();
}

PipelineReport verify_schedule(const PipelineSchedule& schedule, const std::vector<StepCosts>& per_stage) {
  TESSERA_CHECK(static_cast<int>(per_stage.size()) == schedule.stages, "pipeline schedule '", schedule.name, "': ",
                per_stage.size(), " stages' costs for ", schedule.stages, " stages");
  TESSERA_CHECK(static_cast<int>(schedule.programs.size()) == schedule.stages, "pipeline schedule '", schedule.name,
                "' has ", schedule.programs.size(), " programs for ", schedule.stages, " stages");
  TESSERA_CHECK(schedule.stages >= 1 && schedule.micro_batches >= 1 && schedule.chunks >= 1, "pipeline schedule '",
                schedule.name, "' has no stages, micro-batches or chunks");
  return Simulation(schedule, per_stage).run();
}

void check_schedule(const PipelineSchedule& schedule, const StepCosts& costs) {
  const PipelineReport report = verify_schedule(schedule, costs);
  if (report.ok()) return;
  const size_t more = report.problems.size() - 1;
  fail("pipeline schedule '", schedule.name, "' (p=", schedule.stages, ", m=", schedule.micro_batches,
       ", v=", schedule.chunks, "): ", report.problems.front().message,
       more ? " (and " + std::to_string(more) + " more problems)" : std::string());
}

std::string timeline_text(const PipelineSchedule& schedule, const PipelineReport& report) {
  size_t width = std::to_string(std::max<int64_t>(report.makespan - 1, 0)).size();
  for (const StageReport& stage : report.stages)
    for (const TimedStep& t : stage.timeline) width = std::max(width, cell_label(schedule, t.step).size());
  const size_t margin = ("stage " + std::to_string(report.stages.size() - 1)).size() + 1;
  auto line = [&](const std::string& head, const std::vector<std::string>& cells) {
    std::string row = padded(head, margin);
    for (const std::string& cell : cells) row += padded(cell, width + 1);
    while (row.back() == ' ') row.pop_back();
    return row + "\n";
  };
  std::vector<std::string> times;
  for (int64_t t = 0; t < report.makespan; ++t) times.push_back(std::to_string(t));
  std::string text = line("time", times);
  for (size_t st = 0; st < report.stages.size(); ++st) {
    std::vector<std::string> cells(static_cast<size_t>(report.makespan), ".");
    for (const TimedStep& t : report.stages[st].timeline)
      for (int u = 0; u < t.duration; ++u) cells[static_cast<size_t>(t.start + u)] = cell_label(schedule, t.step);
    text += line("stage " + std::to_string(st), cells);
  }
  return text;
}

}  // namespace tessera::parallel
