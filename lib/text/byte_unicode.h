// The GPT-2 byte-to-unicode mapping of byte-level BPE: each of the 256 bytes stands for one
// printable Unicode character (the printable Latin-1 bytes for themselves, the rest for U+0100 on),
// so that token strings in a tokenizer.json are readable text.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace tessera::text {

// The character standing for each byte, as UTF-8.
const std::array<std::string, 256>& byte_to_unicode();

// The byte a character stands for (its code point), or -1 when it stands for none.
int unicode_to_byte(uint32_t code_point);

}  // namespace tessera::text
