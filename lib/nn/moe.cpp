// MoeFeedForward: routing, packing by expert, the layout's dispatch/combine around the stacked
// expert MLPs, gate weighting, and the same path backwards.
#include "nn/moe.h"

#include <algorithm>

#include "kernels/ops.h"

namespace tessera::nn {

double MoeStats::max_load() const {
  int64_t total = 0, most = 0;
  for (int64_t k : kept) {
    total += k;
    most = std::max(most, k);
  }
  return total == 0 ? 0.0 : static_cast<double>(most) * static_cast<double>(kept.size()) / static_cast<double>(total);
}

MoeFeedForward::MoeFeedForward(ParamStore& store, const std::string& name, const MoeConfig& config,
                               const ExpertLayout& layout)
    : config_(config), store_(&store), layout_(&layout), router_name_(name + ".router.weight") {
  TESSERA_CHECK(config.channels > 0 && config.hidden > 0 && config.experts > 0, name, ": channels ", config.channels,
                ", hidden ", config.hidden, " and experts ", config.experts, " must be positive");
  const Shard shard = layout.experts_shard(config.experts, ("MoE layer " + name).c_str());
  local_experts_ = layout.local_experts(config.experts);
  first_expert_ = layout.first_local_expert(config.experts);
  router_ = MoeRouter(store, name + ".router", config.channels, config.experts, config.router);
  const int64_t e = config.experts, c = config.channels, h = config.hidden;
  const std::string experts = name + ".experts";
  if (config.swiglu) {  // Mixtral's w1, w3, w2
    fc_weight_ = store.add(experts + ".gate.weight", {e, h, c}, Init::Normal(config.init_std), true, shard);
    up_weight_ = store.add(experts + ".up.weight", {e, h, c}, Init::Normal(config.init_std), true, shard);
    proj_weight_ = store.add(experts + ".down.weight", {e, c, h}, Init::Normal(config.proj_init_std), true, shard);
  } else {
    fc_weight_ = store.add(experts + ".fc.weight", {e, h, c}, Init::Normal(config.init_std), true, shard);
    fc_bias_ = store.add(experts + ".fc.bias", {e, h}, Init::Zeros(), false, shard);
    proj_weight_ = store.add(experts + ".proj.weight", {e, c, h}, Init::Normal(config.proj_init_std), true, shard);
    proj_bias_ = store.add(experts + ".proj.bias", {e, c}, Init::Zeros(), false, shard);
  }
  for (int id : expert_param_ids()) store.set_expert(id);
  for (int id : {fc_weight_, proj_weight_, up_weight_})  // read only by the experts' GEMMs
    if (id >= 0) store.set_rounded_on_read(id);
}

std::vector<int> MoeFeedForward::expert_param_ids() const {
  if (config_.swiglu) return {fc_weight_, up_weight_, proj_weight_};
  return {fc_weight_, fc_bias_, proj_weight_, proj_bias_};
}

int64_t MoeFeedForward::max_received(int64_t rows) const {
  const int64_t ep = layout_->size(), every = ep * rows * router_.top_k();
  const int64_t capacity = router_.capacity(ep * rows);
  return capacity == 0 ? every : std::min(every, local_experts_ * capacity);
}

MoeFeedForward::Saved MoeFeedForward::allocate(int64_t rows, Device device) const {
  TESSERA_CHECK(device == Device::cpu, "the MoE layer runs on the host (cpu tensors only)");
  const int64_t c = config_.channels, h = config_.hidden, k = router_.top_k(), r = max_received(rows);
  Saved s;
  s.router = router_.allocate(rows, device);
  s.all_counts = Tensor::empty({layout_->size(), router_.count_width()}, DType::i32);
  s.slot = Tensor::empty({rows, k}, DType::i32);
  s.expert_in = Tensor::empty({r, c});
  s.fc = Tensor::empty({r, h});
  if (config_.swiglu) s.up = Tensor::empty({r, h});
  s.gelu = Tensor::empty({r, h});
  s.returned = Tensor::empty({rows * k, c});
  return s;
}

MoeFeedForward::Scratch MoeFeedForward::allocate_scratch(int64_t rows, Device device) const {
  TESSERA_CHECK(device == Device::cpu, "the MoE layer runs on the host (cpu tensors only)");
  const int64_t c = config_.channels, h = config_.hidden, k = router_.top_k(), r = max_received(rows);
  Scratch w;
  w.packed = Tensor::empty({rows * k, c});
  w.rows_a = Tensor::empty({r, c});
  w.rows_b = Tensor::empty({r, c});
  w.dhidden = Tensor::empty({r, h});
  if (config_.swiglu) w.dup = Tensor::empty({r, h});
  w.dgate = Tensor::empty({rows, k});
  w.dlogits = Tensor::empty({rows, config_.experts});
  const int64_t staging = layout_->staging_rows(rows * k, r);
  if (staging > 0) w.staging = Tensor::empty({staging, c});
  return w;
}

float MoeFeedForward::forward(Tensor& y, const Tensor& x, Saved& s, Scratch& w, bool accumulate) const {
  const int64_t n = s.slot.dim(0), k = router_.top_k(), c = config_.channels, e_count = config_.experts;
  TESSERA_CHECK(y.numel() == n * c, "MoE layer: output ", y.shape().str(), " is not ", n, " rows of ", c);
  router_.forward(x, s.router);
  // The counts exchange: every rank learns what every rank routed, so capacity is decided alike
  // everywhere and each rank knows what it will send and receive.
  layout_->all_gather_counts(s.router.counts, s.all_counts);
  router_.apply_capacity(s.router, s.plan, s.all_counts, layout_->rank());
  const ExpertTraffic& traffic = s.plan.traffic;
  const int me = layout_->rank();
  const int64_t sent = traffic.sent_by(me), received = traffic.received_by(me);
  TESSERA_CHECK(received <= s.expert_in.dim(0), "MoE layer: this rank's experts receive ", received,
                " rows, more than the ", s.expert_in.dim(0),
                " allocated (a rank routed more rows than allocate() was told)");

  // Pack the kept rows by global expert, in token order inside each expert.
  std::vector<int64_t> next(static_cast<size_t>(e_count), 0);
  for (int64_t e = 1; e < e_count; ++e) next[e] = next[e - 1] + traffic.at(me, e - 1);
  const int32_t* expert = s.router.expert.data<int32_t>();
  const int32_t* kept = s.router.kept.data<int32_t>();
  int32_t* slot = s.slot.data<int32_t>();
  const float* xs = x.data<float>();
  float* packed = w.packed.data<float>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      if (!kept[t * k + j]) {
        slot[t * k + j] = -1;
        continue;
      }
      const int64_t row = next[expert[t * k + j]]++;
      slot[t * k + j] = static_cast<int32_t>(row);
      std::copy_n(xs + t * c, c, packed + row * c);
    }

