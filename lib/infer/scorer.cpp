// score_windows: each window's first seq_len tokens prefilled into a slot of a cache as long as a
// window, logits at every position, softmax cross-entropy against the next tokens, summed in double
// (under --dp over this replica's windows, then over the replicas).
#include "infer/scorer.h"

#include <algorithm>
#include <span>
#include <vector>

#include "core/error.h"
#include "infer/replicas.h"
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
  const int replica = o.replicas ? o.replicas->rank() : 0, replicas = o.replicas ? o.replicas->size() : 1;
  const WindowRange mine = windows_of_replica(batches * o.global_batch, replica, replicas);
  const int64_t slots = std::max<int64_t>(1, std::min(o.slots, mine.count)), T = o.seq_len, V = decoder.vocab();
  KvCache cache = decoder.make_cache(slots, T);
  std::vector<int32_t> rows(static_cast<size_t>(slots * (T + 1)));
  Tensor targets = Tensor::empty({slots * T}, DType::i32);
  Tensor losses = Tensor::empty({slots * T}), lse = Tensor::empty({slots * T});
  double sum = 0;
  for (int64_t first = mine.first; first < mine.first + mine.count; first += slots) {
    const int64_t count = std::min(slots, mine.first + mine.count - first);
    for (int64_t j = 0; j < count;) {  // the windows [first, first + count): rows of one batch at a time
      const int64_t b = (first + j) / o.global_batch, row = (first + j) % o.global_batch;
      const int64_t n = std::min(count - j, o.global_batch - row);
      loader.eval_rows(b, row, n, rows.data() + j * (T + 1));
      j += n;
    }
    std::vector<SlotTokens> chunks;
    for (int64_t j = 0; j < count; ++j) {
      const int32_t* row = rows.data() + j * (T + 1);
      cache.clear(j);
      chunks.push_back({j, row, T, true});
      std::copy(row + 1, row + T + 1, targets.data<int32_t>() + j * T);
    }
    const Tensor logits = decoder.forward(chunks, cache);
    Tensor l = losses.slice(0, {count * T}), e = lse.slice(0, {count * T});
    ops::softmax_xent_forward(l, e, logits, targets.slice(0, {count * T}), V);
    for (int64_t i = 0; i < count * T; ++i) sum += l.data<float>()[i];
  }
  Score s;
  s.windows = mine.count;
  if (o.replicas) {  // every rank of a replica holds every logit (HeadSplit, StageSplit): the same sums
    double totals[2] = {sum, static_cast<double>(mine.count)};
    o.replicas->all_reduce_sum(std::span<double>(totals, 2));
    sum = totals[0];
    s.windows = static_cast<int64_t>(totals[1]);
  }
  s.batches = batches;
  s.tokens = s.windows * T;
  s.mean_loss = sum / static_cast<double>(s.tokens);
  return s;
}

}  // namespace tessera::infer
