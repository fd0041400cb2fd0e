// TokenDataset::open: finds the split's tokens in one HDF5 file or in the files a glob matches,
// validates shape, type, vocabulary and /doc_offsets' ends, naming the file and dataset in every
// error, and keeps a TokenReader per file; read() walks the parts.
#include "io/token_dataset.h"

#include <glob.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "io/document_index.h"
#include "io/hdf5_file.h"
#include "io/token_reader.h"

namespace tessera::io {
namespace {

bool is_glob(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

// One file's split: metadata checked, a reader made, no token read.
TokenDataset open_one(const std::string& path, const std::string& split) {
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
  if (type != "u16" && type != "u32" && type != "i32")
    fail(path, ": ", where, " must hold uint16 or int32 (or uint32) tokens, but holds ", type);
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

  auto reader = std::make_shared<const TokenReader>(file, where, ds.vocab_size);

  // Document starts beside the tokens: type, shape and both ends (two offsets read); every offset
  // is checked by `data_prep verify`.
  const std::string offsets = where.substr(0, where.size() - std::string("tokens").size()) + "doc_offsets";
  if (file.has(offsets)) {
    const std::string otype = file.stored_type(offsets);
    const std::vector<int64_t> oshape = file.shape(offsets);
    if ((otype != "i64" && otype != "i32" && otype != "u32") || oshape.size() != 1)
      fail(path, ": ", offsets, " must be 1-D int64 (the first token of each document), but is ", otype, " ",
           Shape(oshape).str());
    if (oshape[0] > 0) {
      const int64_t first = file.read_i64(offsets, 0, 1)[0], last = file.read_i64(offsets, oshape[0] - 1, 1)[0];
      if (first != 0) fail(path, ": ", offsets, "[0] = ", first, ": the first document must start at token 0");
      if (last < first || last >= shape[0])
        fail(path, ": ", offsets, "[", oshape[0] - 1, "] = ", last, " is outside the ", shape[0], " tokens of ",
             where, " (document starts must increase and lie inside the tokens)");
    }
  }
  // The loss mask beside the tokens: one uint8 a token (its values are checked as they are read).
  const std::string mask = where.substr(0, where.size() - std::string("tokens").size()) + "loss_mask";
  std::shared_ptr<const TokenReader> mask_reader;
  if (file.has(mask)) {
    const std::string mtype = file.stored_type(mask);
    const std::vector<int64_t> mshape = file.shape(mask);
    if (mtype != "u8" || mshape.size() != 1)
      fail(path, ": ", mask, " must be 1-D uint8 (1 where a token counts in the loss, else 0), but is ", mtype, " ",
           Shape(mshape).str());
    if (mshape[0] != shape[0])
      fail(path, ": ", mask, " has ", mshape[0], " values but ", where, " has ", shape[0],
           " tokens: the loss mask needs one value per token");
    mask_reader = std::make_shared<const TokenReader>(file, mask, 2);
  }
  ds.parts.push_back({0, std::move(reader), std::move(mask_reader)});
  return ds;
}

// Positions [start, start + count) of a split made of parts: fn(part, position in it, how many)
// for the part holding `start`, then on through the following ones.
template <class Fn>
void for_each_part(const std::vector<TokenPart>& parts, int64_t start, int64_t count, Fn&& fn) {
  auto it = std::upper_bound(parts.begin(), parts.end(), start,
                             [](int64_t s, const TokenPart& p) { return s < p.first; });
  for (--it; count > 0; ++it) {
    const int64_t in = start - it->first, take = std::min(count, it->reader->size() - in);
    fn(*it, in, take);
    start += take;
    count -= take;
  }
}

}  // namespace

std::vector<std::string> TokenDataset::expand(const std::string& path) {
  if (!is_glob(path)) return {path};
  glob_t g{};
  const int rc = ::glob(path.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (files.empty()) fail("--input ", path, ": the pattern matches no file");
  std::sort(files.begin(), files.end());
  return files;
}

bool TokenDataset::has_split(const std::string& path, const std::string& split) {
  return H5File::open_read(expand(path).front()).has("/" + split + "/tokens");
}

TokenDataset TokenDataset::open(const std::string& path, const std::string& split) {
  if (split != "train" && split != "val")
    fail(path, ": unknown data split '", split, "' (expected train or val)");
  const std::vector<std::string> files = expand(path);
  TokenDataset ds = open_one(files[0], split);
  ds.path = path;
  for (size_t i = 1; i < files.size(); ++i) {
    TokenDataset next = open_one(files[i], split);
    if (next.vocab_size != ds.vocab_size || next.tokenizer != ds.tokenizer)
      fail(path, ": the shards disagree on their vocabulary: ", files[0], " has vocab_size ", ds.vocab_size,
           " (tokenizer ", ds.tokenizer, "), ", files[i], " has vocab_size ", next.vocab_size, " (tokenizer ",
           next.tokenizer, ")");
    if (next.dataset != ds.dataset)
      fail(path, ": the shards keep their tokens apart: ", ds.dataset, " in ", files[0], ", ", next.dataset, " in ",
           files[i]);
    if ((next.parts[0].mask != nullptr) != ds.has_mask())
      fail(path, ": the shards disagree on the loss mask: ", files[0], (ds.has_mask() ? " has" : " has no"),
           " loss_mask, ", files[i], (ds.has_mask() ? " has none" : " has one"));
    next.parts[0].first = ds.size();
    ds.parts.push_back(next.parts[0]);
  }
  return ds;
}

int64_t TokenDataset::size() const {
  if (parts.empty()) return static_cast<int64_t>(tokens.size());
  return parts.back().first + parts.back().reader->size();
}

void TokenDataset::read(int64_t start, int64_t count, int32_t* out) const {
  TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= size(), path, ": tokens [", start, ", ", start + count,
                ") are outside its ", size(), " tokens");
  if (parts.empty()) {
    for (int64_t i = 0; i < count; ++i) {
      const int32_t v = tokens[static_cast<size_t>(start + i)];
      if (v < 0 || v >= vocab_size)
        fail(path, ": token ", start + i, " = ", v, " is outside the vocabulary [0, ", vocab_size, ")");
      out[i] = v;
    }
    return;
  }
  for_each_part(parts, start, count, [&](const TokenPart& p, int64_t in, int64_t take) {
    p.reader->read(in, take, out);
    out += take;
  });
}

std::vector<int32_t> TokenDataset::read(int64_t start, int64_t count) const {
  std::vector<int32_t> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
  read(start, count, out.data());
  return out;
}

void TokenDataset::load_documents() {
  TESSERA_CHECK(!parts.empty() || has_documents(), path, ": a data set built in code needs its documents set");
  if (parts.empty()) return;
  std::vector<DocumentIndex::Part> files;
  for (const TokenPart& part : parts) {
    const std::string& where = part.reader->dataset();
    const std::string offsets = where.substr(0, where.size() - std::string("tokens").size()) + "doc_offsets";
    const H5File file = H5File::open_read(part.reader->path());
    const int64_t n = file.has(offsets) ? file.shape(offsets)[0] : 0;
    if (n == 0)
      fail("--document-mask: ", part.reader->path(), ": ", offsets, file.has(offsets) ? " is empty" : " is missing",
           " (beside ", where, "): document masking needs each document's first token, which data_prep text,",
           " merge, synth and import-megatron write");
    // open() checked the type and both ends; the rest are checked as windows read them.
    files.push_back({part.first, part.reader->size(), std::make_shared<const TokenReader>(file, offsets, 0)});
  }
  documents = std::make_shared<const DocumentIndex>(std::move(files));
}

bool TokenDataset::has_documents() const { return documents && documents->documents() > 0; }

bool TokenDataset::has_mask() const {
  if (parts.empty()) return !mask.empty();
  return parts.front().mask != nullptr;
}

void TokenDataset::read_mask(int64_t start, int64_t count, uint8_t* out) const {
  TESSERA_CHECK(has_mask(), path, ": has no loss mask");
  TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= size(), path, ": mask values [", start, ", ",
                start + count, ") are outside its ", size(), " tokens");
  if (parts.empty()) {
    TESSERA_CHECK(mask.size() == tokens.size(), path, ": its loss mask has ", mask.size(), " values for ",
                  tokens.size(), " tokens");
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t v = mask[static_cast<size_t>(start + i)];
      if (v > 1) fail(path, ": loss mask value ", start + i, " = ", static_cast<int>(v), " is not 0 or 1");
      out[i] = v;
    }
    return;
  }
  for_each_part(parts, start, count, [&](const TokenPart& p, int64_t in, int64_t take) {
    p.mask->read(in, take, out);
    out += take;
  });
}

int64_t TokenDataset::bytes_read() const {
  int64_t n = 0;
  for (const TokenPart& p : parts) n += p.reader->bytes_read() + (p.mask ? p.mask->bytes_read() : 0);
  return n;
}

int64_t TokenDataset::reads() const {
  int64_t n = 0;
  for (const TokenPart& p : parts) n += p.reader->reads();
  return n;
}

}  // namespace tessera::io
