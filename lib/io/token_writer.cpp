// TokenWriter: two extendible chunked datasets, each grown by one hyperslab write per full buffer.
#include "io/token_writer.h"

#include <hdf5.h>

#include <algorithm>

#include "core/error.h"
#include "io/hdf5_handle.h"

namespace tessera::io {
namespace {

constexpr int64_t kDocChunk = 1 << 16;

// An empty extendible 1-D dataset of `type`, chunked by `chunk` elements.
void create_extendible(hid_t file, const std::string& path, const std::string& name, hid_t type, int64_t chunk,
                       int deflate) {
  const hsize_t zero = 0, unlimited = H5S_UNLIMITED, c = static_cast<hsize_t>(chunk);
  Hid space(H5Screate_simple(1, &zero, &unlimited), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(dcpl.get(), 1, &c);
  if (deflate > 0) {
    H5Pset_shuffle(dcpl.get());
    H5Pset_deflate(dcpl.get(), static_cast<unsigned>(deflate));
  }
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Hid d(H5Dcreate2(file, name.c_str(), type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) fail(with_hdf5_detail(path + ": cannot create dataset " + name));
}

// Appends n elements of memory type `mem` to the end of 1-D dataset `name` (now `at` long).
void append_to(hid_t file, const std::string& path, const std::string& name, hid_t mem, int64_t at, int64_t n,
               const void* data) {
  if (n == 0) return;
  Hid d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  const hsize_t extent = static_cast<hsize_t>(at + n), start = static_cast<hsize_t>(at), count = static_cast<hsize_t>(n);
  if (!d.valid() || H5Dset_extent(d.get(), &extent) < 0)
    fail(with_hdf5_detail(path + ": cannot grow dataset " + name));
  Hid space(H5Dget_space(d.get()), H5Sclose);
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr);
  Hid memspace(H5Screate_simple(1, &count, nullptr), H5Sclose);
  if (H5Dwrite(d.get(), mem, memspace.get(), space.get(), H5P_DEFAULT, data) < 0)
    fail(with_hdf5_detail(path + ": cannot write " + std::to_string(n) + " elements of " + name +
                          " (disk full?)"));
}

}  // namespace

TokenWriter::TokenWriter(H5File& file, const std::string& group, int64_t vocab_size, int64_t chunk_tokens,
                         int deflate, bool loss_mask)
    : file_(file), tokens_(group + "/tokens"), offsets_(group + "/doc_offsets"),
      mask_(loss_mask ? group + "/loss_mask" : ""), vocab_(vocab_size),
      chunk_(chunk_tokens), deflate_(deflate), wide_(vocab_size > 65536) {
  TESSERA_CHECK(vocab_size >= 1 && vocab_size <= (int64_t{1} << 31) - 1, "token writer: invalid vocab_size ",
                vocab_size);
  TESSERA_CHECK(chunk_tokens >= 1, "token writer: chunks need at least one token, got ", chunk_tokens);
  TESSERA_CHECK(deflate >= 0 && deflate <= 9, "token writer: deflate level must be 0 to 9, got ", deflate);
  silence_hdf5();
  const auto fid = static_cast<hid_t>(file.raw_id());
  create_extendible(fid, file.path(), tokens_, wide_ ? H5T_STD_U32LE : H5T_STD_U16LE, chunk_, deflate_);
  create_extendible(fid, file.path(), offsets_, H5T_STD_I64LE, kDocChunk, deflate_);
  if (!mask_.empty()) create_extendible(fid, file.path(), mask_, H5T_STD_U8LE, chunk_, deflate_);
  buffer_.reserve(static_cast<size_t>(chunk_));
}

void TokenWriter::start_document() {
  TESSERA_CHECK(!finished_, "token writer: ", tokens_, " is finished");
  // An empty document (two starts at one token) is not recorded twice.
  if (documents() > 0) {
    const int64_t last = doc_buffer_.empty() ? -1 : doc_buffer_.back();
    if (last == size()) return;
  }
  doc_buffer_.push_back(size());
  if (static_cast<int64_t>(doc_buffer_.size()) >= kDocChunk) flush_docs();
}

void TokenWriter::append(const int32_t* tokens, int64_t n) {
  TESSERA_CHECK(mask_.empty(), "token writer: ", tokens_, " has a loss mask: append each token's mask value too");
  append(tokens, nullptr, n);
}

void TokenWriter::append(const int32_t* tokens, const uint8_t* mask, int64_t n) {
  TESSERA_CHECK(!finished_, "token writer: ", tokens_, " is finished");
  TESSERA_CHECK(mask_.empty() == (mask == nullptr), "token writer: ", tokens_,
                mask_.empty() ? " has no loss mask" : " needs a mask value per token");
  if (n > 0 && documents() == 0) start_document();  // the data starts a document
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_)
      fail(file_.path(), ": ", tokens_, ": token ", size(), " = ", tokens[i], " is outside the vocabulary [0, ",
           vocab_, ")");
    if (mask && mask[i] > 1)
      fail(file_.path(), ": ", mask_, ": value ", size(), " = ", static_cast<int>(mask[i]), " is not 0 or 1");
    buffer_.push_back(tokens[i]);
    if (mask) mask_buffer_.push_back(mask[i]);
    if (static_cast<int64_t>(buffer_.size()) == chunk_) flush_tokens();
  }
}

void TokenWriter::flush_tokens() {
  const auto fid = static_cast<hid_t>(file_.raw_id());
  const auto n = static_cast<int64_t>(buffer_.size());
  if (wide_) {
    append_to(fid, file_.path(), tokens_, H5T_NATIVE_INT32, written_, n, buffer_.data());
  } else {
    std::vector<uint16_t> narrow(buffer_.begin(), buffer_.end());
    append_to(fid, file_.path(), tokens_, H5T_NATIVE_UINT16, written_, n, narrow.data());
  }
  if (!mask_.empty()) append_to(fid, file_.path(), mask_, H5T_NATIVE_UINT8, written_, n, mask_buffer_.data());
  written_ += n;
  buffer_.clear();
  mask_buffer_.clear();
}

void TokenWriter::flush_docs() {
  const auto n = static_cast<int64_t>(doc_buffer_.size());
  append_to(static_cast<hid_t>(file_.raw_id()), file_.path(), offsets_, H5T_NATIVE_INT64, docs_written_, n,
            doc_buffer_.data());
  docs_written_ += n;
  doc_buffer_.clear();
}

int64_t TokenWriter::finish() {
  if (finished_) return written_;
  // A document started after the last token holds nothing: dropped.
  if (!doc_buffer_.empty() && doc_buffer_.back() == size()) doc_buffer_.pop_back();
  flush_tokens();
  flush_docs();
  finished_ = true;
  return written_;
}

}  // namespace tessera::io
