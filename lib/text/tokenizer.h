// Tokenizer: text to token ids and back, for data_prep. Three kinds: "bytes" (each byte its own id,
// vocabulary 256), "sentencepiece" (a SentencePiece *.model through Debian's libsentencepiece) and
// "hf-byte-level-bpe" (a Hugging Face tokenizer.json of byte-level BPE, encoded by tessera's own
// code). A tokenizer is made from its file's bytes, so the copy stored in a data set decodes it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string kind() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // An id outside [0, vocab_size()) is an error naming it.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
};

// The kind a tokenizer file is, from its name: *.model -> sentencepiece, *.json -> hf-byte-level-bpe;
// anything else is an error naming the file and the two accepted forms.
std::string tokenizer_kind_of_path(const std::string& path);

// A tokenizer of `kind` from its file's bytes; `name` (the file's path or name) is used in errors.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, const std::string& bytes, const std::string& name);

// Whether this build can read SentencePiece models (libsentencepiece was found at configure time).
bool have_sentencepiece();

}  // namespace tessera::text
