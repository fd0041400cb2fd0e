// TokenDataset: a token data set read whole from HDF5 (/tokens or /<split>/tokens, with vocab_size,
// tokenizer and optional entropy_rate), validated with errors that name the file and dataset.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::io {

struct TokenDataset {
  // split "train" or "val": /<split>/tokens if present, else /tokens. Attributes are looked up on
  // the split's group first, then on the root.
  static TokenDataset open(const std::string& path, const std::string& split);

  std::string path, split;
  std::string dataset;  // the HDF5 path the tokens came from, e.g. "/train/tokens"
  int64_t vocab_size = 0;
  std::string tokenizer;
  std::optional<double> entropy_rate;  // nats/token, when the source is known (synthetic data)
  std::vector<int32_t> tokens;         // loaded whole (data sets here are small)

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace tessera::io