  const Tensor to_send = w.packed.rows(0, sent);
  Tensor expert_in = s.expert_in.rows(0, received);
  layout_->dispatch(to_send, expert_in, traffic, w.staging);
  Tensor expert_out = w.rows_a.rows(0, received);
  run_experts(expert_out, s, received);
  Tensor returned = s.returned.rows(0, sent);
  layout_->combine(expert_out, returned, traffic, w.staging);

  // y[t] = sum over kept choices of gate * expert output.
  float* ys = y.data<float>();
  const float* back = s.returned.data<float>();
  const float* gate = s.router.gate.data<float>();
  if (!accumulate) std::fill_n(ys, n * c, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = slot[t * k + j];
      if (row < 0) continue;
      const float g = gate[t * k + j];
      for (int64_t i = 0; i < c; ++i) ys[t * c + i] += g * back[row * c + i];
    }

  const RouterLosses losses = router_.losses(s.router, s.plan);
  MoeStats& st = s.stats;
  st.tokens = s.plan.tokens;
  st.capacity = s.plan.capacity;
  st.dropped = s.plan.dropped;
  st.routed = s.plan.routed;
  st.kept = s.plan.kept;
  st.aux_loss = losses.aux;
  st.z_loss = losses.z;
  return static_cast<float>(config_.router.aux_loss_coef * losses.aux + config_.router.z_loss_coef * losses.z);
}

