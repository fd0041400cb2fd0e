// DocumentIndex: a window's first document by binary search, first over a sparse index of every
// stride-th offset (each read once, lazily, by one pread), then inside one stride through a small
// least-recently-used cache of offset pages; the window's later documents walk the pages in order.
#include "io/document_index.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "io/token_reader.h"

namespace tessera::io {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// One file's offsets: read through `reader`, or held in `memory` (a data set built in code).
struct DocumentIndex::File {
  int64_t first = 0, tokens = 0, count = 0;
  std::shared_ptr<const TokenReader> reader;
  std::vector<int64_t> memory;
  int64_t page_offsets = 0;     // offsets a cached page holds (the last page may hold fewer)
  int64_t stride = 0;           // offsets between sparse entries: a whole number of pages
  mutable std::vector<int64_t> sparse;  // offset j * stride, or -1 until read (under the index's mutex)
};

struct DocumentIndex::Page {
  size_t file = 0;
  int64_t first = 0;  // the index of its first offset
  std::vector<int64_t> values;
  int64_t used = 0;  // the clock when last read
};

DocumentIndex::DocumentIndex(std::vector<Part> parts) : DocumentIndex(std::move(parts), Limits{}) {}

DocumentIndex::DocumentIndex(std::vector<Part> parts, Limits limits) : cache_bytes_(limits.cache_bytes) {
  TESSERA_CHECK(!parts.empty(), "a document index needs at least one file");
  TESSERA_CHECK(limits.page_offsets >= 1 && limits.sparse_entries >= 1, "document index: invalid limits");
  for (Part& p : parts) {
    TESSERA_CHECK(p.offsets != nullptr && p.offsets->size() > 0, "a document index needs each file's offsets");
    File f;
    f.first = p.first;
    f.tokens = p.tokens;
    f.count = p.offsets->size();
    const int64_t unit = p.offsets->decode_elements();  // a filtered chunk is decoded whole: pages of chunks
    f.page_offsets = unit > 0 ? unit * ceil_div(limits.page_offsets, unit) : limits.page_offsets;
    f.stride =
        f.page_offsets * std::max<int64_t>(1, ceil_div(ceil_div(f.count, f.page_offsets), limits.sparse_entries));
    f.sparse.assign(static_cast<size_t>(ceil_div(f.count, f.stride)), -1);
    f.reader = std::move(p.offsets);
    documents_ += f.count;
    files_.push_back(std::move(f));
  }
}

DocumentIndex::DocumentIndex(std::vector<int64_t> starts) {
  TESSERA_CHECK(!starts.empty() && starts[0] == 0, "document starts built in code must begin at token 0");
  for (size_t i = 1; i < starts.size(); ++i)
    TESSERA_CHECK(starts[i] > starts[i - 1], "document starts built in code must increase: [", i, "] = ", starts[i],
                  " after ", starts[i - 1]);
  File f;
  f.tokens = std::numeric_limits<int64_t>::max() / 2;
  f.count = static_cast<int64_t>(starts.size());
  f.memory = std::move(starts);
  documents_ = f.count;
  files_.push_back(std::move(f));
}

DocumentIndex::~DocumentIndex() = default;

int64_t DocumentIndex::bytes_read() const {
  int64_t n = 0;
  for (const File& f : files_)
    if (f.reader) n += f.reader->bytes_read();
  return n;
}

const DocumentIndex::Page& DocumentIndex::page(size_t file, int64_t index) const {
  const File& f = files_[file];
  const int64_t first = index / f.page_offsets * f.page_offsets;
  // The page read last first: a window's documents mostly lie in one.
  if (last_page_ < pages_.size() && pages_[last_page_].file == file && pages_[last_page_].first == first) {
    pages_[last_page_].used = ++clock_;
    return pages_[last_page_];
  }
  for (size_t k = 0; k < pages_.size(); ++k)
    if (pages_[k].file == file && pages_[k].first == first) {
      pages_[k].used = ++clock_;
      last_page_ = k;
      return pages_[k];
    }
  // Room for the new page: the least recently read go first, down to one beside it (a walk from one
  // page into the next holds two).
  const int64_t n = std::min(f.page_offsets, f.count - first);
  int64_t held = n * 8;
  for (const Page& p : pages_) held += static_cast<int64_t>(p.values.size()) * 8;
  while (pages_.size() > 1 && held > cache_bytes_) {
    const auto oldest =
        std::min_element(pages_.begin(), pages_.end(), [](const Page& a, const Page& b) { return a.used < b.used; });
    held -= static_cast<int64_t>(oldest->values.size()) * 8;
    pages_.erase(oldest);
  }
  Page p{file, first, std::vector<int64_t>(static_cast<size_t>(n)), ++clock_};
  f.reader->read_offsets(first, n, p.values.data());
  for (int64_t k = 0; k < n; ++k) {
    const int64_t v = p.values[static_cast<size_t>(k)];
    if (v < 0 || v >= f.tokens || (k > 0 && v <= p.values[static_cast<size_t>(k - 1)]))
      fail(f.reader->path(), ": ", f.reader->dataset(), "[", first + k, "] = ", v,
           ": document starts must increase and lie inside the ", f.tokens, " tokens");
  }
  pages_.push_back(std::move(p));
  last_page_ = pages_.size() - 1;
  return pages_.back();
}

int64_t DocumentIndex::value(size_t file, int64_t i) const {
  const File& f = files_[file];
  if (!f.reader) return f.memory[static_cast<size_t>(i)];
  const Page& p = page(file, i);
  return p.values[static_cast<size_t>(i - p.first)];
}

int64_t DocumentIndex::point(size_t file, int64_t i) const {
  const File& f = files_[file];
  if (f.reader->decode_elements() > 0) return value(file, i);  // a filtered chunk is read whole anyway
  int64_t v = 0;
  f.reader->read_offsets(i, 1, &v);
  if (v < 0 || v >= f.tokens)
    fail(f.reader->path(), ": ", f.reader->dataset(), "[", i, "] = ", v,
         ": document starts must increase and lie inside the ", f.tokens, " tokens");
  return v;
}

int64_t DocumentIndex::first_after(size_t file, int64_t s) const {
  const File& f = files_[file];
  if (!f.reader) return std::upper_bound(f.memory.begin(), f.memory.end(), s) - f.memory.begin();
  // The first sparse entry past s (entry 0 is offset 0 <= s), then the offsets of the stride before it.
  int64_t lo = 0, hi = static_cast<int64_t>(f.sparse.size());
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    int64_t& entry = f.sparse[static_cast<size_t>(mid)];
    if (entry < 0) entry = point(file, mid * f.stride);
    if (entry <= s) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return 0;
  int64_t a = (lo - 1) * f.stride + 1, b = std::min(lo * f.stride, f.count);
  while (a < b) {
    const int64_t mid = (a + b) / 2;
    if (value(file, mid) <= s) {
      a = mid + 1;
    } else {
      b = mid;
    }
  }
  return a;
}

void DocumentIndex::segments(int64_t start, int64_t count, int32_t* out) const {
  TESSERA_CHECK(start >= 0 && count >= 0, "document segments: invalid window [", start, ", ", start + count, ")");
  const std::lock_guard<std::mutex> lock(mutex_);
  // The file holding `start`, and its first document starting after it.
  size_t file = static_cast<size_t>(std::upper_bound(files_.begin(), files_.end(), start,
                                                     [](int64_t s, const File& f) { return s < f.first; }) -
                                    files_.begin() - 1);
  int64_t i = first_after(file, start - files_[file].first);
  // The start (in the split's numbering) of document i of `file`, moving on to the next file's
  // first when this one has no more; past the last, never reached.
  auto next = [&]() -> int64_t {
    while (file < files_.size() && i >= files_[file].count) {
      ++file;
      i = 0;
    }
    return file < files_.size() ? files_[file].first + value(file, i) : std::numeric_limits<int64_t>::max();
  };
  int32_t segment = 0;
  int64_t at = next();
  for (int64_t t = 0; t < count; ++t) {
    while (at <= start + t) {
      ++segment;
      ++i;
      const int64_t following = next();
      if (following <= at)  // out of order across two pages of one file (a page checks its own)
        fail(files_[file].reader ? files_[file].reader->path() : "documents", ": ",
             files_[file].reader ? files_[file].reader->dataset() : "starts", "[", i, "] = ",
             following - files_[file].first, ": document starts must increase and lie inside the ",
             files_[file].tokens, " tokens");
      at = following;
    }
    out[t] = segment;
  }
}

}  // namespace tessera::io
