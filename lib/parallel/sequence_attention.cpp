// SequenceAttention (sequence_attention.h): the all-to-all, ring and zigzag schedules of
// sequence-parallel attention (causal and not), their argument checks, and the layout copies
// between shards and messages.
#include "parallel/sequence_attention.h"

#include <algorithm>

#include "core/allocator.h"
#include "kernels/ops.h"
#include "nn/zigzag_layout.h"

namespace tessera::parallel {

namespace {

constexpr int kTagKv = 41, kTagPartial = 42, kTagReturn = 43;  // ring messages

// The layout copies run on the tensors' device (core/allocator.h's row copies).

// dst row i (stride dst_stride) = src row i (stride src_stride): rows of w floats from their offsets.
void copy_rows(Tensor& dst, int64_t dst_at, int64_t dst_stride, const Tensor& src, int64_t src_at, int64_t src_stride,
               int64_t rows, int64_t w) {
  constexpr size_t f = sizeof(float);
  copy_rows_bytes(dst.data<float>() + dst_at, dst_stride * f, src.data<float>() + src_at, src_stride * f, w * f, rows,
                  dst.device());
}

// [n0, n1, w] -> [n1, n0, w], blocks of w floats: one row copy per index of the smaller outer
// dimension (sp, against batch x positions: a few large copies, not many small ones).
void swap_outer(Tensor& dst, const Tensor& src, int64_t n0, int64_t n1, int64_t w) {
  if (n1 <= n0) {
    for (int64_t j = 0; j < n1; ++j) copy_rows(dst, j * n0 * w, w, src, j * w, n1 * w, n0, w);
  } else {
    for (int64_t i = 0; i < n0; ++i) copy_rows(dst, i * w, n0 * w, src, i * n1 * w, w, n1, w);
  }
}

// A half (0: low, 1: high) of a zigzag rank's tensor: its rows are half-major (nn/zigzag_layout.h),
// so half h is the contiguous second half of the elements when h = 1, shaped as given.
Tensor half_of(const Tensor& t, int h, Shape shape) { return t.slice(h * (t.numel() / 2), std::move(shape)); }

}  // namespace

const char* sequence_mode_name(SequenceMode mode) {
  switch (mode) {
    case SequenceMode::ring: return "ring";
    case SequenceMode::zigzag: return "zigzag";
    default: return "all_to_all";
  }
}

SequenceMode parse_sequence_mode(const std::string& name) {
  if (name == "all_to_all") return SequenceMode::all_to_all;
  if (name == "ring") return SequenceMode::ring;
  if (name == "zigzag") return SequenceMode::zigzag;
  fail("unknown sequence-parallel mode '", name, "' (choose all_to_all, ring or zigzag)");
}

bool is_ring(SequenceMode mode) { return mode != SequenceMode::all_to_all; }

SequenceAttention::SequenceAttention(SequenceMode mode, comm::Communicator& sp, int64_t heads, int64_t head_dim)
    : mode_(mode), sp_(sp), heads_(heads), head_dim_(head_dim) {
  TESSERA_CHECK(heads > 0 && head_dim > 0, "sequence attention: heads (", heads, ") and head_dim (", head_dim,
                ") must be positive");
  TESSERA_CHECK(mode != SequenceMode::all_to_all || heads % sp.size() == 0,
                "sequence-parallel attention (all_to_all): ", heads, " heads do not split evenly over sp = ",
                sp.size(), " ranks (group ", sp.name(), "); use a head count divisible by ", sp.size(),
                " or the ring mode");
}

SequenceAttention::Saved SequenceAttention::allocate(int64_t batch, int64_t local_seq, Device device) const {
  TESSERA_CHECK(batch > 0 && local_seq > 0, "sequence attention: batch (", batch, ") and local sequence length (",
                local_seq, ") must be positive");
  TESSERA_CHECK(mode_ != SequenceMode::zigzag || local_seq % 2 == 0, "sequence attention (zigzag): each rank holds",
                " two chunks of equal length, so its ", local_seq, " positions must be even (--seq-len divisible by",
                " 2 x sp = ", 2 * sp_.size(), ")");
  Saved s;
  s.batch = batch;
  s.local_seq = local_seq;
  if (is_ring(mode_)) {  // zigzag: lse [2, B, H, Tl / 2], the low half's rows then the high half's
    s.lse = Tensor::empty({batch, heads_, local_seq}, DType::f32, device);
  } else {
    const int64_t hs = heads_ / sp_.size(), seq = local_seq * sp_.size();
    s.lse = Tensor::empty({batch, hs, seq}, DType::f32, device);
    s.qkv_heads = Tensor::empty({batch, seq, 3 * hs * head_dim_}, DType::f32, device);
    s.out_heads = Tensor::empty({batch, seq, hs * head_dim_}, DType::f32, device);
  }
  return s;
}

// Each tensor of a call: f32 on allocate()'s device, [B, Tl, ...] holding slots x H x D per position.
void SequenceAttention::check_call(const char* op, const Tensor& a, int64_t a_slots, const Tensor& b,
                                   int64_t b_slots, const Saved& saved) const {
  TESSERA_CHECK(saved.batch > 0, "sequence attention ", op, ": Saved was not made by allocate()");
  for (auto [t, slots] : {std::pair{&a, a_slots}, std::pair{&b, b_slots}}) {
    const int64_t want = saved.batch * saved.local_seq * slots * heads_ * head_dim_;
    TESSERA_CHECK(t->defined() && t->device() == saved.lse.device() && t->dtype() == DType::f32, "sequence attention ",
                  op, ": tensors must be f32 on the ", device_name(saved.lse.device()), " (where allocate() put Saved)");
    TESSERA_CHECK(t->shape().rank() >= 2 && t->dim(0) == saved.batch && t->dim(1) == saved.local_seq &&
                      t->numel() == want,
                  "sequence attention ", op, ": expected [B = ", saved.batch, ", Tl = ", saved.local_seq, ", ", slots,
                  " x heads ", heads_, " x head_dim ", head_dim_, "] (rank ", sp_.rank(), " of sp = ", sp_.size(),
                  "), got ", t->shape().str());
  }
}

Tensor SequenceAttention::scratch(int i, Shape shape, Device device) {
  if (scratch_[i].numel() < shape.numel() || scratch_[i].device() != device)
    scratch_[i] = Tensor::empty({shape.numel()}, DType::f32, device);
  return scratch_[i].slice(0, std::move(shape));
}

void SequenceAttention::cut_segments(const Tensor& segments, const Saved& saved) {
  masked_ = segments.defined();
  if (!masked_) return;
  const int64_t p = sp_.size(), batch = saved.batch, tl = saved.local_seq;
  TESSERA_CHECK(segments.dtype() == DType::i32 && segments.device() == Device::cpu && segments.numel() == batch * p * tl,
                "sequence attention: document segments must be int32 [B = ", batch, ", T = ", p * tl,
                "] on the host (the whole sequence's), got ", dtype_name(segments.dtype()), " ", segments.shape().str());
  if (mode_ == SequenceMode::all_to_all) return;  // the head-shard kernel reads them whole
  if (block_segments_.numel() != p * batch * tl) block_segments_ = Tensor::empty({p, batch, tl}, DType::i32);
  const int32_t* src = segments.data<int32_t>();
  int32_t* dst = block_segments_.data<int32_t>();
  if (mode_ == SequenceMode::zigzag) {  // block j's in rank j's row order (half-major)
    for (int j = 0; j < p; ++j) {
      const nn::ZigzagPlace place{j, static_cast<int>(p), batch, p * tl};
      for (int64_t n = 0; n < batch * tl; ++n)
        dst[j * batch * tl + n] = src[place.sequence(n) * p * tl + place.position(n)];
    }
    return;
  }
  for (int64_t j = 0; j < p; ++j)
    for (int64_t b = 0; b < batch; ++b)
      std::copy(src + b * p * tl + j * tl, src + b * p * tl + (j + 1) * tl, dst + (j * batch + b) * tl);
}

Tensor SequenceAttention::segments_of_block(int j) const {
  if (!masked_) return Tensor();
  const int64_t batch = block_segments_.dim(1), tl = block_segments_.dim(2);
  return block_segments_.slice(j * batch * tl, {batch, tl});
}

Tensor SequenceAttention::segments_of_half(int j, int h) const {
  if (!masked_) return Tensor();
  const int64_t batch = block_segments_.dim(1), tl = block_segments_.dim(2);
  return block_segments_.slice(j * batch * tl + h * batch * (tl / 2), {batch, tl / 2});
}

void SequenceAttention::forward(Tensor& out, const Tensor& qkv, Saved& saved, bool causal, ops::MatmulInputs inputs,
                                const Tensor& segments) {
  check_call("forward", qkv, 3, out, 1, saved);
  cut_segments(segments, saved);
  if (is_ring(mode_)) return ring_forward(out, qkv, saved, ring_route(causal));
  to_heads(saved.qkv_heads, qkv, 3);
  const int64_t hs = heads_ / sp_.size();
  if (causal) {
    ops::attention_forward(saved.out_heads, saved.lse, saved.qkv_heads, hs, inputs, segments);
  } else {
    ops::attention_block_forward(saved.out_heads, saved.lse, saved.qkv_heads, saved.qkv_heads, hs, false, false,
                                 segments, segments);
  }
  to_sequence(out, saved.out_heads, 1);
}

void SequenceAttention::backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                 const Saved& saved, bool causal, ops::MatmulInputs inputs, const Tensor& segments) {
  check_call("backward", dqkv, 3, dout, 1, saved);
  check_call("backward", qkv, 3, out, 1, saved);
  cut_segments(segments, saved);
  if (is_ring(mode_)) return ring_backward(dqkv, dout, qkv, out, saved, ring_route(causal));
  const int64_t hs = heads_ / sp_.size(), seq = saved.local_seq * sp_.size();
  // to_heads stages through scratch 0 and 1, to_sequence likewise; see their comments for why these
  // two may live there.
  Tensor dout_heads = scratch(0, {saved.batch, seq, hs * head_dim_}, dout.device());
  to_heads(dout_heads, dout, 1);
  Tensor dqkv_heads = scratch(1, {saved.batch, seq, 3 * hs * head_dim_}, dout.device());
  if (causal) {
    ops::attention_backward(dqkv_heads, dout_heads, saved.qkv_heads, saved.out_heads, saved.lse, hs, inputs, segments);
  } else {
    dqkv_heads.zero();
    ops::attention_block_backward(dqkv_heads, dqkv_heads, dout_heads, saved.qkv_heads, saved.qkv_heads,
                                  saved.out_heads, saved.lse, hs, false, segments, segments);
  }
  to_sequence(dqkv, dqkv_heads, 3);
}