// out [R, C]: each local expert's MLP on its rows of s.expert_in (saving fc, up and gelu).
void MoeFeedForward::run_experts(Tensor& out, const Saved& s, int64_t received) const {
  const int64_t c = config_.channels, h = config_.hidden;
  const ExpertTraffic& traffic = s.plan.traffic;
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  const ops::Operand w1 = store_->operand(fc_weight_);
  const ops::Operand w2 = store_->operand(proj_weight_);
  const bool swiglu = config_.swiglu;
  const ops::Operand w3 = swiglu ? store_->operand(up_weight_) : ops::Operand(Tensor{});
  const Tensor b1 = swiglu ? Tensor{} : store_->value(fc_bias_);
  const Tensor b2 = swiglu ? Tensor{} : store_->value(proj_bias_);
  int64_t first = 0;
  for (int64_t l = 0; l < local_experts_; ++l) {
    const int64_t rows = traffic.expert_rows(layout_->rank(), l);
    if (rows == 0) continue;  // an expert nobody chose: no work, no gradient
    const Tensor in = s.expert_in.rows(first, rows);
    Tensor pre = s.fc.rows(first, rows), act = s.gelu.rows(first, rows), o = out.rows(first, rows);
    ops::matmul(in, false, w1.slice(l * h * c, {h, c}), true, pre, 1.0f, 0.0f, inputs);
    if (swiglu) {
      Tensor up = s.up.rows(first, rows);
      ops::matmul(in, false, w3.slice(l * h * c, {h, c}), true, up, 1.0f, 0.0f, inputs);
      ops::swiglu_forward(act, pre, up);
      ops::matmul(act, false, w2.slice(l * c * h, {c, h}), true, o, 1.0f, 0.0f, inputs);
    } else {
      ops::bias_gelu_forward(act, pre, b1.slice(l * h, {h}));
      ops::broadcast_rows(o, b2.slice(l * c, {c}));
      ops::matmul(act, false, w2.slice(l * c * h, {c, h}), true, o, 1.0f, 1.0f, inputs);
    }
    first += rows;
  }
  TESSERA_CHECK(first == received, "MoE layer: experts took ", first, " of ", received, " received rows");
}

