// Megatron-LM indexed data set reader (format in megatron_dataset.h): header and array checks,
// and the documents' tokens streamed in blocks through pread.
#include "io/megatron_dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little, "the Megatron reader assumes a little-endian host");

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
constexpr int64_t kBlockTokens = int64_t{1} << 20;
constexpr int64_t kBlockEntries = int64_t{1} << 16;

struct DTypeInfo {
  int code, bytes;
  const char* name;
};
constexpr DTypeInfo kDTypes[] = {{1, 1, "uint8"}, {2, 1, "int8"},  {3, 2, "int16"},
                                 {4, 4, "int32"}, {5, 8, "int64"}, {8, 2, "uint16"}};

void pread_exact(int fd, const std::string& path, int64_t offset, int64_t bytes, void* out) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, ": read error at byte ", offset, ": ", std::strerror(errno));
    if (n == 0) fail(path, ": unexpected end of file at byte ", offset);
    p += n;
    offset += n;
    bytes -= n;
  }
}

int open_file(const std::string& path, int64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot read ", path, ": not a regular file");
  }
  size = static_cast<int64_t>(st.st_size);
  return fd;
}

// One int32 or int64 array of the .idx, read forward in blocks: at(i) for i never decreasing
// (a step back rereads, so it stays correct, only slower).
template <typename T>
class ArrayCursor {
 public:
  ArrayCursor(int fd, const std::string& path, int64_t offset, int64_t count)
      : fd_(fd), path_(path), offset_(offset), count_(count) {}
  T at(int64_t i) {
    if (i < first_ || i >= first_ + static_cast<int64_t>(buf_.size())) {
      first_ = i;
      buf_.resize(static_cast<size_t>(std::min(kBlockEntries, count_ - i)));
      pread_exact(fd_, path_, offset_ + i * static_cast<int64_t>(sizeof(T)),
                  static_cast<int64_t>(buf_.size() * sizeof(T)), buf_.data());
    }
    return buf_[static_cast<size_t>(i - first_)];
  }

 private:
  int fd_;
  const std::string& path_;
  int64_t offset_, count_, first_ = 0;
  std::vector<T> buf_;
};

}  // namespace

