// TokenReader: HDF5 locates a token dataset's storage once (contiguous address, compact bytes, or
// the address and filter mask of every chunk); reads are pread + unfilter + widen + vocab check.
#include "io/token_reader.h"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "io/hdf5_handle.h"

namespace tessera::io {
namespace {

std::string type_of(hid_t type) {
  if (H5Tget_class(type) != H5T_INTEGER) return "";
  const size_t bytes = H5Tget_size(type);
  const bool is_signed = H5Tget_sign(type) != H5T_SGN_NONE;
  if (bytes == 1 && !is_signed) return "u8";  // a loss mask (one byte has no order)
  if (H5Tget_order(type) != H5T_ORDER_LE) return "";
  if (bytes == 2 && !is_signed) return "u16";
  if (bytes == 4 && !is_signed) return "u32";
  if (bytes == 4 && is_signed) return "i32";
  if (bytes == 8 && is_signed) return "i64";  // document offsets (TokenDataset refuses it for tokens)
  return "";
}

}  // namespace

TokenReader::TokenReader(const H5File& file, const std::string& dataset, int64_t vocab_size)
    : path_(file.path()), dataset_(dataset), vocab_(vocab_size) {
  silence_hdf5();
  const auto fid = static_cast<hid_t>(file.raw_id());
  Hid d(H5Dopen2(fid, dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) fail(with_hdf5_detail(path_ + ": cannot open dataset " + dataset));
  Hid type(H5Dget_type(d.get()), H5Tclose);
  type_ = type_of(type.get());
  if (type_.empty())
    fail(path_, ": ", dataset, " must hold little-endian uint16, uint32 or int32 tokens (uint8 mask values, int64",
         " document offsets), but holds ",
         file.stored_type(dataset));
  es_ = static_cast<int>(H5Tget_size(type.get()));
  Hid space(H5Dget_space(d.get()), H5Sclose);
  const std::vector<int64_t> dims = dataspace_dims(space.get());
  if (dims.size() != 1) fail(path_, ": ", dataset, " must be 1-D");
  size_ = dims[0];

  Hid dcpl(H5Dget_create_plist(d.get()), H5Pclose);
  if (H5Pget_external_count(dcpl.get()) > 0)
    fail(path_, ": ", dataset, " keeps its tokens in external files, which tessera does not read");
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_COMPACT) {
    // At most 64 KiB, inside the object header: read once here.
    compact_.resize(static_cast<size_t>(size_ * es_));
    if (size_ > 0 && H5Dread(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, compact_.data()) < 0)
      fail(with_hdf5_detail(path_ + ": cannot read the compact dataset " + dataset));
  } else if (layout == H5D_CONTIGUOUS) {
    const haddr_t addr = H5Dget_offset(d.get());
    if (size_ > 0 && addr == HADDR_UNDEF) fail(path_, ": ", dataset, " has no storage (its tokens were never written)");
    contiguous_addr_ = static_cast<int64_t>(addr);
  } else if (layout == H5D_CHUNKED) {
    hsize_t chunk_dim = 0;
    if (H5Pget_chunk(dcpl.get(), 1, &chunk_dim) != 1) fail(path_, ": ", dataset, ": cannot read its chunk shape");
    chunk_elements_ = static_cast<int64_t>(chunk_dim);
    const int nfilters = H5Pget_nfilters(dcpl.get());
    for (int i = 0; i < nfilters; ++i) {
      unsigned flags = 0;
      size_t nelem = 0;
      char name[64] = {0};
      unsigned config = 0;
      const H5Z_filter_t f = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nelem, nullptr,
                                            sizeof name, name, &config);
      if (f != H5Z_FILTER_DEFLATE && f != H5Z_FILTER_SHUFFLE && f != H5Z_FILTER_FLETCHER32)
        fail(path_, ": ", dataset, " is stored with the filter '", name, "' (id ", f,
             "), which tessera does not read: rewrite it with data_prep merge (deflate and shuffle are read)");
      filters_.push_back(static_cast<int>(f));
    }
    const int64_t expected = chunk_elements_ > 0 ? (size_ + chunk_elements_ - 1) / chunk_elements_ : 0;
    hsize_t n = 0;
    if (H5Dget_num_chunks(d.get(), space.get(), &n) < 0)
      fail(with_hdf5_detail(path_ + ": cannot count the chunks of " + dataset));
    // Every chunk must be stored (checked before the index is sized: a file may declare any size).
    if (static_cast<int64_t>(n) != expected)
      fail(path_, ": ", dataset, " has ", n, " of its ", expected, " chunks stored: ", size_,
           " tokens declared, some never written");
    chunks_.resize(static_cast<size_t>(expected));
    for (hsize_t i = 0; i < n; ++i) {
      hsize_t offset = 0, size = 0;
      haddr_t addr = 0;
      unsigned mask = 0;
      if (H5Dget_chunk_info(d.get(), space.get(), i, &offset, &mask, &addr, &size) < 0)
        fail(with_hdf5_detail(path_ + ": cannot locate chunk " + std::to_string(i) + " of " + dataset));
      const auto c = static_cast<int64_t>(offset) / chunk_elements_;
      if (c < 0 || c >= expected) fail(path_, ": ", dataset, " has a chunk at element ", offset, " past its end");
      chunks_[static_cast<size_t>(c)] = {static_cast<int64_t>(addr), static_cast<int64_t>(size), mask};
    }
    for (size_t c = 0; c < chunks_.size(); ++c)
      if (chunks_[c].addr < 0)
        fail(path_, ": ", dataset, " has no stored chunk for tokens [", static_cast<int64_t>(c) * chunk_elements_,
             ", ", std::min(size_, static_cast<int64_t>(c + 1) * chunk_elements_), ") (never written)");
  } else {
    fail(path_, ": ", dataset, " has a storage layout tessera does not read (virtual?)");
  }
  if (compact_.empty() && size_ > 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open ", path_, " for reading tokens: ", std::strerror(errno));
  }
}

