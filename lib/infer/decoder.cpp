// Decoder: the weights read from /params, and the forward of new tokens over the KV cache:
// embeddings, per block norm -> q/k/v (rotary positions for Llama) -> cache -> attention per slot
// and head -> projection, norm -> MLP (or a mixture of experts), then the final norm and the head
// on the rows asked for.
#include "infer/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "core/error.h"
#include "infer/model_spec.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "quant/quantized_checkpoint.h"

namespace tessera::infer {

namespace {
constexpr float kLayerNormEps = 1e-5f;  // gpt2's (hf_model.cpp refuses any other on import)
}

namespace {

// Reads checkpoint tensors whole or as this rank's slices.
class ParamReader {
 public:
  ParamReader(const io::CheckpointReader& r, const models::GptConfig& c, WeightPrecision precision,
              ActivationPrecision activations)
      : r_(r), precision_(precision), activations_(activations) {
    const bool quantized = quant::is_quantized(r);
    for (const auto& [name, shape] : parameter_shapes(c)) {
      shapes_.emplace(name, shape);
      // A quantised checkpoint's matrices are under /qparams (a tied table also stays in /params).
      if (quantized && r.has(quant::quantized_path(name, "q"))) {
        quantized_.emplace(name);
        if (!r.has("/params/" + name)) continue;
      }
      const std::string path = "/params/" + name;
      TESSERA_CHECK(r.has(path), "checkpoint ", r.path(), " lacks tensor ", name, " (its model attributes need it)");
      const Shape stored = r.shape(path);
      TESSERA_CHECK(stored == shape, "checkpoint ", r.path(), ", tensor ", name, ": shape ", stored.str(),
                    " where its model attributes give ", shape.str());
    }
  }
  int64_t bytes() const { return bytes_; }
  bool is_quantized(const std::string& name) const { return quantized_.count(name) > 0; }
  // A weight for linear(): whole, the rows of the ranges, or columns [first, first + count); from a
  // quantised checkpoint its int8/int4 groups where it has them, else in the precision asked for.
  LinearWeight weight_whole(const std::string& name) { return weight_rows(name, {{0, shapes_.at(name)[0]}}); }
  LinearWeight weight_rows(const std::string& name, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    if (!quantized_.count(name)) return dense(rows(name, ranges));
    return counted(quantized(name).rows_of(ranges));
  }
  LinearWeight weight_columns(const std::string& name, int64_t first, int64_t count) {
    if (!quantized_.count(name)) return dense(columns(name, first, count));
    return counted(quantized(name).columns_of(first, count));
  }
  Tensor whole(const std::string& name) { return rows(name, {{0, shapes_.at(name)[0]}}); }
  // An f32 matrix as linear() multiplies it: as it is, or under --weights bf16 a bf16 copy (the f32
  // tensor is dropped unless the caller keeps it, as the tied token table; its bytes are counted
  // for what stays).
  LinearWeight dense(const Tensor& w, bool keep_f32 = false) {
    if (precision_ == WeightPrecision::f32) return LinearWeight::of(w);
    LinearWeight b = LinearWeight::of(w).to_bf16();
    bytes_ += static_cast<int64_t>(b.weight.nbytes()) - (keep_f32 ? 0 : static_cast<int64_t>(w.nbytes()));
    return b;
  }
  // Expert e's slice of a stacked expert tensor [E, R, K] (or [E, R]): its rows [first, first +
  // count), or its columns [first, first + count) of every row. Stacked tensors are always f32:
  // ckpt_tool quantize leaves them (2-D block weights only).
  LinearWeight expert_weight_rows(const std::string& name, int64_t e, int64_t first, int64_t count) {
    const Shape& shape = expert_shape(name);
    const int64_t cols = shape.rank() > 2 ? shape[2] : 1, base = e * shape[1] * cols;
    return LinearWeight::of(read(name, {{base + first * cols, base + (first + count) * cols}},
                                 shape.rank() > 2 ? Shape{count, cols} : Shape{count}));
  }
  LinearWeight expert_weight_columns(const std::string& name, int64_t e, int64_t first, int64_t count) {
    const Shape& shape = expert_shape(name);
    std::vector<io::FlatRange> runs;
    for (int64_t i = 0; i < shape[1]; ++i) {
      const int64_t row = (e * shape[1] + i) * shape[2];
      runs.push_back({row + first, row + first + count});
    }
    return LinearWeight::of(read(name, runs, Shape{shape[1], count}));
  }
  // The rows [first, first + count) of each range, one after the other ([rows, cols] or [rows]).
  Tensor rows(const std::string& name, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    const Shape& shape = shapes_.at(name);
    const int64_t cols = shape.rank() > 1 ? shape[1] : 1;
    std::vector<io::FlatRange> runs;
    int64_t total = 0;
    for (const auto& [first, count] : ranges) {
      runs.push_back({first * cols, (first + count) * cols});
      total += count;
    }
    return read(name, runs, shape.rank() > 1 ? Shape{total, cols} : Shape{total});
  }
  // Columns [first, first + count) of every row of a [rows, cols] tensor.
  Tensor columns(const std::string& name, int64_t first, int64_t count) {
    const Shape& shape = shapes_.at(name);
    std::vector<io::FlatRange> runs;
    for (int64_t i = 0; i < shape[0]; ++i) runs.push_back({i * shape[1] + first, i * shape[1] + first + count});
    return read(name, runs, Shape{shape[0], count});
  }

