// SequenceAttention: multi-head attention (causal, or every position to every position) over a
// sequence cut into contiguous shards over the sp group (rank r holds positions [r * Tl, (r + 1) *
// Tl)), in two modes: all-to-all (DeepSpeed Ulysses) and ring attention; and a third, zigzag: ring
// attention over the load-balanced layout of nn/zigzag_layout.h (rank r holds chunks r and
// 2 sp - 1 - r of 2 sp, rows half-major).
#pragma once
#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "nn/sequence_layout.h"

namespace tessera::parallel {

enum class SequenceMode { all_to_all, ring, zigzag };
const char* sequence_mode_name(SequenceMode mode);        // "all_to_all", "ring", "zigzag"
SequenceMode parse_sequence_mode(const std::string& name);  // throws naming the choices
bool is_ring(SequenceMode mode);                          // ring or zigzag (key/value blocks round a ring)

// Causal attention of this rank's Tl queries over the T = sp x Tl positions before them, the same
// (to fp32 rounding) as ops::attention_forward/backward on the whole sequence. Host or device
// tensors (the layout copies run on their device; the communicator moves device tensors by its
// route, comm/device_route.h). E = B x Tl x H x D elements (this rank's q, k or v; H: the heads
// this rank holds), 4 bytes each.
//
// all_to_all: forward: all-to-all(sp) of qkv from sequence shards to head shards (each rank gets all
//   T positions of H / sp heads; 3E elements sent), ops::attention_forward on them, all-to-all(sp)
//   of out back (E sent). Backward: all-to-all(sp) of dout (E), ops::attention_backward, all-to-all
//   of dqkv back (3E). Per call 16E bytes sent (forward) and 16E (backward), counting the block a
//   rank keeps. Needs H divisible by sp. Saves the head-shard qkv and out (4E) and lse.
// ring: rank r keeps its queries; the key/value blocks (2E elements, 8E bytes) move one rank up the
//   ring per step by send/recv(sp), the next block's transfer overlapping the current one's compute
//   (on the host; a device tensor's host copies are made when a message starts and ends).
//   Blocks from later positions are never needed, so block j goes j -> j+1 -> ... -> sp-1 only:
//   forward, rank r receives r blocks and sends r + 1 (the last rank none), attending to its own
//   block (causal) and the r earlier ones (full), merged by online softmax; per step at most one
//   8E-byte block in and one out. Backward sends the blocks again, and with each block j its dk/dv
//   partial sums (8E bytes) from visitor to visitor (j+1 -> ... -> sp-1), the last returning them
//   to the owner j: rank r sends r such messages and receives r - 1 (r >= 2) from rank r - 1, plus
//   its own block's sums from the last rank (r < sp - 1); per step at most two 8E-byte messages
//   each way. Saves only lse; works for any H. The work is not balanced: rank r attends to r + 1
//   blocks.
// ring, not causal (a vision transformer): every block goes round the whole ring (r -> r+1 -> ...
//   -> r-1, sp - 1 hops), so every rank attends to all sp blocks (balanced); forward sends and
//   receives sp - 1 blocks of 8E bytes. Backward sends the blocks round again, each followed by its
//   dk/dv partial sums (8E), which the last visitor r - 1 returns to the owner r: per rank sp - 1
//   blocks and sp - 1 partials out and in. all_to_all is the same as causal (the head-shard kernel
//   attends to every position).
// zigzag (causal): the messages of the ring when not causal (every block round the whole ring:
//   forward sp - 1 blocks of 8E bytes out and in on every rank, backward the blocks again and sp - 1
//   dk/dv partial sums out and in), and at every step every rank attends to 2 c^2 query-key pairs
//   per sequence and head (c = Tl / 2; step 0: its own chunks, causally), so no rank waits for
//   another: the per-step critical path is the balanced share, against contiguous ring's last rank
//   attending to (2 sp - 1) / sp times it. Needs Tl even. Not causal, zigzag is the non-causal
//   ring's schedule, each half to each half in full (the rows of a [B, Tl] view would mix
//   sequences). Saves lse only (rows half-major, like q); the same scratch as ring.
// Memory per rank is O(Tl) in both modes: besides Saved, scratch buffers owned by this object and
// reused by every call (all_to_all 2 x 3E floats, ring 6 x 2E), so one object may serve every
// block of a stage, one call at a time.
class SequenceAttention {
 public:
  SequenceAttention(SequenceMode mode, comm::Communicator& sp, int64_t heads, int64_t head_dim);