// ---- all_to_all ---------------------------------------------------------------------------------

// src [B, Tl, slots, sp, H/sp x D] -> send [sp, B, Tl, slots, H/sp x D] (block j for rank j) ->
// all-to-all -> recv [sp (the position shard), B, Tl x slots x H/sp x D] -> dst [B, T, slots, H/sp, D].
// dst may be scratch 0 (the send buffer is free once the all-to-all is done).
void SequenceAttention::to_heads(Tensor& dst, const Tensor& src, int64_t slots) {
  const int64_t p = sp_.size(), batch = src.dim(0), tl = src.dim(1), w = heads_ / p * head_dim_;
  Tensor send = scratch(0, {src.numel()}, src.device()), recv = scratch(1, {src.numel()}, src.device());
  swap_outer(send, src, batch * tl * slots, p, w);
  sp_.all_to_all(send, recv);
  swap_outer(dst, recv, p, batch, tl * slots * w);
}

// The reverse: src [B, sp, Tl x slots x H/sp x D] -> send [sp, B, ...] -> all-to-all -> recv [sp (the
// head shard), B x Tl x slots, H/sp x D] -> dst [B, Tl, slots, sp, H/sp x D]. src may be scratch 1
// (it is read into the send buffer before the all-to-all writes there).
void SequenceAttention::to_sequence(Tensor& dst, const Tensor& src, int64_t slots) {
  const int64_t p = sp_.size(), batch = dst.dim(0), tl = dst.dim(1), w = heads_ / p * head_dim_;
  Tensor send = scratch(0, {dst.numel()}, dst.device()), recv = scratch(1, {dst.numel()}, dst.device());
  swap_outer(send, src, batch, p, tl * slots * w);
  sp_.all_to_all(send, recv);
  swap_outer(dst, recv, p, batch * tl * slots, w);
}

