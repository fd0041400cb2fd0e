// DocumentIndex: where a token split's documents start (the /doc_offsets of each of its files), looked
// up window by window without holding them: a rank's memory for documents is bounded (a sparse index
// of at most 4096 offsets a file plus a cache of 2 MiB of offset pages), whatever the corpus holds.
// Opening reads nothing; a lookup reads a few offsets by pread (TokenReader) to find the window's
// first document, then the pages that hold the window's documents. Offsets are checked as they are
// read (inside the file's tokens, increasing); `data_prep verify` checks every one.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace tessera::io {

class TokenReader;

class DocumentIndex {
 public:
  // One file's documents: its offsets (relative to the file's first token) and where the file's
  // tokens sit in the split, [first, first + tokens).
  struct Part {
    int64_t first = 0, tokens = 0;
    std::shared_ptr<const TokenReader> offsets;
  };
  // What the index holds: offsets a page (rounded up to whole chunks of deflated offsets), sparse
  // entries a file at most, and the bytes of pages held (at least two pages).
  struct Limits {
    int64_t page_offsets = 4096, sparse_entries = 4096, cache_bytes = int64_t{2} << 20;
  };
  // The files' offsets, each with at least one document starting at its token 0 (TokenDataset
  // checks both ends when it opens a file).
  explicit DocumentIndex(std::vector<Part> parts);
  DocumentIndex(std::vector<Part> parts, Limits limits);
  // Document starts held in memory (a data set built in code): increasing, the first 0.
  explicit DocumentIndex(std::vector<int64_t> starts);
  ~DocumentIndex();
  DocumentIndex(const DocumentIndex&) = delete;
  DocumentIndex& operator=(const DocumentIndex&) = delete;

  int64_t documents() const { return documents_; }
  // For t in [0, count): out[t] = the documents starting in (start, start + t] (0 for the document
  // holding token `start`, counting up: a window's segment ids). Throws naming the file, dataset
  // and index of an offset out of order or outside its file's tokens. Thread-safe.
  void segments(int64_t start, int64_t count, int32_t* out) const;
  // Offset bytes read from the files so far (tests: opening reads none, a window a few pages).
  int64_t bytes_read() const;

 private:
  struct Page;
  struct File;
  int64_t value(size_t part, int64_t i) const;        // offset i of a part, through the page cache
  int64_t point(size_t part, int64_t i) const;        // the same, for the sparse index (one pread)
  int64_t first_after(size_t part, int64_t s) const;  // the first index whose offset is > s
  const Page& page(size_t part, int64_t index) const;

  std::vector<File> files_;
  int64_t documents_ = 0, cache_bytes_ = 0;
  mutable std::mutex mutex_;  // the pages, sparse entries and clock below
  mutable std::vector<Page> pages_;
  mutable int64_t clock_ = 0;
  mutable size_t last_page_ = 0;  // the page read last
};

}  // namespace tessera::io
