// CompletionWriter: the completions as JSON lines, one object per prompt in prompt order
// ({index, prompt, completion, completion_ids, finish_reason[, logprobs]}), each line written as soon
// as every earlier prompt's is. A regular file that exists is never written over.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "infer/generator.h"

namespace tessera::infer {

class CompletionWriter {
 public:
  // path "-": standard output. An existing regular file is refused, naming it; a device or pipe
  // (/dev/stdout) is written to.
  CompletionWriter(const std::string& path, bool logprobs);
  ~CompletionWriter();
  CompletionWriter(const CompletionWriter&) = delete;
  CompletionWriter& operator=(const CompletionWriter&) = delete;

  // prompt_text: the prompt as the line shows it. Completions may come in any order.
  void add(const Completion& c, const std::string& prompt_text);
  // The line add() writes for a completion (without its newline): what a replica under --dp sends
  // the writing rank (infer::CompletionRelay), so every rank formats a completion alike.
  static std::string line(const Completion& c, const std::string& prompt_text, bool logprobs);
  // A line made by line() for completion `index`, in any order.
  void add_line(uint64_t index, std::string line);
  // Throws if a prompt before the last written one never came, or the file cannot be closed.
  void close();

 private:
  void write_ready();
  std::string path_;
  bool logprobs_;
  FILE* file_ = nullptr;
  bool owned_ = false;
  uint64_t next_ = 0;
  std::map<uint64_t, std::string> pending_;  // finished lines waiting for an earlier prompt
};

}  // namespace tessera::infer
