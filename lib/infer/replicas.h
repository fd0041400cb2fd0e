// Data parallelism for generate (--dp): which of the dp replicas (copies of the model, each its
// tp x pp ranks) takes which prompt and which scoring window, and the CompletionRelay that brings
// the replicas' finished completion lines to the one rank that writes them.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tessera::infer {

// Prompts are dealt round-robin: prompt i to replica i % replicas. Each replica's queue then holds
// a share of every part of the input (a file's neighbouring prompts, often alike in length, go to
// different replicas), so the replicas stay busy until near the end, and the writer, which writes
// in prompt order, is owed its next line by each replica in turn rather than by the last one.
int replica_of_prompt(uint64_t index, int replicas);
// How many of `prompts` prompts (indices 0..prompts-1) replica `replica` takes.
int64_t prompts_of_replica(int64_t prompts, int replica, int replicas);

// Scoring windows, numbered batch by batch (window b * global_batch + row): replica r takes the
// contiguous range [first, first + count), the first windows % replicas replicas one more, so each
// fills its slots across the batches' boundaries.
struct WindowRange {
  int64_t first = 0, count = 0;
};
WindowRange windows_of_replica(int64_t windows, int replica, int replicas);

// The completion lines of the replicas, brought to one writer. `group` joins one rank of each
// replica (the mesh's dp group of the tp 0, pp 0 ranks); its rank 0 writes. Every other member
// sends each line as its completion finishes (a header of its index and length, then its bytes),
// never waiting; the writer takes whatever has arrived at each progress() (called between its own
// decoding steps) and the rest in finish(). Messages from one sender arrive in the order sent.
// A null group, or one of one rank, has nothing to relay: every call returns at once.
class CompletionRelay {
 public:
  using Take = std::function<void(uint64_t index, std::string&& line)>;
  // expected[r]: how many lines member r sends (the writer's own entry is not used).
  CompletionRelay(comm::Communicator* group, std::vector<int64_t> expected);
  CompletionRelay(const CompletionRelay&) = delete;
  CompletionRelay& operator=(const CompletionRelay&) = delete;

  // A member other than the writer: starts sending the line (the bytes are kept until it is sent).
  void send(uint64_t index, const std::string& line);
  // Never blocks. The writer: hands every line that has arrived to `take`; a sender: completes
  // the sends that are done (and so lets the transfers progress).
  void progress(const Take& take);
  // The writer: takes every line still due; a sender: waits for its sends to complete.
  void finish(const Take& take);

 private:
  struct Source {  // the writer's view of one sender
    int rank = 0;
    int64_t left = 0;  // lines still to come
    Tensor header, line;
    comm::CommHandle pending;
    bool header_arrived = false;
  };
  struct Sent {
    Tensor header, line;
    comm::CommHandle header_sent, line_sent;
  };
  bool writer() const { return group_ != nullptr && group_->rank() == 0; }
  void expect_header(Source& s);
  bool advance(Source& s, const Take& take);  // one step of s's messages, if it has arrived

  comm::Communicator* group_ = nullptr;
  std::vector<Source> sources_;
  std::deque<Sent> sent_;
};

}  // namespace tessera::infer
