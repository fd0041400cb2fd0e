// The tokenizer a token data set carries, so that later tools decode its ids without being told:
// the root attributes tokenizer (the kind), tokenizer_file (the file's name), tokenizer_checksum
// (FNV-1a 64 of its bytes, 16 hex digits) and the file's bytes themselves in the uint8 dataset
// /tokenizer_file (a dataset, not an attribute: tokenizer files pass HDF5's 64 KiB attribute limit).
#pragma once
#include <memory>
#include <string>

#include "io/hdf5_file.h"
#include "text/tokenizer.h"

namespace tessera::text {

// The checksum stored beside a tokenizer file's bytes.
std::string tokenizer_checksum(const std::string& bytes);

void store_tokenizer(io::H5File& file, const std::string& kind, const std::string& bytes, const std::string& name);

// The data set's tokenizer: "bytes" needs no file; any other kind its stored bytes, checked against
// the checksum. A data set without one (synthetic data) is an error naming the file and its kind.
std::unique_ptr<Tokenizer> load_stored_tokenizer(const io::H5File& file);

}  // namespace tessera::text
