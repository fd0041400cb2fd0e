// ranks: 2 4
// Communicator checks on real ranks: collective fingerprints (agreement on normal traffic, real
// mismatches caught on every rank), the watchdog's and mismatch's texts with context, fault hooks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/collective_check.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "split_comm.h"

using namespace tessera;
using namespace tessera::comm;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

Tensor f32(int64_t n) { return Tensor::zeros({n}, DType::f32); }
Tensor i32(int64_t n) { return Tensor::zeros({n}, DType::i32); }

// Runs `call`, which must throw tessera::Error; returns its message.
template <typename F>
std::string error_of(F&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

// --- pure texts ---

TEST(CollectiveCheckText, WatchdogMessageNamesOpGroupPeersAndContext) {
  const std::vector<int> members{0, 1, 2, 3};
  EXPECT_EQ(timeout_message(2, "all_reduce_sum(dp)", format_peers(members), 5,
                            "step 12, micro-batch 3"),
            "error: rank 2: all_reduce_sum(dp) [peers: world ranks 0,1,2,3] did not complete "
            "within 5 s at step 12, micro-batch 3; aborting the job");
  EXPECT_EQ(timeout_message(0, "barrier(world)", "world ranks 0,1", 0.5, ""),
            "error: rank 0: barrier(world) [peers: world ranks 0,1] did not complete within 0.5 s; "
            "aborting the job");
}

TEST(CollectiveCheckText, LargeGroupsAreAbbreviated) {
  std::vector<int> members(40);
  for (int i = 0; i < 40; ++i) members[i] = 2 * i;
  EXPECT_EQ(format_peers(members), "world ranks 0,2,4,6,8,10,12,14,...,76,78 (40 ranks)");
}

TEST(CollectiveCheckText, MismatchNamesBothSides) {
  const std::vector<CollectiveFingerprint> fps{
      make_fingerprint("all_reduce_sum", "f32", 1024), make_fingerprint("all_reduce_sum", "f32", 1024),
      make_fingerprint("all_gather", "f32", 256), make_fingerprint("all_reduce_sum", "f32", 1024)};
  const std::vector<int> members{0, 1, 2, 3};
  EXPECT_EQ(find_mismatch(fps, members, "dp", "step 12, micro-batch 3").value_or(""),
            "collective mismatch in group dp at step 12, micro-batch 3: rank 0 calls "
            "all_reduce_sum f32 x 1024, rank 2 calls all_gather f32 x 256");
  EXPECT_FALSE(find_mismatch(std::span(fps).first(2), members, "dp", "").has_value());
  // Roots and per-rank counts take part; world ranks, not group ranks, are named.
  const std::vector<int64_t> a{1, 2}, b{2, 1};
  const std::vector<CollectiveFingerprint> v{make_fingerprint("all_gather", "i32", 3, a, true),
                                             make_fingerprint("all_gather", "i32", 3, b, true)};
  const std::string text = find_mismatch(v, std::vector<int>{4, 6}, "tp", "").value_or("");
  EXPECT_TRUE(contains(text, "collective mismatch in group tp: rank 4 calls all_gather i32 x 3 "
                             "(per-rank counts, hash 0x"))
      << text;
  EXPECT_TRUE(contains(text, ", rank 6 calls all_gather i32 x 3 (per-rank counts")) << text;
  const std::vector<CollectiveFingerprint> roots{make_fingerprint("broadcast", "u8", 8, {}, false, 0),
                                                 make_fingerprint("broadcast", "u8", 8, {}, false, 1)};
  EXPECT_EQ(find_mismatch(roots, std::vector<int>{0, 1}, "world", "").value_or(""),
            "collective mismatch in group world: rank 0 calls broadcast u8 x 8 from root 0, rank 1 "
            "calls broadcast u8 x 8 from root 1");
  const std::vector<CollectiveFingerprint> reduce_roots{
      make_fingerprint("reduce_sum", "f32", 8, {}, false, 0),
      make_fingerprint("reduce_sum", "f32", 8, {}, false, 2)};
  EXPECT_EQ(find_mismatch(reduce_roots, std::vector<int>{0, 1}, "world", "").value_or(""),
            "collective mismatch in group world: rank 0 calls reduce_sum f32 x 8 from root 0, "
            "rank 1 calls reduce_sum f32 x 8 from root 2");
}

TEST(CollectiveCheckText, FaultSpecParsing) {
  const RankAt parsed = parse_rank_at("X", "2:7", "collective");
  EXPECT_EQ(std::make_pair(parsed.rank, parsed.at), (std::pair<int, int64_t>{2, 7}));
  for (const char* bad : {"", "2", ":3", "2:", "a:1", "1:0", "-1:2", "1:2x"}) {
    const std::string text = error_of([&] { parse_rank_at("TESSERA_FAULT_SKIP_COLLECTIVE", bad, "collective"); });
    EXPECT_TRUE(contains(text, "TESSERA_FAULT_SKIP_COLLECTIVE=\"")) << text;
    EXPECT_TRUE(contains(text, "<world rank>:<n>")) << text;
  }
}

// --- on real ranks ---

TEST(CollectiveCheck, WorldRanksOfASubgroup) {
  const int r = world_rank();
  SplitComm split(r % 2, r);
  Communicator group(split.get(), "dp");
  for (int i = 0; i < group.size(); ++i) EXPECT_EQ(group.world_ranks()[i], 2 * i + r % 2);
  Communicator copy = group;
  EXPECT_EQ(copy.world_ranks(), group.world_ranks());
}

TEST(CollectiveCheck, FingerprintsAgreeOnNormalTraffic) {
  Communicator world = Communicator::world();
  world.set_check_collectives(true);
  world.set_timeout(60);
  world.set_context("step 1, micro-batch 1");
  const int n = world.size(), r = world.rank();
  Tensor a = f32(6);
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = 1.0f;
  world.all_reduce_sum(a);
  EXPECT_EQ(a.data<float>()[0], static_cast<float>(n));
  Tensor b = i32(3);
  world.all_reduce_max(b);
  EXPECT_EQ(world.all_reduce_sum(1.0), static_cast<double>(n));
  EXPECT_EQ(world.all_reduce_max(int64_t{r}), n - 1);
  Tensor in = f32(2 * n), out = f32(2);
  world.reduce_scatter(in, out);
  std::vector<int64_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = i % 3;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor rs_in = f32(total), rs_out = f32(counts[r]);
  world.reduce_scatter(rs_in, rs_out, counts);
  Tensor g_out = f32(2 * n);
  world.all_gather(out, g_out);
  Tensor gv_in = f32(counts[r]), gv_out = f32(total);
  world.all_gather(gv_in, gv_out, counts);
  Tensor a2a_in = f32(n), a2a_out = f32(n);
  world.all_to_all(a2a_in, a2a_out);
  std::vector<int64_t> sends(n), recvs(n);
  for (int j = 0; j < n; ++j) sends[j] = (r + 2 * j) % 3, recvs[j] = (j + 2 * r) % 3;
  int64_t ns = 0, nr = 0;
  for (int j = 0; j < n; ++j) ns += sends[j], nr += recvs[j];
  Tensor v_in = f32(ns), v_out = f32(nr);
  world.all_to_all(v_in, v_out, sends, recvs);
  Tensor bc = i32(4);
  if (r == 0) bc.data<int32_t>()[2] = 7;
  world.broadcast(bc, 0);
  EXPECT_EQ(bc.data<int32_t>()[2], 7);
  world.barrier();
  // Asynchronous forms are fingerprinted when started, alike with their blocking twins.
  Tensor c = f32(5);
  CommHandle h1 = world.iall_reduce_sum(c);
  CommHandle h2 = world.iall_gather(out, g_out);
  h1.wait();
  h2.wait();
  // Point-to-point messages are not fingerprinted (and still work).
  Tensor m = f32(2);
  if (r == 0) world.send(m, 1, 3);
  if (r == 1) world.recv(m, 0, 3);
  // The fingerprint exchanges are not in the caller's statistics.
  EXPECT_EQ(world.stats().total_calls(), 14 + (r < 2 ? 1 : 0));
}

TEST(CollectiveCheck, RealMismatchThrowsOnEveryRankNamingBothSides) {
  Communicator world = Communicator::world();
  world.set_check_collectives(true);
  world.set_timeout(60);
  world.set_context("step 12, micro-batch 3");
  const int n = world.size(), r = world.rank();
  const int odd = n - 1;  // the last rank calls something else
  std::string text;
  if (r != odd) {
    Tensor t = f32(1024);
    text = error_of([&] { world.all_reduce_sum(t); });
  } else {
    Tensor in = f32(256), out = f32(256 * n);
    text = error_of([&] { world.all_gather(in, out); });
  }
  EXPECT_EQ(text, "collective mismatch in group world at step 12, micro-batch 3: rank 0 calls "
                  "all_reduce_sum f32 x 1024, rank " + std::to_string(odd) +
                  " calls all_gather f32 x 256");
  // Nothing was left half done: the group still works.
  EXPECT_EQ(world.all_reduce_sum(1.0), static_cast<double>(n));
  // dtype differences are caught too: f32 tensor against the double form.
  Tensor one = f32(1);
  text = r == 0 ? error_of([&] { world.all_reduce_sum(one); })
                : error_of([&] { world.all_reduce_sum(2.0); });
  EXPECT_EQ(text, "collective mismatch in group world at step 12, micro-batch 3: rank 0 calls "
                  "all_reduce_sum f32 x 1, rank 1 calls all_reduce_sum f64 x 1");
}

TEST(CollectiveCheck, ReduceIsFingerprintedWithItsRoot) {
  Communicator world = Communicator::world();
  world.set_check_collectives(true);
  world.set_timeout(60);
  world.set_context("step 5, micro-batch 2");
  const int n = world.size(), r = world.rank();
  world.stats().reset();
  // Agreeing calls go through, and the exchange is not counted.
  Tensor t = i32(4);
  for (int k = 0; k < 4; ++k) t.data<int32_t>()[k] = r + k;
  world.reduce_sum(t, 1);
  if (r == 1) {
    for (int k = 0; k < 4; ++k) EXPECT_EQ(t.data<int32_t>()[k], n * (n - 1) / 2 + n * k);
  }
  EXPECT_EQ(world.stats().total_calls(), 1);
  EXPECT_EQ(world.stats().op(CommOp::reduce).calls, 1);
  // A different root on the last rank is caught on every rank.
  const int odd = n - 1;
  Tensor f = f32(8);
  const std::string text = error_of([&] { world.reduce_sum(f, r == odd ? 1 : 0); });
  EXPECT_EQ(text, "collective mismatch in group world at step 5, micro-batch 2: rank 0 calls "
                  "reduce_sum f32 x 8 from root 0, rank " + std::to_string(odd) +
                  " calls reduce_sum f32 x 8 from root 1");
  // A reduce against a broadcast of the same tensor, too.
  const std::string text2 = r == odd ? error_of([&] { world.broadcast(f, 0); })
                                     : error_of([&] { world.reduce_sum(f, 0); });
  EXPECT_EQ(text2, "collective mismatch in group world at step 5, micro-batch 2: rank 0 calls "
                   "reduce_sum f32 x 8 from root 0, rank " + std::to_string(odd) +
                   " calls broadcast f32 x 8 from root 0");
  // The group still works.
  EXPECT_EQ(world.all_reduce_sum(1.0), static_cast<double>(n));
}

TEST(CollectiveCheck, MismatchHookChangesOnlyTheFingerprint) {
  Communicator world = Communicator::world();
  world.set_check_collectives(true);
  world.set_timeout(60);
  world.set_context("step 2, micro-batch 1");
  TestHooks& hooks = test_hooks();
  const TestHooks saved = hooks;
  hooks.mismatch_collective = {1, collectives_counted() + 2};  // the second collective from here
  Tensor t = f32(8);
  world.all_reduce_sum(t);  // first: untouched
  const std::string text = error_of([&] { world.all_reduce_sum(t); });
  EXPECT_EQ(text, "collective mismatch in group world at step 2, micro-batch 1: rank 0 calls "
                  "all_reduce_sum f32 x 8, rank 1 calls all_reduce_sum f32 x 9");
  // Without the check the hook has no effect on the collective itself.
  hooks.mismatch_collective.at = collectives_counted() + 1;
  world.set_check_collectives(false);
  for (int i = 0; i < 8; ++i) t.data<float>()[i] = 1.0f;
  world.all_reduce_sum(t);
  EXPECT_EQ(t.data<float>()[3], static_cast<float>(world.size()));
  hooks = saved;
}

TEST(CollectiveCheck, ContextIsKeptAndCopied) {
  Communicator world = Communicator::world();
  EXPECT_EQ(world.context(), "");
  world.set_context("step 3, micro-batch 2");
  Communicator copy = world;
  world.set_context("step 4, micro-batch 1");
  EXPECT_EQ(copy.context(), "step 3, micro-batch 2");
  EXPECT_EQ(world.context(), "step 4, micro-batch 1");
  EXPECT_FALSE(world.check_collectives());
  world.set_check_collectives(true);
  Communicator copy2 = world;
  EXPECT_TRUE(copy2.check_collectives());
}
