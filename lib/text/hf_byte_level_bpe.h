// A Hugging Face tokenizer.json of byte-level BPE (GPT-2, Llama 3, Qwen 2 style) as a Tokenizer:
// added tokens are cut out first, the rest normalised (NFC, when the file asks), pre-tokenized
// (Split regexes and/or ByteLevel's own GPT-2 regex, through PCRE2) and each piece BPE-encoded.
// What the file configures beyond that (another normalizer, model type or pre-tokenizer, dropout,
// ...) is refused, named. No post-processor runs: no BOS/EOS is added (add_special_tokens=False).
#pragma once
#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace tessera::text {

// `json` is the file's text; `name` its path, used in errors.
std::unique_ptr<Tokenizer> make_hf_byte_level_bpe(const std::string& json, const std::string& name);

}  // namespace tessera::text
