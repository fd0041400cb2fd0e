// Reads tokenizer.json's fields (model BPE: vocab, merges as "a b" or ["a", "b"], ignore_merges;
// normalizer none or NFC; pre_tokenizer ByteLevel or Sequence of Split + ByteLevel; decoder
// ByteLevel; added_tokens) and encodes and decodes with them.
#include "text/hf_byte_level_bpe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "text/bpe_model.h"
#include "text/byte_unicode.h"
#include "text/regex_splitter.h"
#include "text/unicode_nfc.h"

namespace tessera::text {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer regex: what ByteLevel with use_regex applies.
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct AddedToken {
  std::string content;
  int32_t id;
};

class HfByteLevelBpe final : public Tokenizer {
 public:
  HfByteLevelBpe(const json& j, const std::string& name) : name_(name) {
    if (!j.is_object()) fail(name_, ": not a tokenizer.json (the top level is not a JSON object)");
    read_model(field(j, "model"));
    read_normalizer(j.value("normalizer", json()));
    read_pre_tokenizer(j.value("pre_tokenizer", json()));
    read_decoder(j.value("decoder", json()));
    read_added_tokens(j.value("added_tokens", json::array()));
    vocab_size_ = bpe_->size();
    for (const AddedToken& t : added_) vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{t.id} + 1);
  }

