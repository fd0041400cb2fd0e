// Replicas: the round-robin deal of prompts, the contiguous split of scoring windows, and the
// CompletionRelay's messages (header [index low, index high, bytes] as i32, then the line as u8).
#include "infer/replicas.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace tessera::infer {

namespace {
constexpr int kHeaderTag = 3401, kLineTag = 3402;
}  // namespace

int replica_of_prompt(uint64_t index, int replicas) {
  TESSERA_CHECK(replicas >= 1, "replicas must be >= 1, got ", replicas);
  return static_cast<int>(index % static_cast<uint64_t>(replicas));
}

int64_t prompts_of_replica(int64_t prompts, int replica, int replicas) {
  TESSERA_CHECK(replicas >= 1 && replica >= 0 && replica < replicas, "replica ", replica, " of ", replicas);
  return prompts / replicas + (replica < prompts % replicas ? 1 : 0);
}

WindowRange windows_of_replica(int64_t windows, int replica, int replicas) {
  TESSERA_CHECK(replicas >= 1 && replica >= 0 && replica < replicas, "replica ", replica, " of ", replicas);
  const int64_t base = windows / replicas, extra = windows % replicas;
  return {replica * base + std::min<int64_t>(replica, extra), base + (replica < extra ? 1 : 0)};
}

CompletionRelay::CompletionRelay(comm::Communicator* group, std::vector<int64_t> expected) {
  if (group == nullptr || group->size() == 1) return;
  group_ = group;
  TESSERA_CHECK(static_cast<int>(expected.size()) == group->size(), "CompletionRelay: ", expected.size(),
                " expected counts for a group of ", group->size());
  if (!writer()) return;
  for (int r = 1; r < group->size(); ++r) {
    Source s;
    s.rank = r;
    s.left = expected[static_cast<size_t>(r)];
    s.header = Tensor::empty({3}, DType::i32);
    sources_.push_back(std::move(s));
  }
  for (Source& s : sources_)
    if (s.left > 0) expect_header(s);
}

void CompletionRelay::expect_header(Source& s) {
  s.header_arrived = false;
  s.pending = group_->irecv(s.header, s.rank, kHeaderTag);
}

void CompletionRelay::send(uint64_t index, const std::string& line) {
  TESSERA_CHECK(group_ != nullptr && !writer(), "CompletionRelay::send on the writing rank");
  TESSERA_CHECK(!line.empty() && line.size() <= static_cast<size_t>(INT32_MAX), "completion ", index,
                ": a line of ", line.size(), " bytes cannot be relayed");
  Sent m;
  m.header = Tensor::empty({3}, DType::i32);
  const uint32_t words[3] = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                             static_cast<uint32_t>(line.size())};
  std::memcpy(m.header.raw(), words, sizeof words);
  m.line = Tensor::empty({static_cast<int64_t>(line.size())}, DType::u8);
  std::memcpy(m.line.raw(), line.data(), line.size());
  m.header_sent = group_->isend(m.header, 0, kHeaderTag);
  m.line_sent = group_->isend(m.line, 0, kLineTag);
  sent_.push_back(std::move(m));
}

bool CompletionRelay::advance(Source& s, const Take& take) {
  if (s.left == 0 || !s.pending.test()) return false;
  if (!s.header_arrived) {  // the header is in: receive the line it announces
    uint32_t words[3];
    std::memcpy(words, s.header.raw(), sizeof words);
    s.header_arrived = true;
    s.line = Tensor::empty({static_cast<int64_t>(words[2])}, DType::u8);
    s.pending = group_->irecv(s.line, s.rank, kLineTag);
    return true;
  }
  uint32_t words[3];
  std::memcpy(words, s.header.raw(), sizeof words);
  const uint64_t index = static_cast<uint64_t>(words[0]) | static_cast<uint64_t>(words[1]) << 32;
  std::string line(static_cast<const char*>(s.line.raw()), static_cast<size_t>(s.line.numel()));
  if (--s.left > 0) expect_header(s);
  take(index, std::move(line));
  return true;
}

void CompletionRelay::progress(const Take& take) {
  if (group_ == nullptr) return;
  if (writer()) {
    for (Source& s : sources_)
      while (advance(s, take)) {
      }
    return;
  }
  while (!sent_.empty() && sent_.front().header_sent.test() && sent_.front().line_sent.test()) sent_.pop_front();
}

void CompletionRelay::finish(const Take& take) {
  if (group_ == nullptr) return;
  const auto pause = std::chrono::microseconds(500);  // the core goes to the ranks still decoding
  if (!writer()) {
    for (Sent& m : sent_) m.header_sent.wait_sleeping(pause), m.line_sent.wait_sleeping(pause);
    sent_.clear();
    return;
  }
  for (;;) {
    progress(take);
    Source* waiting = nullptr;
    for (Source& s : sources_)
      if (s.left > 0) waiting = waiting ? waiting : &s;
    if (waiting == nullptr) return;
    waiting->pending.wait_sleeping(pause);  // then advance() finds it complete
  }
}

}  // namespace tessera::infer