MegatronDataset MegatronDataset::open(const std::string& prefix) {
  MegatronDataset d;
  d.idx_path_ = prefix + ".idx";
  d.bin_path_ = prefix + ".bin";
  int64_t idx_bytes = 0;
  d.idx_fd_ = open_file(d.idx_path_, idx_bytes);
  d.bin_fd_ = open_file(d.bin_path_, d.bin_bytes_);
  const std::string& idx = d.idx_path_;
  if (idx_bytes < kHeaderBytes)
    fail(idx, ": ", idx_bytes, " bytes, shorter than the ", kHeaderBytes, "-byte header of a Megatron index");
  char header[kHeaderBytes];
  pread_exact(d.idx_fd_, idx, 0, kHeaderBytes, header);
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0)
    fail(idx, ": bad magic: not a Megatron indexed data set index (expected \"MMIDIDX\\0\\0\" at byte 0)");
  uint64_t version = 0, seqs = 0, docs = 0;
  std::memcpy(&version, header + 9, 8);
  if (version != 1) fail(idx, ": version ", version, " is not supported (only version 1)");
  d.dtype_code_ = static_cast<unsigned char>(header[17]);
  for (const DTypeInfo& t : kDTypes)
    if (t.code == d.dtype_code_) d.item_bytes_ = t.bytes;
  if (d.item_bytes_ == 0) {
    if (d.dtype_code_ == 6 || d.dtype_code_ == 7)
      fail(idx, ": dtype code ", d.dtype_code_, " is a floating-point type: token ids must be integers");
    fail(idx, ": unknown dtype code ", d.dtype_code_, " (known: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)");
  }
  std::memcpy(&seqs, header + 18, 8);
  std::memcpy(&docs, header + 26, 8);
  // Bounded by what the file could hold before any product is formed (no overflow).
  const auto avail = static_cast<uint64_t>(idx_bytes - kHeaderBytes);
  if (seqs > 0 && seqs <= avail / 13 && docs <= avail / 8 && seqs * 13 + docs * 8 == avail)
    fail(idx, ": a multimodal index (an int8 sequence mode per sequence after the document indices): not supported,",
         " token data sets hold text only");
  if (seqs > avail / 12 || docs > avail / 8 || seqs * 12 + docs * 8 != avail)
    fail(idx, ": the header's counts disagree with the file size: sequence count ", seqs, " and document index count ",
         docs, " need ", kHeaderBytes, " + 12 x ", seqs, " + 8 x ", docs, " bytes, the file has ", idx_bytes,
         seqs > avail / 12 || docs > avail / 8 ? " (truncated or not an index?)" : "");
  d.sequences_ = static_cast<int64_t>(seqs);
  d.doc_index_count_ = static_cast<int64_t>(docs);
  if (d.doc_index_count_ < 1) fail(idx, ": document index count is 0 (it holds at least the leading 0)");
  d.check_sequences();
  // Document indices: 0 first, the sequence count last, never decreasing, never past it.
  ArrayCursor<int64_t> doc_idx(d.idx_fd_, idx, kHeaderBytes + 12 * d.sequences_, d.doc_index_count_);
  int64_t prev = 0;
  for (int64_t i = 0; i < d.doc_index_count_; ++i) {
    const int64_t v = doc_idx.at(i);
    if (v < 0 || v > d.sequences_)
      fail(idx, ": document_indices[", i, "] = ", v, " is out of range [0, ", d.sequences_, "] (the sequence count)");
    if (v < prev) fail(idx, ": document_indices[", i, "] = ", v, " is less than document_indices[", i - 1, "] = ", prev,
                       " (document indices must not decrease)");
    prev = v;
  }
  if (doc_idx.at(0) != 0) fail(idx, ": document_indices[0] = ", doc_idx.at(0), ", expected 0");
  if (prev != d.sequences_)
    fail(idx, ": document_indices[", d.doc_index_count_ - 1, "] = ", prev, ", expected the sequence count ",
         d.sequences_, " (the last document must end with the last sequence)");
  return d;
}

// Sizes and pointers: each sequence begins where the previous one ends, none past the .bin, and the
// .bin holds exactly the sequences.
void MegatronDataset::check_sequences() {
  ArrayCursor<int32_t> sizes(idx_fd_, idx_path_, kHeaderBytes, sequences_);
  ArrayCursor<int64_t> pointers(idx_fd_, idx_path_, kHeaderBytes + 4 * sequences_, sequences_);
  int64_t end = 0, prev = 0;  // bytes: where the previous sequence ends; its pointer
  for (int64_t i = 0; i < sequences_; ++i) {
    const int32_t size = sizes.at(i);
    const int64_t ptr = pointers.at(i);
    if (size < 0) fail(idx_path_, ": sizes[", i, "] = ", size, " is negative");
    if (i > 0 && ptr < prev)
      fail(idx_path_, ": pointers[", i, "] = ", ptr, " is less than pointers[", i - 1, "] = ", prev,
           " (pointers must increase)");
    prev = ptr;
    if (ptr != end)
      fail(idx_path_, ": pointers[", i, "] = ", ptr, " but sequence ", i, " should start at byte ", end,
           i == 0 ? " (the first pointer is 0)" : " (where the previous sequence ends: pointers[i-1] + sizes[i-1] x item size)");
    end = ptr + int64_t{size} * item_bytes_;
    if (end > bin_bytes_)
      fail(idx_path_, ": sequence ", i, " (pointers[", i, "] = ", ptr, ", sizes[", i, "] = ", size, " ", dtype_name(),
           ") ends at byte ", end, ", past the end of ", bin_path_, " (", bin_bytes_,
           " bytes): the .bin is shorter than its .idx says (truncated, or not its .bin?)");
  }
  if (end != bin_bytes_)
    fail(bin_path_, ": ", bin_bytes_, " bytes, but its index ", idx_path_, " describes ", end, " bytes (", sequences_,
         " sequences of ", dtype_name(), "): the .bin and the .idx disagree");
  tokens_ = end / item_bytes_;
}