 private:
  const Shape& expert_shape(const std::string& name) const {
    TESSERA_CHECK(!quantized_.count(name), "checkpoint ", r_.path(), ": the stacked expert tensor ", name,
                  " is quantised; generate reads experts in f32 only");
    return shapes_.at(name);
  }
  quant::QuantizedMatrix quantized(const std::string& name) {
    quant::QuantizedMatrix m = quant::QuantizedMatrix::load(r_, name);
    const Shape& shape = shapes_.at(name);
    TESSERA_CHECK(m.rows() == shape[0] && m.cols() == shape[1], "checkpoint ", r_.path(), ", tensor ", name,
                  ": quantised as [", m.rows(), ", ", m.cols(), "] where its model attributes give ", shape.str());
    return m;
  }
  // Under int8 activations the matrix is packed for the integer kernels once, here, and its
  // quantised bytes dropped (the packed blocks' bytes are counted).
  LinearWeight counted(quant::QuantizedMatrix m) {
    if (activations_ == ActivationPrecision::int8) {
      LinearWeight w = LinearWeight::with_int8_activations(m);
      bytes_ += w.bytes();
      return w;
    }
    bytes_ += m.bytes();
    LinearWeight w = LinearWeight::of(std::move(m));
    w.bf16_products = precision_ == WeightPrecision::bf16;  // as to_bf16(), without a copy
    return w;
  }
  Tensor read(const std::string& name, const std::vector<io::FlatRange>& runs, const Shape& shape) {
    Tensor t = Tensor::empty(shape);
    r_.read_runs("/params/" + name, runs, t.data<float>());
    bytes_ += static_cast<int64_t>(t.nbytes());
    return t;
  }
  const io::CheckpointReader& r_;
  WeightPrecision precision_;
  ActivationPrecision activations_;
  std::map<std::string, Shape> shapes_;
  std::set<std::string> quantized_;  // names stored as int8/int4 groups
  int64_t bytes_ = 0;
};

}  // namespace

Decoder::Decoder(const io::CheckpointReader& r, const models::GptConfig& config, const HeadSplit& split,
                 const StageSplit& stages, WeightPrecision weights, ActivationPrecision activations)
    : config_(config), split_(split), stages_(stages), weights_(weights) {
  // Checked here as well as by generate: the int8 path exists for quantised matrices only.
  TESSERA_CHECK(activations == ActivationPrecision::f32 || quant::is_quantized(r), "--activations int8: checkpoint ",
                r.path(), " holds f32 weights; int8 activations need a quantised checkpoint (ckpt_tool quantize "
                "--bits 8|4)");
  TESSERA_CHECK(activations == ActivationPrecision::f32 || weights == WeightPrecision::f32,
                "--activations int8 and --weights bf16 exclude each other (bf16 products take f32 activations)");
  const int64_t tp = split.size(), rank = split.rank(), C = config.hidden, D = head_dim();
  // A MoE model's blocks every moe_every-th have experts of moe.hidden features (and shared ones of
  // shared_experts x that); a model whose every block has experts has no dense MLP to split.
  const bool dense_blocks = config.moe_every != 1;
  const int64_t F = dense_blocks ? config.mlp_hidden() : config.moe.hidden;
  const int64_t EH = config.moe_every > 0 ? config.moe.hidden : F;
  TESSERA_CHECK(config.heads % tp == 0 && F % tp == 0 && EH % tp == 0 &&
                    (config.kv() % tp == 0 || tp % config.kv() == 0),
                "--tp ", tp, " must divide the ", config.heads, " heads and the ", F, " MLP features",
                config.moe_every > 0 ? " and " + std::to_string(EH) + " expert features" : std::string(),
                " of checkpoint ", r.path(), ", and divide or be a multiple of its ", config.kv(), " kv heads");
  const int64_t pp = stages.size(), stage = stages.rank();
  TESSERA_CHECK(config.layers >= pp, "--pp ", pp, " is more stages than the ", config.layers, " blocks of checkpoint ",
                r.path());
  const int64_t first_layer = stage * (config.layers / pp) + std::min(stage, config.layers % pp);
  const int64_t layers = config.layers / pp + (stage < config.layers % pp ? 1 : 0);
  ParamReader p(r, config, weights, activations);
  const int64_t q_rows = local_heads() * D, kv_rows = local_kv_heads() * D, f_rows = F / tp;
  // This rank's slice of a row-split weight (its heads' or features' rows), of a column-split one,
  // and the bias a row-split layer adds once (on rank 0) before the all-reduce.
  auto own_rows = [&](const std::string& name, int64_t per_rank) {
    return p.weight_rows(name, {{rank * per_rank, per_rank}});
  };
  auto own_columns = [&](const std::string& name, int64_t per_rank) {
    return p.weight_columns(name, rank * per_rank, per_rank);
  };
  auto reduced_bias = [&](const std::string& name) { return rank == 0 ? p.whole(name) : Tensor(); };
  if (first_stage() || (last_stage() && config.tie_embeddings)) wte_ = p.whole("embed.tokens.weight");
  if (first_stage() && !config.llama()) wpe_ = p.whole("embed.positions.weight");
  for (int64_t i = first_layer; i < first_layer + layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    Block k;
    k.moe = config.is_moe_block(i);
    // The MLP's features on this rank and its tensors' prefix: a MoE block's shared experts (if any).
    const std::string mlp = k.moe ? b + "moe.shared." : b + "mlp.";
    k.mlp_features = k.moe ? config.moe.shared_experts * config.moe.hidden / tp : f_rows;
    const int64_t f = k.mlp_features;
    k.ln1_weight = p.whole(b + "ln1.weight");
    k.ln2_weight = p.whole(b + "ln2.weight");
    k.proj = own_columns(b + "attn.proj.weight", q_rows);
    if (!config.llama()) {
      k.ln1_bias = p.whole(b + "ln1.bias");
      k.ln2_bias = p.whole(b + "ln2.bias");
      // q, k and v rows of this rank's heads: [3, H, D] rows keep their order.
      const std::vector<std::pair<int64_t, int64_t>> qkv{
          {rank * q_rows, q_rows}, {C + rank * q_rows, q_rows}, {2 * C + rank * q_rows, q_rows}};
      k.qkv = p.weight_rows(b + "attn.qkv.weight", qkv);
      k.qkv.bias = p.rows(b + "attn.qkv.bias", qkv);
      k.proj.bias = reduced_bias(b + "attn.proj.bias");
      if (f > 0) {
        k.fc = own_rows(mlp + "fc.weight", f);
        k.fc.bias = p.rows(mlp + "fc.bias", {{rank * f, f}});
        k.fc_proj = own_columns(mlp + "proj.weight", f);
        k.fc_proj.bias = reduced_bias(mlp + "proj.bias");
      }
    } else {
      k.q = own_rows(b + "attn.q.weight", q_rows);
      k.k = p.weight_rows(b + "attn.k.weight", {{first_kv_head() * D, kv_rows}});
      k.v = p.weight_rows(b + "attn.v.weight", {{first_kv_head() * D, kv_rows}});
      if (f > 0) {
        k.gate = own_rows(mlp + "gate.weight", f);
        k.up = own_rows(mlp + "up.weight", f);
        k.down = own_columns(mlp + "down.weight", f);
      }
    }
    if (k.moe) {  // each expert's hidden features split over tp as the dense MLP's
      const std::string m = b + "moe.", ex = m + "experts.";
      const int64_t eh = config.moe.hidden / tp;
      k.router = LinearWeight::of(p.whole(m + "router.weight"));
      for (int64_t e = 0; e < config.moe.experts; ++e) {
        if (!config.llama()) {
          k.expert_fc.push_back(p.expert_weight_rows(ex + "fc.weight", e, rank * eh, eh));
          k.expert_fc.back().bias = p.expert_weight_rows(ex + "fc.bias", e, rank * eh, eh).weight;
          k.expert_proj.push_back(p.expert_weight_columns(ex + "proj.weight", e, rank * eh, eh));
          if (rank == 0) k.expert_proj.back().bias = p.expert_weight_rows(ex + "proj.bias", e, 0, C).weight;
        } else {
          k.expert_gate.push_back(p.expert_weight_rows(ex + "gate.weight", e, rank * eh, eh));
          k.expert_up.push_back(p.expert_weight_rows(ex + "up.weight", e, rank * eh, eh));
          k.expert_down.push_back(p.expert_weight_columns(ex + "down.weight", e, rank * eh, eh));
        }
      }
    }
    blocks_.push_back(std::move(k));
  }
  if (last_stage()) {
    ln_f_weight_ = p.whole("ln_f.weight");
    if (!config.llama()) ln_f_bias_ = p.whole("ln_f.bias");
    // The head: the tied table (f32, or its quantised copy with ckpt_tool quantize --quantize-head).
    const std::string head = config.tie_embeddings ? "embed.tokens.weight" : "head.weight";
    // Under --weights bf16 the tied table gets a bf16 copy for the head (the lookup keeps f32).
    head_ = config.tie_embeddings && !p.is_quantized(head) ? p.dense(wte_, true) : p.weight_whole(head);
  }
  parameter_bytes_ = p.bytes();
}

void Decoder::reduce(Tensor& partial) {
  if (split_.group && split_.size() > 1) split_.group->all_reduce_sum(partial);
}

int64_t Decoder::position_limit() const {
  return config_.llama() ? std::numeric_limits<int64_t>::max() : config_.max_seq;  // every stage knows it
}

KvCache Decoder::make_cache(int64_t slots, int64_t max_len) const {
  return KvCache(local_layers(), slots, max_len, local_kv_heads(), head_dim());
}

Tensor Decoder::rows(Tensor& buffer, int64_t n, int64_t width, DType dtype) {
  if (!buffer.defined() || buffer.numel() < n * width)
    buffer = Tensor::empty({std::max<int64_t>(n * width, 1)}, dtype);
  return buffer.slice(0, {n, width});
}

void Decoder::norm(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias, int64_t n) {
  Tensor rstd = rows(ws_.stats_a, n, 1).reshape({n});
  if (config_.llama()) {
    ops::rmsnorm_forward(out, rstd, in, weight, config_.norm_eps);
  } else {
    Tensor mean = rows(ws_.stats_b, n, 1).reshape({n});
    ops::layernorm_forward(out, mean, rstd, in, weight, bias, kLayerNormEps);
  }
}

Tensor Decoder::forward(const std::vector<SlotTokens>& chunks, KvCache& cache) {
  const int64_t C = config_.hidden, V = config_.vocab;
  // Where each chunk's rows start, its first position, and the rows that get logits.
  std::vector<int64_t> first_row, start;
  std::vector<bool> seen(static_cast<size_t>(cache.slots()), false);
  int64_t n = 0, logit_rows = 0;
  for (const SlotTokens& c : chunks) {
    TESSERA_CHECK(c.slot >= 0 && c.slot < cache.slots(), "Decoder: slot ", c.slot, " outside the cache's ",
                  cache.slots());
    TESSERA_CHECK(!seen[static_cast<size_t>(c.slot)], "Decoder: slot ", c.slot, " given twice in one call");
    seen[static_cast<size_t>(c.slot)] = true;
    TESSERA_CHECK(c.count >= 1 && c.tokens, "Decoder: slot ", c.slot, " was given no tokens");
    const int64_t p = cache.length(c.slot);
    TESSERA_CHECK(p + c.count <= cache.max_len(), "sequence in slot ", c.slot, " would reach ", p + c.count,
                  " positions, past the cache's ", cache.max_len(), " (--max-len)");
    TESSERA_CHECK(p + c.count <= position_limit(), "sequence in slot ", c.slot, " would reach ", p + c.count,
                  " positions, past the ", position_limit(), " the model's learned positions cover");
    for (int64_t t = 0; t < c.count; ++t)
      TESSERA_CHECK(c.tokens[t] >= 0 && c.tokens[t] < V, "token id ", c.tokens[t], " is outside the model's vocabulary [0, ",
                    V, ")");
    first_row.push_back(n);
    start.push_back(p);
    n += c.count;
    logit_rows += c.all_logits ? c.count : 1;
  }
  TESSERA_CHECK(n > 0, "Decoder::forward: no tokens");

  // Micro-batches of whole chunks (one per stage, as the chunks allow), through the stages in turn.
  Tensor x = rows(ws_.x, n, C);
  Tensor tokens = rows(ws_.tokens, 1, n, DType::i32);
  const int64_t pp = stages_.size(), micro = std::min<int64_t>(pp, static_cast<int64_t>(chunks.size()));
  for (int64_t m = 0; m < micro; ++m) {
    const size_t begin = chunks.size() * static_cast<size_t>(m) / static_cast<size_t>(micro);
    const size_t end = chunks.size() * static_cast<size_t>(m + 1) / static_cast<size_t>(micro);
    const std::vector<SlotTokens> part(chunks.begin() + static_cast<std::ptrdiff_t>(begin),
                                       chunks.begin() + static_cast<std::ptrdiff_t>(end));
    std::vector<int64_t> part_row, part_start;
    const int64_t row0 = first_row[begin];
    for (size_t i = begin; i < end; ++i) {
      part_row.push_back(first_row[i] - row0);
      part_start.push_back(start[i]);
    }
    const int64_t rows_m = (end < chunks.size() ? first_row[end] : n) - row0;
    Tensor xm = x.slice(row0 * C, {rows_m, C});
    if (first_stage()) {  // embeddings: each chunk's tokens, plus (gpt2) its positions' rows of the table
      for (size_t i = 0; i < part.size(); ++i) {
        const SlotTokens& c = part[i];
        std::memcpy(tokens.data<int32_t>() + row0 + part_row[i], c.tokens, static_cast<size_t>(c.count) * sizeof(int32_t));
        Tensor ids = tokens.slice(row0 + part_row[i], {1, c.count});
        Tensor out = xm.slice(part_row[i] * C, {1, c.count, C});
        const Tensor positions = wpe_.defined() ? wpe_.slice(part_start[i] * C, {c.count, C}) : Tensor();
        ops::embedding_forward(out, ids, wte_, positions);
      }
    } else {
      stages_.group->recv(xm, stages_.rank() - 1, static_cast<int>(m));
    }
    run_blocks(xm, part, part_row, part_start, cache, rows_m);
    if (!last_stage()) stages_.group->send(xm, stages_.rank() + 1, static_cast<int>(m));
  }
  for (size_t i = 0; i < chunks.size(); ++i) cache.set_length(chunks[i].slot, start[i] + chunks[i].count);

  // The rows asked for, then the final norm and the head on them alone (the last stage), and the
  // logits to every stage.
  Tensor logits = rows(ws_.logits, logit_rows, V);
  if (last_stage()) {
    Tensor selected = rows(ws_.selected, logit_rows, C), selected_norm = rows(ws_.selected_norm, logit_rows, C);
    int64_t at = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const int64_t take = chunks[i].all_logits ? chunks[i].count : 1;
      const int64_t from = first_row[i] + chunks[i].count - take;
      std::memcpy(selected.data<float>() + at * C, x.data<float>() + from * C,
                  static_cast<size_t>(take * C) * sizeof(float));
      at += take;
    }
    norm(selected_norm, selected, ln_f_weight_, ln_f_bias_, logit_rows);
    linear(logits, selected_norm, head_, nullptr, &ws_.w8a8);
  }
  if (stages_.size() > 1) stages_.group->broadcast(logits, stages_.size() - 1);
  return logits;
}

