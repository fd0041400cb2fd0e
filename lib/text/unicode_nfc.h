// Unicode normalisation form C (a tokenizer.json's "NFC" normalizer, Qwen 2's), through Debian's
// libutf8proc when the build found it (TESSERA_HAVE_UTF8PROC).
#pragma once
#include <string>
#include <string_view>

namespace tessera::text {

// Whether this build can normalise (libutf8proc was found at configure time).
bool have_nfc();

// `text` (UTF-8) in NFC. Invalid UTF-8 is an error; so is calling it where have_nfc() is false.
std::string nfc(std::string_view text);

}  // namespace tessera::text