const char* MegatronDataset::dtype_name() const {
  for (const DTypeInfo& t : kDTypes)
    if (t.code == dtype_code_) return t.name;
  return "?";
}

void MegatronDataset::walk_documents(const std::function<void(int64_t, int64_t, int64_t)>& fn) const {
  ArrayCursor<int64_t> pointers(idx_fd_, idx_path_, kHeaderBytes + 4 * sequences_, sequences_);
  ArrayCursor<int64_t> doc_idx(idx_fd_, idx_path_, kHeaderBytes + 12 * sequences_, doc_index_count_);
  // Sequences are contiguous (checked): document d is tokens [start of its first sequence, start of the next's).
  auto token_of = [&](int64_t seq) { return seq == sequences_ ? tokens_ : pointers.at(seq) / item_bytes_; };
  int64_t first = token_of(doc_idx.at(0));
  for (int64_t d = 0; d + 1 < doc_index_count_; ++d) {
    const int64_t end = token_of(doc_idx.at(d + 1));
    fn(d, first, end);
    first = end;
  }
}

void MegatronDataset::for_each_document(int64_t vocab_size, const std::function<void(int64_t, int64_t)>& begin,
                                        const std::function<void(const int32_t*, int64_t)>& block) const {
  std::vector<unsigned char> raw;
  std::vector<int32_t> ids;
  walk_documents([&](int64_t d, int64_t first, int64_t end) {
    begin(d, end - first);
    for (int64_t at = first; at < end; at += kBlockTokens) {
      const int64_t n = std::min(kBlockTokens, end - at);
      raw.resize(static_cast<size_t>(n * item_bytes_));
      ids.resize(static_cast<size_t>(n));
      pread_exact(bin_fd_, bin_path_, at * item_bytes_, n * item_bytes_, raw.data());
      for (int64_t i = 0; i < n; ++i) {
        const unsigned char* p = raw.data() + i * item_bytes_;
        int64_t v = 0;
        switch (dtype_code_) {
          case 1: v = *p; break;
          case 2: v = static_cast<int8_t>(*p); break;
          case 3: { int16_t x; std::memcpy(&x, p, 2); v = x; break; }
          case 4: { int32_t x; std::memcpy(&x, p, 4); v = x; break; }
          case 5: { int64_t x; std::memcpy(&x, p, 8); v = x; break; }
          case 8: { uint16_t x; std::memcpy(&x, p, 2); v = x; break; }
          default: fail(idx_path_, ": dtype code ", dtype_code_);
        }
        if (v < 0 || v >= vocab_size)
          fail(bin_path_, ": token ", at + i, " (document ", d, ") = ", v, " is outside the vocabulary [0, ", vocab_size,
               ") (is --vocab-size the vocabulary that made the ids?)");
        ids[static_cast<size_t>(i)] = static_cast<int32_t>(v);
      }
      block(ids.data(), n);
    }
  });
}

MegatronDataset::MegatronDataset(MegatronDataset&& o) noexcept
    : idx_path_(std::move(o.idx_path_)), bin_path_(std::move(o.bin_path_)), idx_fd_(o.idx_fd_), bin_fd_(o.bin_fd_),
      dtype_code_(o.dtype_code_), item_bytes_(o.item_bytes_), sequences_(o.sequences_),
      doc_index_count_(o.doc_index_count_), tokens_(o.tokens_), bin_bytes_(o.bin_bytes_) {
  o.idx_fd_ = o.bin_fd_ = -1;
}

MegatronDataset::~MegatronDataset() {
  if (idx_fd_ >= 0) ::close(idx_fd_);
  if (bin_fd_ >= 0) ::close(bin_fd_);
}

}  // namespace tessera::io
