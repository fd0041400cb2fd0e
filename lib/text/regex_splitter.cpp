// RegexSplitter through PCRE2 (8-bit, UTF + UCP), JIT-compiled where the platform allows. The text
// is checked for valid UTF-8 once; later matches skip PCRE2's per-call check.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex_splitter.h"

#include <pcre2.h>

#include <memory>

#include "core/error.h"

namespace tessera::text {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// The steps one match may take: tokenizers' regexes take tens; a pattern that backtracks
// catastrophically is stopped with an error instead of hanging data_prep.
constexpr uint32_t kMatchLimit = 10'000'000;

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  return 4;
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr)
    fail("invalid pre-tokenizer regex '", pattern, "': ", pcre2_message(error), " at offset ", offset);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is used without it
  code_ = code;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> context(
      pcre2_match_context_create(nullptr), &pcre2_match_context_free);
  if (!match || !context) fail("out of memory for the pre-tokenizer regex '", pattern_, "'");
  pcre2_set_match_limit(context.get(), kMatchLimit);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<std::string_view> pieces;
  size_t at = 0, gap = 0;  // the next search start; the start of the text not yet in a piece
  uint32_t options = 0;    // the first call checks the whole text's UTF-8, later ones skip it
  while (at <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), at, options, match.get(), context.get());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) {
        std::string why = pcre2_message(rc);  // "UTF-8 error: <why>"
        const size_t colon = why.find(": ");
        if (colon != std::string::npos) why.erase(0, colon + 2);
        fail("text is not valid UTF-8 at byte ", pcre2_get_startchar(match.get()), " (", why, ")");
      }
      if (rc == PCRE2_ERROR_MATCHLIMIT)
        fail("pre-tokenizer regex '", pattern_, "' takes more than ", kMatchLimit, " steps to match at byte ", at,
             " (catastrophic backtracking?)");
      fail("pre-tokenizer regex '", pattern_, "' failed at byte ", at, ": ", pcre2_message(rc));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > gap) pieces.push_back(text.substr(gap, begin - gap));
    if (end > begin) {
      pieces.push_back(text.substr(begin, end - begin));
      at = gap = end;
    } else {  // an empty match: no piece; move on by one character
      if (begin >= text.size()) break;
      gap = begin;
      at = begin + utf8_length(static_cast<unsigned char>(text[begin]));
    }
  }
  if (gap < text.size()) pieces.push_back(text.substr(gap));
  return pieces;
}

}  // namespace tessera::text