void Decoder::run_blocks(Tensor& x, const std::vector<SlotTokens>& chunks, const std::vector<int64_t>& first_row,
                         const std::vector<int64_t>& start, KvCache& cache, int64_t n) {
  const int64_t C = config_.hidden, H = local_heads(), K = local_kv_heads(), D = head_dim();
  Tensor h = rows(ws_.h, n, C), branch = rows(ws_.branch, n, C), att = rows(ws_.att, n, H * D);
  Tensor qkv = rows(ws_.qkv, n, 3 * H * D);
  for (int64_t l = 0; l < local_layers(); ++l) {
    const Block& b = blocks_[static_cast<size_t>(l)];
    norm(h, x, b.ln1_weight, b.ln1_bias, n);
    if (!config_.llama()) {
      linear(qkv, h, b.qkv, nullptr, &ws_.w8a8);
    } else {
      Tensor q = rows(ws_.q, n, H * D), k = rows(ws_.k, n, K * D), v = rows(ws_.v, n, K * D);
      linear(q, h, b.q, nullptr, &ws_.w8a8);
      linear(k, h, b.k, nullptr, &ws_.w8a8);
      linear(v, h, b.v, nullptr, &ws_.w8a8);
      for (size_t i = 0; i < chunks.size(); ++i) {  // each slot's rows at its own positions
        const int64_t r0 = first_row[i], cnt = chunks[i].count;
        Tensor packed = qkv.slice(r0 * 3 * H * D, {1, cnt, 3 * H * D});
        ops::RopeShape s;
        s.batch = 1;
        s.seq = cnt;
        s.heads = H;
        s.kv_heads = K;
        s.head_dim = D;
        s.group = config_.heads / config_.kv();  // the whole model's: which kv head a global query head reads
        s.first_head = split_.rank() * H;
        s.first_kv_head = first_kv_head();
        s.first_position = start[i];
        s.theta = config_.rope_theta;
        ops::rope_pack_forward(packed, q.slice(r0 * H * D, {1, cnt, H * D}), k.slice(r0 * K * D, {1, cnt, K * D}),
                               v.slice(r0 * K * D, {1, cnt, K * D}), s);
      }
    }
    attention(l, chunks, first_row, start, cache, n);
    linear(branch, att, b.proj, nullptr, &ws_.w8a8);
    reduce(branch);
    ops::add_inplace(x, branch);
    norm(h, x, b.ln2_weight, b.ln2_bias, n);
    if (b.moe) {
      moe(branch, h, b, n);
    } else {
      mlp(branch, h, b, n);
    }
    reduce(branch);
    ops::add_inplace(x, branch);
  }
}