// ---- ring -----------------------------------------------------------------------------------------
// Blocks travel packed as kv [B, Tl, 2C] (keys then values) from each rank to the one above
// (r + 1, wrapping round when not causal); the block kernels read q (and the own block's keys and
// values) straight from the qkv rows. At step s rank r attends to block (r - s) mod sp: its own at
// step 0 (with the causal mask when causal), then the one its lower neighbour passed up. Causal:
// steps 1..r (only earlier blocks), and a rank passes every block on while a rank above it exists.
// Not causal: steps 1..sp - 1 (every block), each block passed on until every rank has seen it.
// Zigzag (causal): the blocks travel as when not causal (each rank's high half comes after every
// other rank's low half, so every block is needed everywhere), and each step attends to the halves
// nn::zigzag_block_mask allows: at step 0 the low half causally, the high half to the low fully
// and to itself causally; at a later step either both halves of the queries to the block's low
// half (its owner is below), or the high half to both of the block's halves (above): 2 c^2 query-
// key pairs on every rank at every step (c = Tl / 2).

SequenceAttention::RingRoute SequenceAttention::ring_route(bool causal) const {
  const int p = sp_.size(), r = sp_.rank();
  RingRoute route;
  route.causal = causal;
  route.zigzag = mode_ == SequenceMode::zigzag;
  const bool chain = causal && !route.zigzag;  // contiguous causal: blocks go up only, no wrap
  route.all_round = !chain;
  route.steps = chain ? r : p - 1;
  route.up = chain ? r + 1 : (r + 1) % p;
  route.down = chain ? r - 1 : (r + p - 1) % p;
  route.own_visited = chain ? r + 1 < p : p > 1;
  route.last_visitor = chain ? p - 1 : route.down;
  return route;
}