  // What backward needs from forward, one per transformer block (and micro-batch in flight):
  // ring: lse [B, H, Tl]; all_to_all: lse [B, H/sp, T], qkv_heads [B, T, 3 H/sp D] and out_heads
  // [B, T, H/sp D] (the head-shard attention's input and output).
  using Saved = nn::AttentionSaved;
  Saved allocate(int64_t batch, int64_t local_seq, Device device = Device::cpu) const;

  // qkv [B, Tl, 3, H, D] (or [B, Tl, 3 H D]; q, k, v of this rank's positions, heads inside) ->
  // out [B, Tl, H, D] (overwritten). causal: a position attends to itself and earlier ones only.
  // inputs: the precision of the head-shard kernel's products (ops::attention_forward).
  // segments: document masking (nn::DocumentMask): the whole sequence's [B, T] int32 on the host,
  // every rank the same, or undefined. Nothing more travels: all_to_all's head-shard kernel masks
  // with them whole, and the ring's block (r - s) reads its keys' segments from them.
  void forward(Tensor& out, const Tensor& qkv, Saved& saved, bool causal = true,
               ops::MatmulInputs inputs = ops::MatmulInputs::f32, const Tensor& segments = Tensor());
  // dqkv (qkv's shape) overwritten, from dout (out's shape); qkv and out as given to / left by
  // forward, causal and inputs as there.
  void backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Saved& saved,
                bool causal = true, ops::MatmulInputs inputs = ops::MatmulInputs::f32,
                const Tensor& segments = Tensor());

  SequenceMode mode() const { return mode_; }

 private:
  void check_call(const char* op, const Tensor& a, int64_t a_slots, const Tensor& b, int64_t b_slots,
                  const Saved& saved) const;
  // A view of scratch buffer i (grown on demand, then reused by every call: a step allocates nothing).
  Tensor scratch(int i, Shape shape, Device device);
  // all_to_all: [B, Tl, slots, H, D] of this rank -> [B, T, slots, H/sp, D]; and back.
  void to_heads(Tensor& dst, const Tensor& src, int64_t slots);
  void to_sequence(Tensor& dst, const Tensor& src, int64_t slots);
  // The ring's route for this rank: blocks it visits after its own (steps), its neighbours, whether
  // any other rank visits its own block and which one does last (sequence_attention.cpp).
  struct RingRoute {
    bool causal;
    bool zigzag;     // the zigzag layout: each step attends per half (causal: nn::zigzag_block_mask)
    bool all_round;  // every block goes round the whole ring (not causal, or zigzag)
    int steps, up, down, last_visitor;
    bool own_visited;
    bool passes_on(int s) const;  // the block of step s goes on up (the rank above visits it too)
  };
  RingRoute ring_route(bool causal) const;
  // The attention of this rank's queries q to block `owner`'s keys and values kv (the own block at
  // step 0, kv = q), masked as the route says; forward merges after step 0.
  void attend_block(Tensor& o, Tensor& lse, const Tensor& q, const Tensor& kv, int owner, const RingRoute& route);
  void attend_block_backward(Tensor& d, Tensor& dkv, const Tensor& g, const Tensor& q, const Tensor& kv,
                             const Tensor& o, const Tensor& lse, int owner, const RingRoute& route);
  void ring_forward(Tensor& out, const Tensor& qkv, Saved& saved, const RingRoute& route);
  void ring_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Saved& saved,
                     const RingRoute& route);
  // Document masking: segments checked ([B, sp x Tl]) and cut into block_segments_ [sp, B, Tl]
  // (undefined segments: none); block j's as a tensor (undefined without a mask).
  void cut_segments(const Tensor& segments, const Saved& saved);
  Tensor segments_of_block(int j) const;
  Tensor segments_of_half(int j, int h) const;  // zigzag: half h of block j's ([B, Tl / 2])

  SequenceMode mode_;
  comm::Communicator& sp_;
  int64_t heads_, head_dim_;
  Tensor scratch_[6];
  Tensor block_segments_;  // [sp, B, Tl] int32 (host), the last call's, when it masked documents (each
                           // block's in its owner's row order)
  bool masked_ = false;
};

}  // namespace tessera::parallel
