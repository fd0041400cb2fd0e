// The zigzag layout (nn/zigzag_layout.h): the chunk-to-rank map (every chunk held once, rank r
// holding chunks r and 2 sp - 1 - r), the half-major row map of a micro-batch (a bijection onto
// the positions, the same through nn::SequenceLayout::local_row), and the per-step block masks:
// written out for sp = 2, and for sp up to 8 balanced (every rank the same query-key pairs at every
// ring step) while covering the causal triangle exactly once.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "nn/sequence_layout.h"
#include "nn/zigzag_layout.h"

using namespace tessera;
using nn::ChunkMask;

namespace {

TEST(ZigzagLayout, RankRHoldsChunksRAndTheirMirror) {
  EXPECT_EQ(nn::zigzag_chunk(0, 0, 4), 0);
  EXPECT_EQ(nn::zigzag_chunk(0, 1, 4), 7);
  EXPECT_EQ(nn::zigzag_chunk(3, 0, 4), 3);
  EXPECT_EQ(nn::zigzag_chunk(3, 1, 4), 4);
  for (int sp = 1; sp <= 8; ++sp) {
    std::multiset<int64_t> held;
    for (int r = 0; r < sp; ++r)
      for (int h = 0; h < 2; ++h) {
        const int64_t k = nn::zigzag_chunk(r, h, sp);
        held.insert(k);
        EXPECT_EQ(nn::zigzag_owner(k, sp), r) << "chunk " << k << ", sp " << sp;
        EXPECT_EQ(nn::zigzag_half(k, sp), h) << "chunk " << k << ", sp " << sp;
      }
    for (int64_t k = 0; k < 2 * sp; ++k) EXPECT_EQ(held.count(k), 1u) << "chunk " << k << ", sp " << sp;
  }
}

// Rows half-major: row (h B + b) c + i is position chunk(r, h) c + i of sequence b.
TEST(ZigzagLayout, RowsAreHalfMajorAndCoverEveryPositionOnce) {
  const int64_t batch = 3, seq = 24;
  for (int sp : {1, 2, 3, 6}) {
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int r = 0; r < sp; ++r) {
      const nn::ZigzagPlace place{r, sp, batch, seq};
      const int64_t c = place.chunk_length(), rows = batch * seq / sp;
      for (int64_t n = 0; n < rows; ++n) {
        const int64_t b = place.sequence(n), t = place.position(n);
        EXPECT_EQ(place.local_row(b, t), n) << "rank " << r << ", sp " << sp;
        EXPECT_TRUE(seen.insert({b, t}).second) << "position " << t << " of sequence " << b << " held twice";
        const int h = n < batch * c ? 0 : 1;
        EXPECT_EQ(t / c, nn::zigzag_chunk(r, h, sp));
        EXPECT_EQ(b, (n % (batch * c)) / c);
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(batch * seq)) << "sp " << sp;
  }
  const nn::ZigzagPlace rank1{1, 2, 2, 8};  // chunks 1 and 2 of 4, c = 2
  EXPECT_EQ(rank1.local_row(0, 2), 0);
  EXPECT_EQ(rank1.local_row(1, 3), 3);
  EXPECT_EQ(rank1.local_row(0, 4), 4);
  EXPECT_EQ(rank1.local_row(1, 5), 7);
  EXPECT_EQ(rank1.local_row(0, 0), -1);
  EXPECT_EQ(rank1.local_row(0, 7), -1);
}

// A layout that only says rank and size (as plan/planning_layouts.h does), zigzag or not.
class FixedLayout final : public nn::SequenceLayout {
 public:
  FixedLayout(int rank, int size, bool zigzag) : rank_(rank), size_(size), zigzag_(zigzag) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool zigzag() const override { return zigzag_; }