TokenReader::~TokenReader() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenReader::pread_exact(int64_t addr, int64_t bytes, void* out) const {
  auto* p = static_cast<char*>(out);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, p + done, static_cast<size_t>(bytes - done), static_cast<off_t>(addr + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail(path_, ": cannot read ", bytes, " bytes of ", dataset_, " at file offset ", addr, ": ",
           got < 0 ? std::strerror(errno) : "the file ends first (truncated?)");
    done += got;
  }
  reads_.fetch_add(1);
  bytes_.fetch_add(bytes);
}

void TokenReader::load_chunk(int64_t c, std::vector<char>& out) const {
  const Chunk& ch = chunks_[static_cast<size_t>(c)];
  const auto full = static_cast<size_t>(chunk_elements_ * es_);
  std::vector<char> raw(static_cast<size_t>(ch.bytes));
  pread_exact(ch.addr, ch.bytes, raw.data());
  // Undo the pipeline in reverse order; a set bit i of the mask means filter i was skipped.
  for (int i = static_cast<int>(filters_.size()) - 1; i >= 0; --i) {
    if (ch.filter_mask & (1u << i)) continue;
    const int f = filters_[static_cast<size_t>(i)];
    if (f == H5Z_FILTER_FLETCHER32) {
      if (raw.size() < 4) fail(path_, ": ", dataset_, ": chunk ", c, " is too short for its checksum");
      raw.resize(raw.size() - 4);
    } else if (f == H5Z_FILTER_DEFLATE) {
      std::vector<char> plain(full);
      uLongf len = static_cast<uLongf>(full);
      const int rc = uncompress(reinterpret_cast<Bytef*>(plain.data()), &len,
                                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()));
      if (rc != Z_OK) fail(path_, ": ", dataset_, ": chunk ", c, " does not inflate (zlib error ", rc, ")");
      plain.resize(len);
      raw.swap(plain);
    } else if (f == H5Z_FILTER_SHUFFLE) {
      std::vector<char> plain(raw.size());
      const size_t n = raw.size() / static_cast<size_t>(es_);
      for (size_t b = 0; b < static_cast<size_t>(es_); ++b)
        for (size_t k = 0; k < n; ++k) plain[k * es_ + b] = raw[b * n + k];
      raw.swap(plain);
    }
  }
  if (raw.size() < full) fail(path_, ": ", dataset_, ": chunk ", c, " holds ", raw.size(), " bytes, not ", full);
  out.swap(raw);
}

