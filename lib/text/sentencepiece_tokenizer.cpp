// SentencePiece through libsentencepiece when the build found it (TESSERA_HAVE_SENTENCEPIECE);
// otherwise make_sentencepiece refuses, saying what to install.
#include "text/sentencepiece_tokenizer.h"

#include "core/error.h"

#ifdef TESSERA_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace tessera::text {

#ifdef TESSERA_HAVE_SENTENCEPIECE
namespace {

class SentencePiece final : public Tokenizer {
 public:
  SentencePiece(const std::string& bytes, const std::string& name) : name_(name) {
    const auto status = sp_.LoadFromSerializedProto(bytes);
    if (!status.ok()) fail(name_, ": not a SentencePiece model: ", status.ToString());
    eos_ = sp_.eos_id();
  }

  std::string kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return sp_.GetPieceSize(); }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    std::vector<int> line_ids;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      const auto status = sp_.Encode(std::string_view(text).substr(start, end - start), &line_ids);
      if (!status.ok()) fail(name_, ": encoding the line at byte ", start, " failed: ", status.ToString());
      ids.insert(ids.end(), line_ids.begin(), line_ids.end());
      if (eos_ >= 0) ids.push_back(eos_);
      start = end + 1;
    }
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out, piece;
    std::vector<int> line;
    auto flush = [&] {
      const auto status = sp_.Decode(line, &piece);
      if (!status.ok()) fail(name_, ": decoding failed: ", status.ToString());
      out += piece;
      line.clear();
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= vocab_size())
        fail("token ", i, " is ", ids[i], ", outside the vocabulary [0, ", vocab_size(), ") of ", name_);
      if (ids[i] == eos_) {
        flush();
        out += '\n';
      } else {
        line.push_back(ids[i]);
      }
    }
    flush();
    return out;
  }

 private:
  std::string name_;
  sentencepiece::SentencePieceProcessor sp_;
  int eos_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece(const std::string& bytes, const std::string& name) {
  return std::make_unique<SentencePiece>(bytes, name);
}

bool have_sentencepiece() { return true; }

#else

std::unique_ptr<Tokenizer> make_sentencepiece(const std::string&, const std::string& name) {
  fail(name, ": this build has no SentencePiece support (libsentencepiece was not found, or TESSERA_SENTENCEPIECE",
       " was OFF, when it was configured; on Debian: apt-get install libsentencepiece-dev, then configure and build",
       " again)");
}

bool have_sentencepiece() { return false; }

#endif

}  // namespace tessera::text
