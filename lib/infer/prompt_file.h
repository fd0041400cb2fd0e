// Prompts from a JSON-lines file: one object per line with "text" (a string, tokenised by the
// caller) or "ids" (token ids); blank lines are skipped. Every problem names the file and line.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::infer {

struct PromptLine {
  int64_t line = 0;           // 1-based, for messages
  bool has_ids = false;
  std::string text;           // when !has_ids
  std::vector<int32_t> ids;   // when has_ids
};

// Refused: a missing or unreadable file, a line that is not a JSON object, an object with neither
// or both keys, "text" not a string, "ids" not an array of integers in int32's range, no prompts.
std::vector<PromptLine> read_prompt_file(const std::string& path);

}  // namespace tessera::infer
