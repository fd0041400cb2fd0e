// score_windows: each window's first seq_len tokens prefilled into a slot of a cache as long as a
// window, logits at every position, softmax cross-entropy against the next tokens, summed in double.
#include "infer/scorer.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "io/token_loader.h"
#include "kernels/ops.h"

namespace tessera::infer {

Score score_windows(Decoder& decoder, const io::TokenDataset& data, const ScoreOptions& o) {
  TESSERA_CHECK(o.seq_len >= 1, "--seq-len must be >= 1, got ", o.seq_len);
  TESSERA_CHECK(o.global_batch >= 1, "--global-batch must be >= 1, got ", o.global_batch);
  TESSERA_CHECK(o.eval_batches >= 0, "--eval-batches must be >= 0 (0: every window), got ", o.eval_batches);
  TESSERA_CHECK(data.vocab_size <= decoder.vocab(), "data set ", data.path, " has vocab_size ", data.vocab_size,
                ", more than the model's ", decoder.vocab());
  TESSERA_CHECK(o.seq_len <= decoder.position_limit(), "--seq-len ", o.seq_len, " is longer than the model's ",
                decoder.position_limit(), " learned positions");
  const io::TokenLoader loader(data, o.seq_len, o.global_batch, 0);
  const int64_t batches = o.eval_batches > 0 ? std::min(o.eval_batches, loader.eval_batches()) : loader.eval_batches();
  const int64_t slots = std::max<int64_t>(1, std::min(o.slots, o.global_batch)), T = o.seq_len, V = decoder.vocab();
  KvCache cache = decoder.make_cache(slots, T);
  std::vector<int32_t> rows(static_cast<size_t>(o.global_batch * (T + 1)));
  Tensor targets = Tensor::empty({slots * T}, DType::i32);
  Tensor losses = Tensor::empty({slots * T}), lse = Tensor::empty({slots * T});
  Score s;
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    loader.eval_rows(b, 0, o.global_batch, rows.data());
    for (int64_t first = 0; first < o.global_batch; first += slots) {
      const int64_t count = std::min(slots, o.global_batch - first);
      std::vector<SlotTokens> chunks;
      for (int64_t j = 0; j < count; ++j) {
        const int32_t* row = rows.data() + (first + j) * (T + 1);
        cache.clear(j);
        chunks.push_back({j, row, T, true});
        std::copy(row + 1, row + T + 1, targets.data<int32_t>() + j * T);
      }
      const Tensor logits = decoder.forward(chunks, cache);
      Tensor l = losses.slice(0, {count * T}), e = lse.slice(0, {count * T});
      ops::softmax_xent_forward(l, e, logits, targets.slice(0, {count * T}), V);
      for (int64_t i = 0; i < count * T; ++i) sum += l.data<float>()[i];
      s.windows += count;
    }
  }
  s.batches = batches;
  s.tokens = s.windows * T;
  s.mean_loss = sum / static_cast<double>(s.tokens);
  return s;
}

}  // namespace tessera::infer
