// libFuzzer target: arbitrary bytes as a Hugging Face tokenizer.json, read by
// text::make_tokenizer("hf-byte-level-bpe", ...); a tokenizer that loads then encodes and decodes a
// fixed text with non-ASCII characters and whitespace runs. Only tessera::Error may come out.
#include <cstdint>
#include <exception>
#include <string>

#include "core/error.h"
#include "fuzz_common.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const auto tokenizer = tessera::text::make_tokenizer("hf-byte-level-bpe", json, "fuzz.json");
    (void)tokenizer->decode(tokenizer->encode("abc ab<s>c  cab"));  // what the seeds' vocabularies hold
    (void)tokenizer->decode(tokenizer->encode("Hello  world's 42 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\n\n\t x<s>y"));
  } catch (const tessera::Error&) {
  } catch (const std::exception& e) {
    tessera::fuzz::unexpected(e.what());
  }
  return 0;
}
