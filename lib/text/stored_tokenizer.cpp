// store_tokenizer / load_stored_tokenizer: the tokenizer file's bytes in /tokenizer_file beside the
// root attributes that name and check it, in token data sets and in checkpoints.
#include "text/stored_tokenizer.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/fnv1a.h"

namespace tessera::text {

namespace {
constexpr const char* kDataset = "/tokenizer_file";

// The kinds whose ids decode through a stored file.
bool has_file(const std::string& kind) { return kind == "sentencepiece" || kind == "hf-byte-level-bpe"; }

// The bytes against the recorded checksum; a mismatch names the file.
void check_bytes(const std::string& path, const std::string& bytes, const std::string& want) {
  const std::string got = tokenizer_checksum(bytes);
  if (got != want)
    fail(path, ": the stored tokenizer file ", kDataset, " has checksum ", got, " but tokenizer_checksum says ", want,
         " (the file is damaged)");
}
}  // namespace

std::string tokenizer_checksum(const std::string& bytes) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, Fnv1a().add(bytes).value());
  return hex;
}

void store_tokenizer(io::H5File& file, const std::string& kind, const std::string& bytes, const std::string& name) {
  file.set_attr("/", "tokenizer", kind);
  if (kind == "bytes") return;
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::u8);
  std::memcpy(t.data<uint8_t>(), bytes.data(), bytes.size());
  file.write(kDataset, t);
  file.set_attr("/", "tokenizer_file", name);
  file.set_attr("/", "tokenizer_checksum", tokenizer_checksum(bytes));
}

std::unique_ptr<Tokenizer> load_stored_tokenizer(const io::H5File& file) {
  if (!file.has_attr("/", "tokenizer")) fail(file.path(), ": no tokenizer attribute: the ids cannot be decoded");
  const std::string kind = file.attr_string("/", "tokenizer");
  if (kind == "bytes") return make_tokenizer(kind, "", file.path());
  if (!has_file(kind)) fail(file.path(), ": its tokens come from '", kind, "', which has no text to decode to");
  const StoredTokenizerFile t = read_stored_tokenizer_file(file);
  return make_tokenizer(kind, t.bytes, file.path() + ":" + (t.name.empty() ? "tokenizer" : t.name));
}

bool decodes(const std::string& kind) { return kind == "bytes" || has_file(kind); }

std::string StoredTokenizerFile::describe() const {
  if (!recorded()) return "none recorded";
  if (checksum.empty()) return kind;
  return kind + " " + (name.empty() ? "tokenizer" : name) + " (checksum " + checksum + ")";
}

StoredTokenizerFile read_stored_tokenizer_file(const io::H5File& file) {
  StoredTokenizerFile t;
  if (!file.has_attr("/", "tokenizer")) return t;
  t.kind = file.attr_string("/", "tokenizer");
  if (!has_file(t.kind)) return t;
  if (!file.has(kDataset) || !file.has_attr("/", "tokenizer_checksum"))
    fail(file.path(), ": tokenizer '", t.kind, "' but no stored tokenizer file (", kDataset, " and the attribute",
         " tokenizer_checksum)");
  const Tensor bytes = file.read(kDataset, DType::u8);
  t.bytes.assign(reinterpret_cast<const char*>(bytes.data<uint8_t>()), static_cast<size_t>(bytes.numel()));
  t.checksum = file.attr_string("/", "tokenizer_checksum");
  check_bytes(file.path(), t.bytes, t.checksum);
  if (file.has_attr("/", "tokenizer_file")) t.name = file.attr_string("/", "tokenizer_file");
  return t;
}

StoredTokenizerFile read_stored_tokenizer_file(const io::CheckpointReader& checkpoint) {
  StoredTokenizerFile t;
  if (!checkpoint.has_attr("tokenizer")) return t;
  t.kind = checkpoint.attr_string("tokenizer");
  if (!has_file(t.kind)) return t;
  if (!checkpoint.has(kDataset) || !checkpoint.has_attr("tokenizer_checksum"))
    fail(checkpoint.path(), ": tokenizer '", t.kind, "' but no stored tokenizer file (", kDataset, " and the attribute",
         " tokenizer_checksum)");
  t.bytes = checkpoint.read_bytes(kDataset);
  t.checksum = checkpoint.attr_string("tokenizer_checksum");
  check_bytes(checkpoint.path(), t.bytes, t.checksum);
  if (checkpoint.has_attr("tokenizer_file")) t.name = checkpoint.attr_string("tokenizer_file");
  return t;
}

void store_tokenizer(io::CheckpointWriter& checkpoint, const StoredTokenizerFile& t) {
  if (!t.recorded()) return;
  checkpoint.set_attr("tokenizer", t.kind);
  if (!has_file(t.kind)) return;
  checkpoint.write_bytes(kDataset, t.bytes);
  checkpoint.set_attr("tokenizer_file", t.name);
  checkpoint.set_attr("tokenizer_checksum", tokenizer_checksum(t.bytes));
}

}  // namespace tessera::text