bool SequenceAttention::RingRoute::passes_on(int s) const { return all_round ? s < steps : own_visited; }

// One block's attention (forward): the own block (q's own keys and values) at step 0, else block
// `owner`'s kv; merged into o and lse after step 0.
void SequenceAttention::attend_block(Tensor& o, Tensor& lse, const Tensor& q, const Tensor& kv, int owner,
                                     const RingRoute& route) {
  const int p = sp_.size(), r = sp_.rank();
  const bool own = owner == r;
  if (!route.zigzag) {
    ops::attention_block_forward(o, lse, q, kv, heads_, own && route.causal, /*merge=*/!own, segments_of_block(r),
                                 segments_of_block(owner));
    return;
  }
  const int64_t batch = lse.dim(0), c = lse.dim(2) / 2, qw = q.dim(2), kw = kv.dim(2), cw = o.dim(2);
  for (int qh = 0; qh < 2; ++qh)
    for (int kh = 0; kh < 2; ++kh) {
      const nn::ChunkMask mask = route.causal ? nn::zigzag_block_mask(r, qh, owner, kh, p) : nn::ChunkMask::full;
      if (mask == nn::ChunkMask::skipped) continue;
      // At step 0 the low half's first block is (0, 0) and the high half's (1, 0): no merge then.
      const bool merge = !own || kh == 1;
      Tensor oh = half_of(o, qh, {batch, c, cw}), lh = half_of(lse, qh, {batch, heads_, c});
      ops::attention_block_forward(oh, lh, half_of(q, qh, {batch, c, qw}), half_of(kv, kh, {batch, c, kw}), heads_,
                                   mask == nn::ChunkMask::causal, merge, segments_of_half(r, qh),
                                   segments_of_half(owner, kh));
    }
}

// One block's share of the gradients (backward): dq into d (this rank's queries), dk/dv into dkv
// (d itself for the own block, else the block's partial sums).
void SequenceAttention::attend_block_backward(Tensor& d, Tensor& dkv, const Tensor& g, const Tensor& q,
                                              const Tensor& kv, const Tensor& o, const Tensor& lse, int owner,
                                              const RingRoute& route) {
  const int p = sp_.size(), r = sp_.rank();
  const bool own = owner == r;
  if (!route.zigzag) {
    ops::attention_block_backward(d, dkv, g, q, kv, o, lse, heads_, own && route.causal, segments_of_block(r),
                                  segments_of_block(owner));
    return;
  }
  const int64_t batch = lse.dim(0), c = lse.dim(2) / 2, qw = q.dim(2), kw = kv.dim(2), cw = o.dim(2);
  for (int qh = 0; qh < 2; ++qh)
    for (int kh = 0; kh < 2; ++kh) {
      const nn::ChunkMask mask = route.causal ? nn::zigzag_block_mask(r, qh, owner, kh, p) : nn::ChunkMask::full;
      if (mask == nn::ChunkMask::skipped) continue;
      Tensor dq = half_of(d, qh, {batch, c, d.dim(2)}), dk = half_of(dkv, kh, {batch, c, dkv.dim(2)});
      ops::attention_block_backward(dq, dk, half_of(g, qh, {batch, c, cw}), half_of(q, qh, {batch, c, qw}),
                                    half_of(kv, kh, {batch, c, kw}), half_of(o, qh, {batch, c, cw}),
                                    half_of(lse, qh, {batch, heads_, c}), heads_, mask == nn::ChunkMask::causal,
                                    segments_of_half(r, qh), segments_of_half(owner, kh));
    }
}