  std::string kind() const override { return "hf-byte-level-bpe"; }
  int64_t vocab_size() const override { return vocab_size_; }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids;
    std::unordered_map<std::string, std::vector<int32_t>> cache;  // pieces repeat: encode each once
    auto encode_plain = [&](std::string_view raw) {
      if (raw.empty()) return;
      std::string segment = nfc_ ? nfc(raw) : std::string(raw);
      if (add_prefix_space_ && segment.front() != ' ') {
        std::string prefixed;
        prefixed.assign(1, ' ');
        prefixed.append(segment);
        segment.swap(prefixed);
      }
      std::vector<std::string_view> pieces{segment};
      for (const auto& splitter : splitters_) {
        std::vector<std::string_view> next;
        for (std::string_view p : pieces)
          for (std::string_view q : splitter->split(p)) next.push_back(q);
        pieces.swap(next);
      }
      for (std::string_view p : pieces) {
        auto it = cache.find(std::string(p));
        if (it == cache.end()) it = cache.emplace(std::string(p), bpe_->encode_word(p)).first;
        ids.insert(ids.end(), it->second.begin(), it->second.end());
      }
    };
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
      const AddedToken* match = added_at(text, i);
      if (match == nullptr) {
        ++i;
        continue;
      }
      encode_plain(std::string_view(text).substr(start, i - start));
      ids.push_back(match->id);
      i += match->content.size();
      start = i;
    }
    encode_plain(std::string_view(text).substr(start));
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size_)
        fail("token ", i, " is ", id, ", outside the vocabulary [0, ", vocab_size_, ") of ", name_);
      const auto added = added_by_id_.find(id);
      if (added != added_by_id_.end()) {
        out += added->second;
        continue;
      }
      const std::string& token = id < bpe_->size() ? bpe_->token(id) : std::string();
      if (token.empty()) fail("token ", i, " is ", id, ", an id no token of ", name_, " has");
      out += bytes_of(token);
    }
    return out;
  }

 private:
  const json& field(const json& j, const char* key) const {
    const auto it = j.find(key);
    if (it == j.end()) fail(name_, ": missing field '", key, "'");
    return *it;
  }

  // A token id from the file: an integer in [0, kMaxTokenId] (a float or a huge number is refused
  // before any conversion), `what` naming where it was.
  int32_t token_id(const json& v, const std::string& what) const {
    if (!v.is_number_integer()) fail(name_, ": ", what, " is ", v.dump(), ", not an integer id");
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{kMaxTokenId}
                                                 : v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxTokenId;
    if (!in_range) fail(name_, ": ", what, " has the id ", v.dump(), " (ids must be in [0, ", kMaxTokenId, "])");
    return static_cast<int32_t>(v.get<int64_t>());
  }

  // A token string back to the bytes its characters stand for; a character that stands for no
  // byte leaves the token as it is written (as Hugging Face's ByteLevel decoder does).
  static std::string bytes_of(const std::string& token) {
    std::string out;
    for (size_t i = 0; i < token.size();) {
      const auto lead = static_cast<unsigned char>(token[i]);
      uint32_t cp = lead;
      size_t n = 1;
      if (lead >= 0xc0 && lead < 0xe0 && i + 1 < token.size()) {
        cp = ((lead & 0x1fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3fu);
        n = 2;
      }
      const int b = lead >= 0x80 && n == 1 ? -1 : unicode_to_byte(cp);
      if (b < 0) return token;
      out += static_cast<char>(b);
      i += n;
    }
    return out;
  }

  const AddedToken* added_at(const std::string& text, size_t i) const {
    const auto bucket = added_by_first_.find(static_cast<unsigned char>(text[i]));
    if (bucket == added_by_first_.end()) return nullptr;
    for (const AddedToken* t : bucket->second)  // longest first
      if (text.compare(i, t->content.size(), t->content) == 0) return t;
    return nullptr;
  }

  void read_model(const json& model) {
    const std::string type = model.value("type", std::string("(none)"));
    if (type != "BPE")
      fail(name_, ": model.type is '", type, "'; only byte-level BPE (\"BPE\") is supported in tokenizer.json");
    if (model.contains("dropout") && !model["dropout"].is_null())
      fail(name_, ": model.dropout is set; BPE dropout is not supported (it makes encoding random)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(key) && !model[key].is_null() && model[key] != "")
        fail(name_, ": model.", key, " is set; byte-level BPE with it is not supported");
    if (model.value("byte_fallback", false))
      fail(name_, ": model.byte_fallback is true; only byte-level BPE (bytes through the ByteLevel pre-tokenizer)",
           " is supported");
    std::unordered_map<std::string, int32_t> vocab;
    const json& v = field(model, "vocab");
    if (!v.is_object()) fail(name_, ": model.vocab is not an object of token: id");
    for (const auto& [token, id] : v.items()) vocab.emplace(token, token_id(id, "model.vocab['" + token + "']"));
    std::vector<std::pair<std::string, std::string>> merges;
    const json& m = field(model, "merges");
    if (!m.is_array()) fail(name_, ": model.merges is not an array");
    for (size_t r = 0; r < m.size(); ++r) {
      const json& e = m[r];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          fail(name_, ": model.merges[", r, "] is '", s, "', not two tokens separated by one space");
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        fail(name_, ": model.merges[", r, "] is neither \"a b\" nor [\"a\", \"b\"]: ", e.dump());
      }
    }
    bpe_ = std::make_unique<BpeModel>(std::move(vocab), merges, model.value("ignore_merges", false), name_);
  }

  void read_normalizer(const json& n) {
    if (n.is_null()) return;
    const std::string type = n.value("type", std::string("?"));
    if (type != "NFC")
      fail(name_, ": normalizer '", type, "' is not supported (none, or NFC as Qwen 2 has)");
    if (!have_nfc())
      fail(name_, ": normalizer NFC needs Unicode normalisation, which this build lacks (libutf8proc was not found,",
           " or TESSERA_UTF8PROC was OFF, when it was configured; on Debian: apt-get install libutf8proc-dev, then",
           " configure and build again)");
    nfc_ = true;
  }

  void read_byte_level(const json& p, const std::string& where) {
    add_prefix_space_ = p.value("add_prefix_space", false);
    if (add_prefix_space_ && !splitters_.empty())
      fail(name_, ": ", where, ": add_prefix_space after a Split is not supported");
    if (p.value("use_regex", true)) splitters_.push_back(std::make_unique<RegexSplitter>(kGpt2Regex));
    have_byte_level_ = true;
  }

  void read_split(const json& p, const std::string& where) {
    const json& pattern = field(p, "pattern");
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String")) {  // a literal: quoted for PCRE2
      regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
    } else {
      fail(name_, ": ", where, ".pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    const std::string behavior = p.value("behavior", std::string("(none)"));
    if (behavior != "Isolated")
      fail(name_, ": ", where, ".behavior is '", behavior, "'; only Split with behavior Isolated is supported");
    if (p.value("invert", false)) fail(name_, ": ", where, ".invert is true; not supported");
    splitters_.push_back(std::make_unique<RegexSplitter>(regex));
  }

  void read_one_pre_tokenizer(const json& p, const std::string& where) {
    const std::string type = p.value("type", std::string("(none)"));
    if (type == "ByteLevel") {
      read_byte_level(p, where);
    } else if (type == "Split") {
      if (have_byte_level_) fail(name_, ": ", where, ": a Split after ByteLevel is not supported");
      read_split(p, where);
    } else {
      fail(name_, ": ", where, ".type is '", type, "'; supported: ByteLevel, Split, or a Sequence of them");
    }
  }

  void read_pre_tokenizer(const json& p) {
    if (p.is_null())
      fail(name_, ": pre_tokenizer is null; byte-level BPE needs the ByteLevel pre-tokenizer");
    if (p.value("type", std::string()) == "Sequence") {
      const json& list = field(p, "pretokenizers");
      for (size_t i = 0; i < list.size(); ++i)
        read_one_pre_tokenizer(list[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
    } else {
      read_one_pre_tokenizer(p, "pre_tokenizer");
    }
    if (!have_byte_level_)
      fail(name_, ": the pre-tokenizer has no ByteLevel step; only byte-level BPE is supported");
  }

  void read_decoder(const json& d) {
    if (d.is_null()) return;
    const std::string type = d.value("type", std::string("(none)"));
    if (type != "ByteLevel") fail(name_, ": decoder.type is '", type, "'; only ByteLevel is supported");
  }

  void read_added_tokens(const json& list) {
    if (!list.is_array()) fail(name_, ": added_tokens is not an array");
    added_.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      AddedToken a{t.at("content").get<std::string>(), token_id(t.at("id"), where)};
      if (a.content.empty()) fail(name_, ": ", where, " has empty content");
      for (const char* key : {"lstrip", "rstrip", "single_word"})
        if (t.value(key, false))
          fail(name_, ": added_tokens[", i, "] ('", a.content, "') sets ", key, ", which is not supported");
      added_.push_back(a);
    }
    for (const AddedToken& a : added_) {
      added_by_id_.emplace(a.id, a.content);
      added_by_first_[static_cast<unsigned char>(a.content[0])].push_back(&a);
    }
    for (auto& [first, bucket] : added_by_first_)
      std::stable_sort(bucket.begin(), bucket.end(),
                       [](const AddedToken* x, const AddedToken* y) { return x->content.size() > y->content.size(); });
  }

  std::string name_;
  std::unique_ptr<BpeModel> bpe_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // applied in order, each to every piece
  bool add_prefix_space_ = false, have_byte_level_ = false, nfc_ = false;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::map<unsigned char, std::vector<const AddedToken*>> added_by_first_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_hf_byte_level_bpe(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(name, ": not valid JSON: ", e.what());
  }
  try {
    return std::make_unique<HfByteLevelBpe>(j, name);
  } catch (const json::exception& e) {
    fail(name, ": unexpected tokenizer.json content: ", e.what());
  }
}

}  // namespace tessera::text