void Decoder::mlp(Tensor& branch, const Tensor& h, const Block& b, int64_t n) {
  const int64_t F = b.mlp_features;
  if (!config_.llama()) {
    Tensor pre = rows(ws_.mlp_a, n, F), act = rows(ws_.mlp_b, n, F);
    linear(act, h, b.fc, &pre, &ws_.w8a8);
    linear(branch, act, b.fc_proj, nullptr, &ws_.w8a8);
  } else {
    Tensor gate = rows(ws_.mlp_a, n, F), up = rows(ws_.mlp_b, n, F), act = rows(ws_.mlp_c, n, F);
    linear(gate, h, b.gate, nullptr, &ws_.w8a8);
    linear(up, h, b.up, nullptr, &ws_.w8a8);
    ops::swiglu_forward(act, gate, up);
    linear(branch, act, b.down, nullptr, &ws_.w8a8);
  }
}

// Route (the router's softmax and top-k, as nn::MoeRouter::forward computes them), pack each
// expert's rows (expert by expert, first choices before second, token order within), run each
// expert on its rows, then add gate x output into the branch token by token, choice by choice (the
// trainer's order: its eval loss is matched to rounding).
void Decoder::moe(Tensor& branch, const Tensor& h, const Block& b, int64_t n) {
  const int64_t C = config_.hidden, E = config_.moe.experts, k = config_.moe.router.top_k;
  const int64_t EH = config_.moe.hidden / split_.size();
  const bool renormalise = config_.moe.router.norm == nn::RouterNorm::softmax_topk;
  Tensor logits = rows(ws_.router_logits, n, E);
  linear(logits, h, b.router, nullptr, &ws_.w8a8);
  ws_.choice.resize(static_cast<size_t>(n * k));
  ws_.gate.resize(static_cast<size_t>(n * k));
  ws_.slot.resize(static_cast<size_t>(n * k));
  const float* lg = logits.data<float>();
  for (int64_t t = 0; t < n; ++t) {
    const float* row = lg + t * E;
    int64_t first = 0;  // strict >: the lower index wins a tie
    for (int64_t e = 1; e < E; ++e)
      if (row[e] > row[first]) first = e;
    int64_t second = -1;
    if (k == 2)
      for (int64_t e = 0; e < E; ++e)
        if (e != first && (second < 0 || row[e] > row[second])) second = e;
    const double max = row[first];
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(row[e]) - max);
    auto prob = [&](int64_t e) { return static_cast<float>(std::exp(static_cast<double>(row[e]) - max) / sum); };
    ws_.choice[static_cast<size_t>(t * k)] = static_cast<int32_t>(first);
    if (k == 1) {
      ws_.gate[static_cast<size_t>(t)] = renormalise ? 1.0f : prob(first);
    } else {
      ws_.choice[static_cast<size_t>(t * k + 1)] = static_cast<int32_t>(second);
      const double p1 = prob(first), p2 = prob(second), sum12 = renormalise ? p1 + p2 : 1.0;
      ws_.gate[static_cast<size_t>(t * k)] = static_cast<float>(p1 / sum12);
      ws_.gate[static_cast<size_t>(t * k + 1)] = static_cast<float>(p2 / sum12);
    }
  }
  // Packed rows: expert e's from expert_first[e], first choices before second ones.
  ws_.expert_first.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t a = 0; a < n * k; ++a) ++ws_.expert_first[static_cast<size_t>(ws_.choice[static_cast<size_t>(a)] + 1)];
  for (int64_t e = 0; e < E; ++e) ws_.expert_first[static_cast<size_t>(e + 1)] += ws_.expert_first[static_cast<size_t>(e)];
  std::vector<int64_t> next(ws_.expert_first.begin(), ws_.expert_first.end() - 1);
  Tensor in = rows(ws_.expert_in, n * k, C), out = rows(ws_.expert_out, n * k, C);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = next[static_cast<size_t>(ws_.choice[static_cast<size_t>(t * k + j)])]++;
      ws_.slot[static_cast<size_t>(t * k + j)] = static_cast<int32_t>(row);
      std::memcpy(in.data<float>() + row * C, h.data<float>() + t * C, static_cast<size_t>(C) * sizeof(float));
    }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t first = ws_.expert_first[static_cast<size_t>(e)];
    const int64_t count = ws_.expert_first[static_cast<size_t>(e + 1)] - first;
    if (count == 0) continue;
    const Tensor xe = in.slice(first * C, {count, C});
    Tensor ye = out.slice(first * C, {count, C});
    const auto u = static_cast<size_t>(e);
    if (!config_.llama()) {
      Tensor pre = rows(ws_.mlp_a, count, EH), act = rows(ws_.mlp_b, count, EH);
      linear(act, xe, b.expert_fc[u], &pre, &ws_.w8a8);
      linear(ye, act, b.expert_proj[u], nullptr, &ws_.w8a8);
    } else {
      Tensor gate = rows(ws_.mlp_a, count, EH), up = rows(ws_.mlp_b, count, EH), act = rows(ws_.mlp_c, count, EH);
      linear(gate, xe, b.expert_gate[u], nullptr, &ws_.w8a8);
      linear(up, xe, b.expert_up[u], nullptr, &ws_.w8a8);
      ops::swiglu_forward(act, gate, up);
      linear(ye, act, b.expert_down[u], nullptr, &ws_.w8a8);
    }
  }
  // The shared experts' output first, then each choice's gated output added to it.
  if (b.mlp_features > 0) {
    mlp(branch, h, b, n);
  } else {
    std::fill_n(branch.data<float>(), n * C, 0.0f);
  }
  float* ys = branch.data<float>();
  const float* back = out.data<float>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = ws_.slot[static_cast<size_t>(t * k + j)];
      const float g = ws_.gate[static_cast<size_t>(t * k + j)];
      for (int64_t i = 0; i < C; ++i) ys[t * C + i] += g * back[row * C + i];
    }
}

