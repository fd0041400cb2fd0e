// ExpertLayout: the traffic table's sums, the expert shard, and the one-rank dispatch (a copy).
#include "nn/expert_layout.h"

namespace tessera::nn {

int64_t ExpertTraffic::between(int from, int to) const {
  const int64_t per = experts_per_rank();
  int64_t n = 0;
  for (int64_t e = to * per; e < (to + 1) * per; ++e) n += at(from, e);
  return n;
}

int64_t ExpertTraffic::sent_by(int rank) const {
  int64_t n = 0;
  for (int64_t e = 0; e < experts; ++e) n += at(rank, e);
  return n;
}

int64_t ExpertTraffic::received_by(int rank) const {
  int64_t n = 0;
  for (int from = 0; from < ranks; ++from) n += between(from, rank);
  return n;
}

int64_t ExpertTraffic::expert_rows(int rank, int64_t local) const {
  const int64_t e = rank * experts_per_rank() + local;
  int64_t n = 0;
  for (int from = 0; from < ranks; ++from) n += at(from, e);
  return n;
}

Shard ExpertLayout::experts_shard(int64_t experts, const char* what) const {
  TESSERA_CHECK(experts >= 1, what, ": ", experts, " experts");
  TESSERA_CHECK(experts % size() == 0, what, ": ", experts, " experts do not split evenly over --ep ", size(),
                " expert-parallel ranks (the experts must be a multiple of ep)");
  if (size() == 1) return {};
  const int64_t local = experts / size();
  return {0, rank() * local, local, 1, 1};  // parts: tensor-parallel slices (none: ParamSpec::expert)
}

void ExpertLayout::dispatch(const Tensor& rows, Tensor& expert_rows, const ExpertTraffic& traffic,
                            Tensor& staging) const {
  (void)traffic;
  (void)staging;
  if (&expert_rows != &rows) expert_rows.copy_from(rows);
}

void ExpertLayout::combine(const Tensor& expert_rows, Tensor& rows, const ExpertTraffic& traffic,
                           Tensor& staging) const {
  (void)traffic;
  (void)staging;
  if (&expert_rows != &rows) rows.copy_from(expert_rows);
}

const ExpertLayout& ExpertLayout::single() {
  static const ExpertLayout layout;
  return layout;
}

}  // namespace tessera::nn
