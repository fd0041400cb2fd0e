// TokenDataset::open: finds the split's tokens in an HDF5 file, reads them whole as int32 and
// validates shape, type, vocabulary and range, naming the file and dataset in every error.
#include "io/token_dataset.h"

#include <limits>

#include "core/allocator.h"
#include "core/error.h"
#include "io/hdf5_file.h"

namespace tessera::io {

TokenDataset TokenDataset::open(const std::string& path, const std::string& split) {
  if (split != "train" && split != "val")
    fail(path, ": unknown data split '", split, "' (expected train or val)");
  const H5File file = H5File::open_read(path);

  // The tokens: the split's group, else a single /tokens (a file per split).
  const std::string group = "/" + split;
  const std::string candidates[] = {group + "/tokens", "/tokens"};
  TokenDataset ds;
  ds.path = path;
  ds.split = split;
  for (const std::string& c : candidates) {
    if (file.has(c)) {
      ds.dataset = c;
      break;
    }
  }
  if (ds.dataset.empty())
    fail(path, ": no token dataset for split '", split, "' (tried ", candidates[0], " and ", candidates[1], ")");
  const std::string& where = ds.dataset;
  // Attributes: on the split's group first, then on the root.
  const std::vector<std::string> holders =
      where == candidates[0] ? std::vector<std::string>{group, "/"} : std::vector<std::string>{"/"};
  auto holder_of = [&](const std::string& key) -> std::string {
    for (const std::string& h : holders)
      if (file.has_attr(h, key)) return h;
    return "";
  };
  auto tried = [&] {
    std::string s;
    for (const std::string& h : holders) s += (s.empty() ? "" : " or ") + h;
    return s;
  };

  std::vector<int64_t> shape;
  try {
    shape = file.shape(where);
  } catch (const Error&) {
    fail(path, ": ", where, " is not a dataset");
  }
  if (shape.size() != 1)
    fail(path, ": ", where, " must be 1-D, but has shape ", Shape(shape).str());
  const std::string type = file.stored_type(where);
  if (type != "u16" && type != "i32")
    fail(path, ": ", where, " must hold uint16 or int32 tokens, but holds ", type);
  if (shape[0] == 0) fail(path, ": ", where, " is empty (no tokens)");

  const std::string vocab_at = holder_of("vocab_size");
  if (vocab_at.empty()) fail(path, ": missing attribute vocab_size (looked on ", tried(), ")");
  try {
    ds.vocab_size = file.attr_int(vocab_at, "vocab_size");
  } catch (const Error& e) {
    fail("invalid vocab_size: ", e.what());
  }
  if (ds.vocab_size < 1 || ds.vocab_size > std::numeric_limits<int32_t>::max())
    fail(path, ": invalid vocab_size ", ds.vocab_size, " on ", vocab_at, " (must be in [1, 2^31): token ids are",
         " 32-bit)");
  const std::string tok_at = holder_of("tokenizer");
  ds.tokenizer = tok_at.empty() ? "unknown" : file.attr_string(tok_at, "tokenizer");
  const std::string rate_at = holder_of("entropy_rate");
  if (!rate_at.empty()) ds.entropy_rate = file.attr_double(rate_at, "entropy_rate");

  // The split is read whole (4 bytes a token, twice while it is converted): refused before the
  // read when this machine's free memory cannot hold it.
  const int64_t needed = shape[0] * 8, available = available_host_bytes();
  if (available >= 0 && needed > available)
    fail(path, ": ", where, " holds ", shape[0], " tokens, which take ", needed, " bytes to read, more than the ",
         available, " bytes of memory available");
  const Tensor t = file.read(where, DType::i32);
  const int32_t* p = t.data<int32_t>();
  ds.tokens.assign(p, p + t.numel());
  for (size_t i = 0; i < ds.tokens.size(); ++i) {
    const int32_t v = ds.tokens[i];
    if (v < 0 || v >= ds.vocab_size)
      fail(path, ": ", where, "[", i, "] = ", v, " is outside the vocabulary [0, ", ds.vocab_size,
           ") (first bad token)");
  }
  return ds;
}

}  // namespace tessera::io
