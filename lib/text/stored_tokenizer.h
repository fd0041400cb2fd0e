// The tokenizer a token data set carries, so that later tools decode its ids without being told:
// the root attributes tokenizer (the kind), tokenizer_file (the file's name), tokenizer_checksum
// (FNV-1a 64 of its bytes, 16 hex digits) and the file's bytes themselves in the uint8 dataset
// /tokenizer_file (a dataset, not an attribute: tokenizer files pass HDF5's 64 KiB attribute limit).
// Checkpoints carry the same layout (the trainers copy their data set's, import-hf a model folder's
// tokenizer.json), so load_stored_tokenizer reads either kind of file.
#pragma once
#include <memory>
#include <string>

#include "io/checkpoint_file.h"
#include "io/hdf5_file.h"
#include "text/tokenizer.h"

namespace tessera::text {

// The checksum stored beside a tokenizer file's bytes.
std::string tokenizer_checksum(const std::string& bytes);

void store_tokenizer(io::H5File& file, const std::string& kind, const std::string& bytes, const std::string& name);

// The data set's tokenizer: "bytes" needs no file; any other kind its stored bytes, checked against
// the checksum. A data set without one (synthetic data) is an error naming the file and its kind.
std::unique_ptr<Tokenizer> load_stored_tokenizer(const io::H5File& file);

// A stored tokenizer as it lies in a file, not built: its kind ("" when the file records none;
// "bytes", "sentencepiece", "hf-byte-level-bpe", or another ids' origin such as "synthetic-markov"),
// and for a kind with a file, the file's name, checksum and bytes (checked against the checksum).
struct StoredTokenizerFile {
  std::string kind, name, checksum, bytes;
  bool recorded() const { return !kind.empty(); }
  // "hf-byte-level-bpe tokenizer.json (checksum 0123456789abcdef)", "bytes", or "none recorded".
  std::string describe() const;
  // Same kind and, where there is a file, the same checksum.
  bool same_as(const StoredTokenizerFile& other) const { return kind == other.kind && checksum == other.checksum; }
};
StoredTokenizerFile read_stored_tokenizer_file(const io::H5File& file);
// Whether ids of this kind decode to text: bytes, sentencepiece, hf-byte-level-bpe.
bool decodes(const std::string& kind);
StoredTokenizerFile read_stored_tokenizer_file(const io::CheckpointReader& checkpoint);
// Into a checkpoint being written, in the data set's layout (nothing when !t.recorded()).
void store_tokenizer(io::CheckpointWriter& checkpoint, const StoredTokenizerFile& t);

}  // namespace tessera::text
