// LmHead: the tied head's GEMMs and the (vocab-parallel) softmax cross-entropy.
#include "nn/lm_head.h"

#include <cmath>

#include "kernels/ops.h"

namespace tessera::nn {

LmHead::LmHead(const Embedding& embedding, ParamStore& store, int64_t rows, Device device)
    : embedding_(&embedding), store_(&store) {
  auto act = [&](Shape s) { return Tensor::empty(std::move(s), DType::f32, device); };
  logits_ = act({rows, embedding.local_rows()});
  lse_ = act({rows});
  losses_ = act({rows});
  host_losses_ = Tensor::empty({rows});
  if (embedding.layout().size() > 1) {
    row_max_ = act({rows});
    sums_ = act({2, rows});
    host_lse_ = Tensor::empty({rows});
    host_max_ = Tensor::empty({rows});
    host_sums_ = Tensor::empty({2, rows});
  }
}

const Tensor& LmHead::forward(const Tensor& x, const Tensor& targets, const int32_t* t, RegionWorkspace& region) {
  const Embedding& e = *embedding_;
  ops::matmul(e.layout().vocab_enter(x, region.in), false, e.table(table_), true, logits_, 1.0f, 0.0f,
              store_->matmul_inputs());
  if (e.layout().size() == 1) {
    ops::softmax_xent_forward(losses_, lse_, logits_, targets, e.vocab());
    host_losses_.copy_from(losses_);
    return host_losses_;
  }
  // lse over the whole vocabulary from the shards' row maxima and sums of exponentials.
  ops::softmax_xent_row_max(row_max_, logits_, e.valid_rows());
  e.layout().all_reduce_max(row_max_);
  ops::softmax_xent_partial(sums_, logits_, targets, row_max_, e.valid_rows(), e.vocab_start(), e.vocab());
  e.layout().all_reduce(sums_);
  host_max_.copy_from(row_max_);
  host_sums_.copy_from(sums_);
  const int64_t n = host_losses_.numel();
  const float* mx = host_max_.data<float>();
  const float* sum = host_sums_.data<float>();
  float* lse = host_lse_.data<float>();
  float* loss = host_losses_.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    lse[r] = mx[r] + std::log(sum[r]);
    loss[r] = t[r] >= 0 ? lse[r] - sum[n + r] : 0.0f;
  }
  lse_.copy_from(host_lse_);
  return host_losses_;
}

void LmHead::backward(Tensor& dx, const Tensor& x, const Tensor& targets, float scale, RegionWorkspace& region) {
  const Embedding& e = *embedding_;
  const TensorLayout& layout = e.layout();
  ops::softmax_xent_backward(logits_, logits_, targets, lse_, e.valid_rows(), scale, e.vocab_start());
  const Tensor& whole_x = layout.vocab_enter(x, region.in);
  const ops::MatmulInputs inputs = store_->matmul_inputs();
  const ops::RoundedOperand dlogits(logits_, inputs);  // both products read it: rounded once under bf16
  if (layout.splits_features()) {
    Tensor& dtable = e.table_grad_workspace();
    ops::matmul(dlogits, true, whole_x, false, dtable, 1.0f, 0.0f, inputs);
    e.add_table_grad(dtable);
  } else {
    ops::matmul(dlogits, true, whole_x, false, store_->grad(e.tokens_id()), 1.0f, 1.0f, inputs);
  }
  Tensor& whole_dx = layout.vocab_whole(dx, region);
  ops::matmul(dlogits, false, e.table(table_), false, whole_dx, 1.0f, 0.0f, inputs);
  layout.vocab_enter_backward(dx, whole_dx);
}

}  // namespace tessera::nn
