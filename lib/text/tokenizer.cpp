// The tokenizer kinds by name and file, and the byte-level one (each byte its own id).
#include "text/tokenizer.h"

#include "core/error.h"
#include "text/hf_byte_level_bpe.h"
#include "text/sentencepiece_tokenizer.h"

namespace tessera::text {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class Bytes final : public Tokenizer {
 public:
  std::string kind() const override { return "bytes"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(const std::string& text) const override {
    return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255) fail("token ", i, " is ", ids[i], ", not a byte (vocabulary 256)");
      out += static_cast<char>(ids[i]);
    }
    return out;
  }
};

}  // namespace

std::string tokenizer_kind_of_path(const std::string& path) {
  if (ends_with(path, ".model")) return "sentencepiece";
  if (ends_with(path, ".json")) return "hf-byte-level-bpe";
  fail("--tokenizer ", path, ": unknown kind of tokenizer file (expected a SentencePiece *.model or a",
       " Hugging Face tokenizer.json)");
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, const std::string& bytes, const std::string& name) {
  if (kind == "bytes") return std::make_unique<Bytes>();
  if (kind == "sentencepiece") return make_sentencepiece(bytes, name);
  if (kind == "hf-byte-level-bpe") return make_hf_byte_level_bpe(bytes, name);
  fail(name, ": unknown tokenizer kind '", kind, "' (expected bytes, sentencepiece or hf-byte-level-bpe)");
}

}  // namespace tessera::text