void SequenceAttention::ring_forward(Tensor& out, const Tensor& qkv, Saved& saved, const RingRoute& route) {
  const int64_t batch = saved.batch, tl = saved.local_seq, c = heads_ * head_dim_;
  const Tensor q = qkv.reshape({batch, tl, 3 * c});
  Tensor o = out.reshape({batch, tl, c});
  const Device device = qkv.device();
  Tensor kv[2] = {scratch(0, {batch, tl, 2 * c}, device), scratch(1, {batch, tl, 2 * c}, device)};
  comm::CommHandle sending[2], receiving;
  if (route.own_visited) {
    copy_rows(kv[0], 0, 2 * c, q, c, 3 * c, batch * tl, 2 * c);
    sending[0] = sp_.isend(kv[0], route.up, kTagKv);
  }
  if (route.steps > 0) receiving = sp_.irecv(kv[1], route.down, kTagKv);
  const int p = sp_.size(), r = sp_.rank();
  attend_block(o, saved.lse, q, q, r, route);
  for (int s = 1; s <= route.steps; ++s) {
    Tensor& cur = kv[s % 2];
    receiving.wait();
    if (route.passes_on(s)) sending[s % 2] = sp_.isend(cur, route.up, kTagKv);  // its last send was waited below
    if (s < route.steps) {  // the next block, into the other buffer once its send is done
      sending[(s + 1) % 2].wait();
      receiving = sp_.irecv(kv[(s + 1) % 2], route.down, kTagKv);
    }
    attend_block(o, saved.lse, q, cur, (r - s + p) % p, route);
  }
  sending[0].wait();
  sending[1].wait();
}

// The blocks travel as in forward. Block (r - s) arrives with the dk/dv sums of the visitors before
// this rank (from the lower neighbour; none at s = 1); this rank adds its share and passes the
// total up while the rank above visits the block too, or else returns it to the block's owner,
// which adds the visitors' total to its own share in dqkv at the end.
void SequenceAttention::ring_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                                      const Saved& saved, const RingRoute& route) {
  const int p = sp_.size(), r = sp_.rank();
  const int64_t batch = saved.batch, tl = saved.local_seq, c = heads_ * head_dim_;
  const Tensor q = qkv.reshape({batch, tl, 3 * c});
  const Tensor o = out.reshape({batch, tl, c}), g = dout.reshape({batch, tl, c});
  Tensor d = dqkv.reshape({batch, tl, 3 * c});
  const Shape block{batch, tl, 2 * c};
  const Device device = qkv.device();
  Tensor kv[2] = {scratch(0, block, device), scratch(1, block, device)};
  Tensor partial[2] = {scratch(2, block, device), scratch(3, block, device)};
  Tensor incoming = scratch(4, block, device), returned = scratch(5, block, device);
  comm::CommHandle kv_sending[2], kv_receiving, partial_sending[2], partial_receiving, returning;
  d.zero();
  if (route.own_visited) {
    copy_rows(kv[0], 0, 2 * c, q, c, 3 * c, batch * tl, 2 * c);
    kv_sending[0] = sp_.isend(kv[0], route.up, kTagKv);
    returning = sp_.irecv(returned, route.last_visitor, kTagReturn);
  }
  if (route.steps > 0) kv_receiving = sp_.irecv(kv[1], route.down, kTagKv);
  attend_block_backward(d, d, g, q, q, o, saved.lse, r, route);
  for (int s = 1; s <= route.steps; ++s) {
    Tensor& cur = kv[s % 2];
    Tensor& mine = partial[s % 2];
    kv_receiving.wait();
    if (route.passes_on(s)) kv_sending[s % 2] = sp_.isend(cur, route.up, kTagKv);
    if (s < route.steps) {
      kv_sending[(s + 1) % 2].wait();
      kv_receiving = sp_.irecv(kv[(s + 1) % 2], route.down, kTagKv);
    }
    if (s >= 2) partial_receiving = sp_.irecv(incoming, route.down, kTagPartial);  // the visitors before this rank
    partial_sending[s % 2].wait();
    mine.zero();
    attend_block_backward(d, mine, g, q, cur, o, saved.lse, (r - s + p) % p, route);
    if (s >= 2) {
      partial_receiving.wait();
      ops::add_inplace(mine, incoming);
    }
    partial_sending[s % 2] = route.passes_on(s) ? sp_.isend(mine, route.up, kTagPartial)
                                                : sp_.isend(mine, (r - s + p) % p, kTagReturn);
  }
  if (route.own_visited) {  // the visitors' total for this rank's own block, added to its dk, dv
    returning.wait();
    copy_rows(incoming, 0, 2 * c, d, c, 3 * c, batch * tl, 2 * c);  // (incoming's last message was added above)
    ops::add_inplace(incoming, returned);
    copy_rows(d, c, 3 * c, incoming, 0, 2 * c, batch * tl, 2 * c);
  }
  for (auto* h : {&kv_sending[0], &kv_sending[1], &partial_sending[0], &partial_sending[1]}) h->wait();
}

}  // namespace tessera::parallel
