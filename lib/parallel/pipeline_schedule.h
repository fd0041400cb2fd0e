// Pipeline schedules as data: one program (a list of instructions) per pipeline stage, and the
// generators of the classic schedules (GPipe, 1F1B, interleaved 1F1B, zero-bubble ZB-H1).
// Pure logic, no communication: pipeline_verifier.h runs the programs together in simulation.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tessera::parallel {

// recv_fwd/send_fwd move a micro-batch's activation to the next virtual stage, recv_bwd/send_bwd
// its gradient to the previous one. `backward` is the input-gradient step (B) when the schedule
// splits backward, else the whole backward; `backward_w` is the split-off weight-gradient step (W).
enum class PipelineOp { recv_fwd, forward, send_fwd, recv_bwd, backward, send_bwd, backward_w };

const char* op_name(PipelineOp op);
bool is_compute(PipelineOp op);
bool is_send(PipelineOp op);
bool is_recv(PipelineOp op);

struct PipelineInstruction {
  PipelineOp op;
  int micro_batch = 0;
  int chunk = 0;  // the model chunk on this stage (0 unless interleaved)
  bool operator==(const PipelineInstruction&) const = default;
};

// A stage and one of its model chunks: chunk c of stage s is virtual stage c * stages + s.
struct StageChunk {
  int stage = 0;
  int chunk = 0;
  bool operator==(const StageChunk&) const = default;
};

struct PipelineSchedule {
  std::string name;
  int stages = 1;
  int micro_batches = 1;
  int chunks = 1;               // model chunks (virtual stages) per stage
  bool split_backward = false;  // backward is B, and backward_w (W) follows it
  std::vector<std::vector<PipelineInstruction>> programs;  // programs[stage]

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(StageChunk at) const { return at.chunk * stages + at.stage; }
  StageChunk at_virtual(int virtual_stage) const { return {virtual_stage % stages, virtual_stage / stages}; }
  // "recv_bwd mb 3" (with " chunk c" when the schedule has several chunks per stage).
  std::string describe(const PipelineInstruction& in) const;
};

// The other end of a send or receive run by `stage`:
//   send_fwd, recv_bwd: the next virtual stage (chunk c of stage p-1 feeds chunk c+1 of stage 0);
//   send_bwd, recv_fwd: the previous virtual stage.
// nullopt for compute ops and past the ends of the pipeline: the first virtual stage takes its
// input from the data, the last its output gradient from the loss.
std::optional<StageChunk> peer(const PipelineSchedule& s, int stage, const PipelineInstruction& in);

// The rules PipelineRunner runs a program by, shared with the memory planner that predicts it:
// the position of the first receive after instruction i (the one a compute step posts ahead, so
// its message arrives during compute), or the program's size when none follows; and whether
// instruction i is a micro-batch's last step on the stage, after which its activations are free
// (its backward, the send of its input gradient right after it, or its W under a split backward).
size_t next_receive(const std::vector<PipelineInstruction>& program, size_t i);
bool releases_activations(const PipelineSchedule& s, const std::vector<PipelineInstruction>& program, size_t i);
// The most copies of sent messages `stage` holds at once: PipelineRunner copies each message it
// sends and keeps the copy until it learns, testing after each instruction, that the send is
// complete. The runner makes this many copies at its first send and reuses them, so steps after
// the first allocate nothing however the messages' timing falls; the memory planner counts them.
int message_copies_in_flight(const PipelineSchedule& s, int stage);

// Generators. p stages, m micro-batches, v chunks per stage; each refuses bad sizes with
// tessera::Error. Programs receive right before the compute that needs the message and send right
// after the compute that made it.
//   gpipe: every forward, then every backward.
//   1f1b: stage s runs min(p-1-s, m) warm-up forwards, then alternates one forward and one
//     backward, then the remaining backwards (at most p-s activations live on stage s).
//   interleaved: Megatron's interleaved 1F1B (Narayanan et al. 2021): forwards go through the
//     chunks in rounds of p micro-batches; stage s warms up with (p-1-s)*2 + (v-1)*p forwards.
//     Needs v >= 2 and m a multiple of p.
//   zb: ZB-H1 (Qi et al. 2023): 1F1B's forwards and input-gradient steps (B), with each weight-
//     gradient step (W) deferred: on stage s, W of micro-batch i runs after B of micro-batch i+s,
//     so every stage has at most p micro-batches in flight, as the first stage of 1F1B.
PipelineSchedule gpipe(int p, int m);
PipelineSchedule one_f_one_b(int p, int m);
PipelineSchedule interleaved(int p, int m, int v);
PipelineSchedule zero_bubble_h1(int p, int m);

// The schedule named "gpipe", "1f1b", "interleaved" or "zb"; v must be 1 except for interleaved.
PipelineSchedule make_schedule(const std::string& name, int p, int m, int v = 1);
// The names make_schedule takes, "gpipe|1f1b|interleaved|zb".
const char* schedule_names();

}  // namespace tessera::parallel
