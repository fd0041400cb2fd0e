// Scoring: the model's mean cross-entropy over a token data set's evaluation windows, the ones
// gpt_train evaluates on (io::TokenLoader::eval_rows: consecutive windows of seq_len + 1 tokens,
// global_batch per evaluation batch), so that it equals gpt_train's eval_loss for the same
// --seq-len, --global-batch and --eval-batches. Under --dp the windows are split over the
// replicas (infer::windows_of_replica) and the sums added over them.
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "infer/decoder.h"
#include "io/token_dataset.h"

namespace tessera::infer {

struct ScoreOptions {
  int64_t seq_len = 0;
  int64_t global_batch = 8;  // rows per evaluation batch (gpt_train's --global-batch)
  int64_t eval_batches = 0;  // 0: every window once (TokenLoader::eval_batches())
  int64_t slots = 1;         // windows run through the model at once
  // The replicas (one rank of each, this one among them: the mesh's dp group) that share the
  // windows; every member's Score is the total. Null: this replica scores every window.
  comm::Communicator* replicas = nullptr;
};

struct Score {
  double mean_loss = 0;  // nats per token
  int64_t tokens = 0, windows = 0, batches = 0;
};

Score score_windows(Decoder& decoder, const io::TokenDataset& data, const ScoreOptions& o);

}  // namespace tessera::infer