// Causal attention of each chunk's queries over its slot's cache, after writing the chunk's keys
// and values there. Query head h reads kv head h / (H / K). A single new token sees every cached
// position (attention_decode_forward, the rows read where they lie); a longer chunk sees the
// positions before it (a block, if any) merged with its own diagonal block.
void Decoder::attention(int64_t layer, const std::vector<SlotTokens>& chunks, const std::vector<int64_t>& first_row,
                        const std::vector<int64_t>& start, KvCache& cache, int64_t n) {
  const int64_t H = local_heads(), K = local_kv_heads(), D = head_dim(), group = H / K, width = 3 * H * D;
  const float* qkv = ws_.qkv.data<float>();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t slot = chunks[i].slot, p = start[i], cnt = chunks[i].count;
    for (int64_t g = 0; g < K; ++g) {
      Tensor block = cache.block(layer, slot, g, p, cnt);
      float* dst = block.data<float>();
      for (int64_t t = 0; t < cnt; ++t) {
        const float* row = qkv + (first_row[i] + t) * width;
        std::memcpy(dst + t * 2 * D, row + (H + g * group) * D, static_cast<size_t>(D) * sizeof(float));
        std::memcpy(dst + t * 2 * D + D, row + (2 * H + g * group) * D, static_cast<size_t>(D) * sizeof(float));
      }
    }
  }
  // Each head's queries gathered [H][n, D]; its outputs likewise, then scattered into att [n, H x D].
  Tensor q_heads = rows(ws_.q_heads, H * n, D), out_heads = rows(ws_.out_heads, H * n, D);
  Tensor lse = rows(ws_.lse, H, n);
  float* qh = q_heads.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(qh + (h * n + r) * D, qkv + r * width + h * D, static_cast<size_t>(D) * sizeof(float));
  const int64_t items = static_cast<int64_t>(chunks.size()) * H;
