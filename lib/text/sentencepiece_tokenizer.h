// A SentencePiece model (*.model: Llama 2, Mistral) as a Tokenizer, through Debian's
// libsentencepiece. Text is encoded line by line, as spm_encode does (each line a document), the
// model's EOS id after each line's ids when it has one; decoding cuts at EOS and puts the newlines
// back, so decode(encode(text)) is the text as the model normalises it.
#pragma once
#include <memory>
#include <string>

#include "text/tokenizer.h"

namespace tessera::text {

// `bytes` is the model file's content; `name` its path, used in errors. In a build without
// libsentencepiece, an error saying so.
std::unique_ptr<Tokenizer> make_sentencepiece(const std::string& bytes, const std::string& name);

}  // namespace tessera::text
