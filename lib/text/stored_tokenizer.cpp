// store_tokenizer / load_stored_tokenizer: the tokenizer file's bytes in /tokenizer_file beside the
// root attributes that name and check it.
#include "text/stored_tokenizer.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/fnv1a.h"

namespace tessera::text {

namespace {
constexpr const char* kDataset = "/tokenizer_file";
}

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
  if (kind != "sentencepiece" && kind != "hf-byte-level-bpe")
    fail(file.path(), ": its tokens come from '", kind, "', which has no text to decode to");
  if (!file.has(kDataset) || !file.has_attr("/", "tokenizer_checksum"))
    fail(file.path(), ": tokenizer '", kind, "' but no stored tokenizer file (", kDataset, " and the attribute",
         " tokenizer_checksum)");
  const Tensor t = file.read(kDataset, DType::u8);
  const std::string bytes(reinterpret_cast<const char*>(t.data<uint8_t>()), static_cast<size_t>(t.numel()));
  const std::string want = file.attr_string("/", "tokenizer_checksum"), got = tokenizer_checksum(bytes);
  if (got != want)
    fail(file.path(), ": the stored tokenizer file ", kDataset, " has checksum ", got, " but tokenizer_checksum says ",
         want, " (the file is damaged)");
  const std::string name = file.has_attr("/", "tokenizer_file") ? file.attr_string("/", "tokenizer_file") : "tokenizer";
  return make_tokenizer(kind, bytes, file.path() + ":" + name);
}

}  // namespace tessera::text