// dinput [R, C] from dout [R, C] (the gradients of the expert outputs); parameter gradients added
// (or, with defer, their operands kept for experts_backward_weights).
void MoeFeedForward::experts_backward(Tensor& dinput, Tensor& dout, const Saved& s, Scratch& w,
                                      WeightGrads* defer) const {
  const int64_t c = config_.channels, h = config_.hidden;
  const ExpertTraffic& traffic = s.plan.traffic;
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  const bool swiglu = config_.swiglu, weights = defer == nullptr;
  const ops::Operand w1 = store_->operand(fc_weight_);
  const ops::Operand w2 = store_->operand(proj_weight_);
  const ops::Operand w3 = swiglu ? store_->operand(up_weight_) : ops::Operand(Tensor{});
  Tensor no_grad;
  Tensor& dw1 = weights ? store_->grad(fc_weight_) : no_grad;
  Tensor& dw2 = weights ? store_->grad(proj_weight_) : no_grad;
  Tensor& dw3 = weights && swiglu ? store_->grad(up_weight_) : no_grad;
  Tensor& db1 = weights && !swiglu ? store_->grad(fc_bias_) : no_grad;
  Tensor& db2 = weights && !swiglu ? store_->grad(proj_bias_) : no_grad;
  int64_t first = 0;
  for (int64_t l = 0; l < local_experts_; ++l) {
    const int64_t rows = traffic.expert_rows(layout_->rank(), l);
    if (rows == 0) continue;
    const Tensor d_o = dout.rows(first, rows), act = s.gelu.rows(first, rows), pre = s.fc.rows(first, rows),
                 in = s.expert_in.rows(first, rows);
    Tensor dh = w.dhidden.rows(first, rows), d_in = dinput.rows(first, rows);
    {
      const ops::RoundedOperand rounded_d_o(d_o, inputs);  // read by both products: rounded once under bf16
      if (weights) {
        Tensor dw2_l = dw2.slice(l * c * h, {c, h});
        ops::matmul(rounded_d_o, true, act, false, dw2_l, 1.0f, 1.0f, inputs);
        if (!swiglu) {
          Tensor db2_l = db2.slice(l * c, {c});
          ops::bias_backward(db2_l, d_o);
        }
      }
      ops::matmul(rounded_d_o, false, w2.slice(l * c * h, {c, h}), false, dh, 1.0f, 0.0f, inputs);
    }
    if (swiglu) {
      // dh: d(hidden), then d(gate); du: d(up). d_in = dgate W1 + dup W3.
      Tensor du = w.dup.rows(first, rows);
      ops::swiglu_backward(dh, du, dh, pre, s.up.rows(first, rows));
      const ops::RoundedOperand rounded_dh(dh, inputs), rounded_du(du, inputs);
      if (weights) {
        Tensor dw1_l = dw1.slice(l * h * c, {h, c}), dw3_l = dw3.slice(l * h * c, {h, c});
        ops::matmul(rounded_dh, true, in, false, dw1_l, 1.0f, 1.0f, inputs);
        ops::matmul(rounded_du, true, in, false, dw3_l, 1.0f, 1.0f, inputs);
      }
      ops::matmul(rounded_dh, false, w1.slice(l * h * c, {h, c}), false, d_in, 1.0f, 0.0f, inputs);
      ops::matmul(rounded_du, false, w3.slice(l * h * c, {h, c}), false, d_in, 1.0f, 1.0f, inputs);
    } else {
      ops::gelu_backward(dh, pre, dh);
      const ops::RoundedOperand rounded_dh(dh, inputs);
      if (weights) {
        Tensor dw1_l = dw1.slice(l * h * c, {h, c}), db1_l = db1.slice(l * h, {h});
        ops::matmul(rounded_dh, true, in, false, dw1_l, 1.0f, 1.0f, inputs);
        ops::bias_backward(db1_l, dh);
      }
      ops::matmul(rounded_dh, false, w1.slice(l * h * c, {h, c}), false, d_in, 1.0f, 0.0f, inputs);
    }
    first += rows;
  }
  if (weights) return;
  // W's operands: the received rows' output and hidden gradients, in buffers of the most rows the
  // experts can receive (the same every step whatever the routing); the inputs and activations
  // stay in s.
  const int64_t most = w.dhidden.dim(0);
  const Tensor dout_kept = defer->keep_rows(dout.rows(0, first), most);
  const Tensor dh_kept = defer->keep_rows(w.dhidden.rows(0, first), most);
  const Tensor du_kept = swiglu ? defer->keep_rows(w.dup.rows(0, first), most) : Tensor{};
  defer->later([this, dout_kept, dh_kept, du_kept, &s] { experts_backward_weights(dout_kept, dh_kept, du_kept, s); });
}

