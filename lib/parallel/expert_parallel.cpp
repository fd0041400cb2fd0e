// ExpertParallel: the counts all-gather, the two all-to-alls, and the reorder between source-rank
// order (as MPI delivers rows) and expert order (as the experts read them).
#include "parallel/expert_parallel.h"

#include <algorithm>
#include <vector>

namespace tessera::parallel {

namespace {

// Copies the received rows of this rank's experts between source-rank order (rank 0's rows for
// local expert 0, 1, .., then rank 1's, ...) and expert order (expert 0's rows from rank 0, 1, ..,
// then expert 1's, ...), in the direction `to_experts` says. Inside a (rank, expert) block the
// rows keep their order.
void reorder(const Tensor& from, Tensor& to, const nn::ExpertTraffic& t, int me, bool to_experts) {
  const int64_t per = t.experts_per_rank(), first = me * per, total = t.received_by(me);
  if (total == 0) return;
  const int64_t width = from.numel() / total;
  std::vector<int64_t> by_expert(static_cast<size_t>(t.ranks * per));  // start of (i, l) in expert order
  int64_t at = 0;
  for (int64_t l = 0; l < per; ++l)
    for (int i = 0; i < t.ranks; ++i) {
      by_expert[i * per + l] = at;
      at += t.at(i, first + l);
    }
  const float* src = from.data<float>();
  float* dst = to.data<float>();
  int64_t by_rank = 0;
  for (int i = 0; i < t.ranks; ++i)
    for (int64_t l = 0; l < per; ++l) {
      const int64_t rows = t.at(i, first + l), e = by_expert[i * per + l];
      const int64_t src_row = to_experts ? by_rank : e, dst_row = to_experts ? e : by_rank;
      std::copy_n(src + src_row * width, rows * width, dst + dst_row * width);
      by_rank += rows;
    }
}

// Elements per peer of one exchange: what this rank sends each rank, or receives from each.
std::vector<int64_t> sent_counts(const nn::ExpertTraffic& t, int me, int64_t width) {
  std::vector<int64_t> n(static_cast<size_t>(t.ranks));
  for (int j = 0; j < t.ranks; ++j) n[j] = width * t.between(me, j);
  return n;
}
std::vector<int64_t> received_counts(const nn::ExpertTraffic& t, int me, int64_t width) {
  std::vector<int64_t> n(static_cast<size_t>(t.ranks));
  for (int i = 0; i < t.ranks; ++i) n[i] = width * t.between(i, me);
  return n;
}

void check_traffic(const nn::ExpertTraffic& t, int ranks, const std::string& group) {
  TESSERA_CHECK(t.ranks == ranks && t.experts % ranks == 0, "expert dispatch over ", group, ": a traffic table for ",
                t.ranks, " ranks and ", t.experts, " experts on a group of ", ranks);
}

}  // namespace

// all-gather(shards) of the counts, then all-gather(ep) of the [shards, M] tables: row
// i x shards + s of `all` is ep rank i's shard s's.
void ExpertParallel::all_gather_counts(const Tensor& mine, Tensor& all) const {
  const int shards = shard_size();
  TESSERA_CHECK(all.numel() == mine.numel() * ep_.size() * shards, "expert counts over ", ep_.name(), ": ",
                all.numel(), " elements for ", ep_.size(), " x ", shards, " ranks of ", mine.numel());
  const Tensor* table = &mine;
  if (shards_) {
    if (!shard_counts_.defined() || shard_counts_.numel() != mine.numel() * shards)
      shard_counts_ = Tensor::empty({shards, mine.numel()}, mine.dtype());
    shards_->all_gather(mine, shard_counts_);
    table = &shard_counts_;
  }
  if (ep_.size() > 1) ep_.all_gather(*table, all);
  else all.copy_from(*table);
}

int64_t ExpertParallel::staging_rows(int64_t max_sent, int64_t max_received) const {
  (void)max_sent;
  return ep_.size() > 1 ? max_received : 0;
}

void ExpertParallel::dispatch(const Tensor& rows, Tensor& expert_rows, const nn::ExpertTraffic& traffic,
                              Tensor& staging) const {
  if (ep_.size() == 1) return nn::ExpertLayout::dispatch(rows, expert_rows, traffic, staging);
  check_traffic(traffic, ep_.size(), ep_.name());
  const int me = ep_.rank();
  const int64_t width = rows.dim(rows.shape().rank() - 1), received = traffic.received_by(me);
  TESSERA_CHECK(staging.defined() && staging.dim(0) >= received, "expert dispatch: staging for ",
                staging.defined() ? staging.dim(0) : 0, " rows, ", received, " received");
  Tensor by_rank = staging.rows(0, received);
  ep_.all_to_all(rows, by_rank, sent_counts(traffic, me, width), received_counts(traffic, me, width));
  reorder(by_rank, expert_rows, traffic, me, /*to_experts=*/true);
}

void ExpertParallel::combine(const Tensor& expert_rows, Tensor& rows, const nn::ExpertTraffic& traffic,
                             Tensor& staging) const {
  if (ep_.size() == 1) return nn::ExpertLayout::combine(expert_rows, rows, traffic, staging);
  check_traffic(traffic, ep_.size(), ep_.name());
  const int me = ep_.rank();
  const int64_t width = rows.dim(rows.shape().rank() - 1), received = traffic.received_by(me);
  TESSERA_CHECK(staging.defined() && staging.dim(0) >= received, "expert combine: staging for ",
                staging.defined() ? staging.dim(0) : 0, " rows, ", received, " received");
  Tensor by_rank = staging.rows(0, received);
  reorder(expert_rows, by_rank, traffic, me, /*to_experts=*/false);
  ep_.all_to_all(by_rank, rows, received_counts(traffic, me, width), sent_counts(traffic, me, width));
}

}  // namespace tessera::parallel