void TokenReader::read_raw(int64_t start, int64_t count, char* out) const {
  if (count == 0) return;
  if (!compact_.empty()) {
    std::memcpy(out, compact_.data() + start * es_, static_cast<size_t>(count * es_));
    return;
  }
  if (contiguous_addr_ >= 0) {
    pread_exact(contiguous_addr_ + start * es_, count * es_, out);
    return;
  }
  const bool filtered = !filters_.empty();
  for (int64_t pos = start; pos < start + count;) {
    const int64_t c = pos / chunk_elements_, in = pos - c * chunk_elements_;
    const int64_t take = std::min(start + count - pos, chunk_elements_ - in);
    const Chunk& ch = chunks_[static_cast<size_t>(c)];
    if (!filtered || ch.filter_mask == (1u << filters_.size()) - 1) {
      pread_exact(ch.addr + in * es_, take * es_, out);
    } else {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cached_chunk_ != c) {
        cached_chunk_ = -1;
        load_chunk(c, cache_);
        cached_chunk_ = c;
      }
      std::memcpy(out, cache_.data() + in * es_, static_cast<size_t>(take * es_));
    }
    out += take * es_;
    pos += take;
  }
}

void TokenReader::read(int64_t start, int64_t count, uint8_t* out) const {
  TESSERA_CHECK(es_ == 1, path_, ": ", dataset_, " holds ", type_, " values, not bytes");
  TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= size_, path_, ": ", dataset_, ": values [", start, ", ",
                start + count, ") are outside its ", size_, " values");
  if (count == 0) return;
  read_raw(start, count, reinterpret_cast<char*>(out));
  for (int64_t i = 0; i < count; ++i)
    if (out[i] >= vocab_)
      fail(path_, ": ", dataset_, "[", start + i, "] = ", static_cast<int>(out[i]), " is outside [0, ", vocab_, ")");
}

void TokenReader::read(int64_t start, int64_t count, int32_t* out) const {
  TESSERA_CHECK(es_ == 2 || es_ == 4, path_, ": ", dataset_, " holds ", type_, " values, not tokens");
  TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= size_, path_, ": ", dataset_, ": tokens [", start, ", ",
                start + count, ") are outside its ", size_, " tokens");
  if (count == 0) return;
  // Narrow types land in the upper half of `out` and widen forwards in place: element i's four
  // bytes never reach a 2-byte element not yet read.
  if (es_ == 2) {
    char* raw = reinterpret_cast<char*>(out) + count * 2;
    read_raw(start, count, raw);
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, raw + i * 2, 2);
      out[i] = v;
    }
  } else {
    read_raw(start, count, reinterpret_cast<char*>(out));
  }
  const bool is_unsigned = type_ != "i32";
  for (int64_t i = 0; i < count; ++i) {
    const int64_t v = is_unsigned && es_ == 4 ? static_cast<int64_t>(static_cast<uint32_t>(out[i])) : out[i];
    if (v < 0 || v >= vocab_)
      fail(path_, ": ", dataset_, "[", start + i, "] = ", v, " is outside the vocabulary [0, ", vocab_, ")");
  }
}

void TokenReader::read_offsets(int64_t start, int64_t count, int64_t* out) const {
  TESSERA_CHECK(type_ == "i64" || type_ == "i32" || type_ == "u32", path_, ": ", dataset_, " holds ", type_,
                " values, not document offsets");
  TESSERA_CHECK(start >= 0 && count >= 0 && start + count <= size_, path_, ": ", dataset_, ": offsets [", start, ", ",
                start + count, ") are outside its ", size_, " values");
  if (count == 0) return;
  // 4-byte offsets land in the upper half of `out` and widen forwards in place (as narrow tokens do).
  if (es_ == 8) {
    read_raw(start, count, reinterpret_cast<char*>(out));
    return;
  }
  char* raw = reinterpret_cast<char*>(out) + count * 4;
  read_raw(start, count, raw);
  for (int64_t i = 0; i < count; ++i) {
    if (type_ == "i32") {
      int32_t v;
      std::memcpy(&v, raw + i * 4, 4);
      out[i] = v;
    } else {
      uint32_t v;
      std::memcpy(&v, raw + i * 4, 4);
      out[i] = v;
    }
  }
}

}  // namespace tessera::io