#pragma omp parallel for schedule(dynamic, 1) if (items > 1)
  for (int64_t item = 0; item < items; ++item) {
    const size_t i = static_cast<size_t>(item / H);
    const int64_t h = item % H, g = h / group, slot = chunks[i].slot, p = start[i], cnt = chunks[i].count;
    const int64_t at = h * n + first_row[i];
    Tensor q = q_heads.slice(at * D, {1, cnt, D});
    Tensor out = out_heads.slice(at * D, {1, cnt, D});
    Tensor l = lse.slice(at, {1, 1, cnt});
    if (cnt == 1) {  // a decode step: the one query against the slot's cache, its rows read in place
      kernels::cpu::attention_decode_forward(out.data<float>(), q.data<float>(),
                                             cache.block(layer, slot, g, 0, p + 1).data<float>(), p + 1, D);
    } else {
      if (p > 0) ops::attention_block_forward(out, l, q, cache.block(layer, slot, g, 0, p), 1, false, false);
      ops::attention_block_forward(out, l, q, cache.block(layer, slot, g, p, cnt), 1, true, p > 0);
    }
  }
  float* a = ws_.att.data<float>();
  const float* oh = out_heads.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(a + r * H * D + h * D, oh + (h * n + r) * D, static_cast<size_t>(D) * sizeof(float));
}

}  // namespace tessera::infer