// The weight-gradient half of experts_backward, the same products on the same operands.
void MoeFeedForward::experts_backward_weights(const Tensor& dout, const Tensor& dhidden, const Tensor& dup,
                                              const Saved& s) const {
  const int64_t c = config_.channels, h = config_.hidden;
  const ExpertTraffic& traffic = s.plan.traffic;
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  const bool swiglu = config_.swiglu;
  Tensor& dw1 = store_->grad(fc_weight_);
  Tensor& dw2 = store_->grad(proj_weight_);
  int64_t first = 0;
  for (int64_t l = 0; l < local_experts_; ++l) {
    const int64_t rows = traffic.expert_rows(layout_->rank(), l);
    if (rows == 0) continue;
    const Tensor d_o = dout.rows(first, rows), dh = dhidden.rows(first, rows), act = s.gelu.rows(first, rows),
                 in = s.expert_in.rows(first, rows);
    Tensor dw2_l = dw2.slice(l * c * h, {c, h}), dw1_l = dw1.slice(l * h * c, {h, c});
    ops::matmul(ops::RoundedOperand(d_o, inputs), true, act, false, dw2_l, 1.0f, 1.0f, inputs);
    if (swiglu) {
      Tensor dw3_l = store_->grad(up_weight_).slice(l * h * c, {h, c});
      ops::matmul(ops::RoundedOperand(dh, inputs), true, in, false, dw1_l, 1.0f, 1.0f, inputs);
      ops::matmul(ops::RoundedOperand(dup.rows(first, rows), inputs), true, in, false, dw3_l, 1.0f, 1.0f, inputs);
    } else {
      Tensor db2_l = store_->grad(proj_bias_).slice(l * c, {c}), db1_l = store_->grad(fc_bias_).slice(l * h, {h});
      ops::bias_backward(db2_l, d_o);
      ops::matmul(ops::RoundedOperand(dh, inputs), true, in, false, dw1_l, 1.0f, 1.0f, inputs);
      ops::bias_backward(db1_l, dh);
    }
    first += rows;
  }
}

void MoeFeedForward::backward(Tensor& dx, const Tensor& dy, const Tensor& x, const Saved& s, Scratch& w,
                              float loss_scale, bool accumulate, WeightGrads* defer) const {
  const int64_t n = s.slot.dim(0), k = router_.top_k(), c = config_.channels;
  TESSERA_CHECK(dy.numel() == n * c && dx.numel() == n * c, "MoE layer backward: dy ", dy.shape().str(), " and dx ",
                dx.shape().str(), " are not ", n, " rows of ", c);
  const ExpertTraffic& traffic = s.plan.traffic;
  const int me = layout_->rank();
  const int64_t sent = traffic.sent_by(me), received = traffic.received_by(me);

  // The gates' gradients, and the expert outputs' gradients (gate * dy) packed as dispatched.
  const int32_t* slot = s.slot.data<int32_t>();
  const float* gate = s.router.gate.data<float>();
  const float* dys = dy.data<float>();
  const float* back = s.returned.data<float>();
  float* dgate = w.dgate.data<float>();
  float* packed = w.packed.data<float>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = slot[t * k + j];
      dgate[t * k + j] = 0.0f;
      if (row < 0) continue;
      double dot = 0.0;
      for (int64_t i = 0; i < c; ++i) {
        dot += static_cast<double>(dys[t * c + i]) * back[row * c + i];
        packed[row * c + i] = gate[t * k + j] * dys[t * c + i];
      }
      dgate[t * k + j] = static_cast<float>(dot);
    }

  Tensor to_send = w.packed.rows(0, sent);
  Tensor d_out = w.rows_a.rows(0, received), d_in = w.rows_b.rows(0, received);
  layout_->dispatch(to_send, d_out, traffic, w.staging);
  experts_backward(d_in, d_out, s, w, defer);
  layout_->combine(d_in, to_send, traffic, w.staging);  // to_send now: d(expert input) per assignment

  float* dxs = dx.data<float>();
  if (!accumulate) std::fill_n(dxs, n * c, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t row = slot[t * k + j];
      if (row < 0) continue;
      for (int64_t i = 0; i < c; ++i) dxs[t * c + i] += packed[row * c + i];
    }
  router_.backward(dx, w.dlogits, w.dgate, x, s.router, s.plan, loss_scale, defer);
}

}  // namespace tessera::nn
