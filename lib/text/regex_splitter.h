// RegexSplitter: cuts UTF-8 text into the pieces of a pre-tokenizer's regular expression (Hugging
// Face's Split with behaviour "Isolated": every match is a piece, and so is every gap between
// matches), through PCRE2 with Unicode properties (\p{L}, \p{N}, \s as Unicode defines them).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

class RegexSplitter {
 public:
  // An invalid pattern is an error naming it and the offset PCRE2 reports.
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // The pieces of `text` in order (they concatenate to it). Text that is not valid UTF-8 is an
  // error naming the byte offset of the first bad sequence.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace tessera::text