 private:
  int rank_, size_;
  bool zigzag_;
};

TEST(ZigzagLayout, SequenceLayoutPlacesTokensByItsMode) {
  const FixedLayout contiguous(1, 4, false), zigzag(1, 4, true);
  // seq 16 over 4 ranks: contiguous rank 1 holds 4..7; zigzag chunks 1 and 6 of 8 (2..3, 12..13).
  EXPECT_EQ(contiguous.local_row(2, 16, 1, 5), 4 + 1);
  EXPECT_EQ(contiguous.local_row(2, 16, 0, 2), -1);
  EXPECT_EQ(contiguous.positions_end(16), 8);
  EXPECT_EQ(zigzag.local_row(2, 16, 0, 2), 0);
  EXPECT_EQ(zigzag.local_row(2, 16, 1, 3), 3);
  EXPECT_EQ(zigzag.local_row(2, 16, 0, 12), 4);
  EXPECT_EQ(zigzag.local_row(2, 16, 1, 13), 7);
  EXPECT_EQ(zigzag.local_row(2, 16, 0, 5), -1);
  EXPECT_EQ(zigzag.positions_end(16), 14);
  EXPECT_THROW(zigzag.local_length(12), Error);  // 12 positions: 3 a rank, not 8 equal chunks
  EXPECT_NO_THROW(contiguous.local_length(12));
}

// sp = 2: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
TEST(ZigzagLayout, BlockMasksOfTwoRanks) {
  using M = ChunkMask;
  struct Want {
    int rank, owner;
    M masks[2][2];  // [query half][key half]
  };
  const Want want[] = {
      {0, 0, {{M::causal, M::skipped}, {M::full, M::causal}}},   // step 0: its own chunks
      {0, 1, {{M::skipped, M::skipped}, {M::full, M::full}}},    // step 1: chunk 3 sees 1 and 2
      {1, 1, {{M::causal, M::skipped}, {M::full, M::causal}}},   // step 0
      {1, 0, {{M::full, M::skipped}, {M::full, M::skipped}}},    // step 1: chunks 1, 2 see 0, not 3
  };
  for (const Want& w : want)
    for (int qh = 0; qh < 2; ++qh)
      for (int kh = 0; kh < 2; ++kh)
        EXPECT_EQ(nn::zigzag_block_mask(w.rank, qh, w.owner, kh, 2), w.masks[qh][kh])
            << "rank " << w.rank << ", block of rank " << w.owner << ", halves " << qh << ", " << kh << ": "
            << nn::chunk_mask_name(nn::zigzag_block_mask(w.rank, qh, w.owner, kh, 2));
}

// At ring step s rank r attends to block (r - s) mod sp: every rank the same number of query-key
// pairs at every step (c = 4 positions a chunk; a causal block counts c (c + 1) / 2), and over
// every step and rank each pair (query chunk, key chunk) of the causal triangle exactly once.
TEST(ZigzagLayout, EveryStepIsBalancedAndTheTriangleIsCoveredOnce) {
  const int64_t c = 4;
  for (int sp = 1; sp <= 8; ++sp) {
    std::multiset<std::pair<int64_t, int64_t>> pairs;
    for (int s = 0; s < sp; ++s) {
      std::set<int64_t> work;
      for (int r = 0; r < sp; ++r) {
        const int owner = (r - s + sp) % sp;
        int64_t n = 0;
        for (int qh = 0; qh < 2; ++qh)
          for (int kh = 0; kh < 2; ++kh) {
            const ChunkMask m = nn::zigzag_block_mask(r, qh, owner, kh, sp);
            if (m == ChunkMask::skipped) continue;
            n += m == ChunkMask::full ? c * c : c * (c + 1) / 2;
            pairs.insert({nn::zigzag_chunk(r, qh, sp), nn::zigzag_chunk(owner, kh, sp)});
          }
        work.insert(n);
      }
      EXPECT_EQ(work.size(), 1u) << "sp " << sp << ", step " << s << ": the ranks' work differs";
      EXPECT_EQ(*work.begin(), s == 0 ? c * c + c * (c + 1) : 2 * c * c) << "sp " << sp << ", step " << s;
    }
    for (int64_t q = 0; q < 2 * sp; ++q)
      for (int64_t k = 0; k < 2 * sp; ++k)
        EXPECT_EQ(pairs.count({q, k}), k <= q ? 1u : 0u) << "query chunk " << q << ", key chunk " << k << ", sp " << sp;
  }
}

}  // namespace
