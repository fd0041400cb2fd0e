// Unit tests of streamed document lookup (io/document_index.h): the segments of every kind of window
// (random, at and beside document starts, across shards) equal those counted from all the offsets
// read whole, with small limits that make the sparse index, the page cache and its evictions all
// work, and with the defaults, plain and deflated offsets; opening reads no offset and a window a
// bounded few; an offset out of order is named when a window reads it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/document_index.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_reader.h"
#include "io/token_writer.h"

namespace fs = std::filesystem;
using tessera::io::DocumentIndex;
using tessera::io::H5File;
using tessera::io::TokenDataset;
using tessera::io::TokenReader;
using tessera::io::TokenWriter;

namespace {

class DocumentIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_docindex_" + std::to_string(getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// `tokens` tokens in documents of 1 to 12 tokens, every 40th document 300 long (windows inside one).
void write_documents(const std::string& path, int64_t tokens, int deflate, uint64_t seed) {
  H5File f = H5File::create(path);
  TokenWriter w(f, "/train", 50, 1024, deflate);
  std::mt19937_64 rng(seed);
  std::vector<int32_t> doc;
  for (int64_t at = 0, d = 0; at < tokens; ++d) {
    const int64_t n = std::min<int64_t>(tokens - at, d % 40 == 39 ? 300 : 1 + static_cast<int64_t>(rng() % 12));
    doc.assign(static_cast<size_t>(n), static_cast<int32_t>(d % 50));
    w.start_document();
    w.append(doc);
    at += n;
  }
  w.finish();
  f.set_attr("/", "vocab_size", 50);
  f.set_attr("/", "tokenizer", "test");
}

// Every document start of the split, read whole (the reference).
std::vector<int64_t> all_starts(const TokenDataset& d) {
  std::vector<int64_t> starts;
  for (const tessera::io::TokenPart& p : d.parts) {
    const H5File f = H5File::open_read(p.reader->path());
    for (int64_t o : f.read_i64("/train/doc_offsets", 0, f.shape("/train/doc_offsets")[0])) starts.push_back(p.first + o);
  }
  return starts;
}

std::vector<int32_t> expected_segments(const std::vector<int64_t>& starts, int64_t s, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t)
    out[static_cast<size_t>(t)] = static_cast<int32_t>(std::upper_bound(starts.begin(), starts.end(), s + t) -
                                                       std::upper_bound(starts.begin(), starts.end(), s));
  return out;
}

std::shared_ptr<const DocumentIndex> index_with(const TokenDataset& d, DocumentIndex::Limits limits) {
  std::vector<DocumentIndex::Part> parts;
  for (const tessera::io::TokenPart& p : d.parts)
    parts.push_back({p.first, p.reader->size(),
                     std::make_shared<const TokenReader>(H5File::open_read(p.reader->path()), "/train/doc_offsets", 0)});
  return std::make_shared<const DocumentIndex>(std::move(parts), limits);
}

// Windows of `count` tokens: random ones, and ones starting at, just before and just after every
// 7th document start (across the shards' joins too).
std::vector<int64_t> window_starts(const std::vector<int64_t>& starts, int64_t size, int64_t count) {
  std::vector<int64_t> w;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 400; ++i) w.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(size - count)));
  for (size_t i = 0; i < starts.size(); i += 7)
    for (int64_t d : {-1, 0, 1})
      if (starts[i] + d >= 0 && starts[i] + d + count <= size) w.push_back(starts[i] + d);
  w.push_back(0);
  w.push_back(size - count);
  return w;
}

}  // namespace

TEST_F(DocumentIndexTest, SegmentsEqualTheWholeOffsetsAcrossShardsAndLimits) {
  // Three shards: plain, deflated (offsets decoded a chunk at a time), plain.
  write_documents(file("shard_0.h5"), 30000, 0, 1);
  write_documents(file("shard_1.h5"), 20000, 1, 2);
  write_documents(file("shard_2.h5"), 25000, 0, 3);
  TokenDataset d = TokenDataset::open(file("shard_*.h5"), "train");
  ASSERT_EQ(d.parts.size(), 3u);
  const std::vector<int64_t> starts = all_starts(d);
  ASSERT_GT(starts.size(), 5000u);
  d.load_documents();
  ASSERT_TRUE(d.has_documents());
  EXPECT_EQ(d.documents->documents(), static_cast<int64_t>(starts.size()));
  EXPECT_EQ(d.documents->bytes_read(), 0) << "opening read offsets";

  const int64_t count = 48;
  const DocumentIndex memory(starts);
  struct Case {
    const char* name;
    std::shared_ptr<const DocumentIndex> index;
  } cases[] = {
      {"defaults (load_documents)", d.documents},
      // Pages of 16 offsets, 8 sparse entries a file (strides of many pages), room for 4 pages.
      {"small limits", index_with(d, {16, 8, 4 * 16 * 8})},
      {"one-offset pages, one sparse entry", index_with(d, {1, 1, 8})},
  };
  std::vector<int32_t> got(static_cast<size_t>(count));
  for (const Case& c : cases) {
    int64_t windows = 0, bounded = 0;
    for (int64_t s : window_starts(starts, d.size(), count)) {
      const std::vector<int32_t> want = expected_segments(starts, s, count);
      c.index->segments(s, count, got.data());
      ASSERT_EQ(got, want) << c.name << ": window at " << s;
      memory.segments(s, count, got.data());
      ASSERT_EQ(got, want) << "in memory: window at " << s;
      ++windows;
      bounded += want.back() > 0;
    }
    EXPECT_GT(bounded, windows / 2) << "most windows must cross a document start";
  }
}

TEST_F(DocumentIndexTest, OpeningReadsNothingAndAWindowAFewPages) {
  write_documents(file("docs.h5"), 200000, 0, 4);
  TokenDataset d = TokenDataset::open(file("docs.h5"), "train");
  d.load_documents();
  const DocumentIndex& index = *d.documents;
  ASSERT_GT(index.documents(), 3 * 4096);  // several pages of 4096 offsets
  EXPECT_EQ(index.bytes_read(), 0);
  std::vector<int32_t> seg(64);
  index.segments(123457, 64, seg.data());
  // The sparse entries the search visits (8 bytes each) and the pages the window's offsets lie in.
  const int64_t first = index.bytes_read();
  EXPECT_GT(first, 0);
  EXPECT_LE(first, 8 * 8 + 2 * 4096 * 8);
  index.segments(123460, 64, seg.data());  // the same offsets: cached
  EXPECT_EQ(index.bytes_read(), first);
}

TEST_F(DocumentIndexTest, OffsetsOutOfOrderAreNamedWhenAWindowReadsThem) {
  // Both ends are fine (open checks them); offset 3 goes back.
  const std::string path = file("bad.h5");
  {
    H5File f = H5File::create(path);
    f.write("/tokens", tessera::Tensor::zeros({1000}, tessera::DType::u16));
    tessera::Tensor o = tessera::Tensor::empty({5}, tessera::DType::i32);
    const int32_t offsets[] = {0, 100, 300, 200, 500};
    std::copy(std::begin(offsets), std::end(offsets), o.data<int32_t>());
    f.write("/doc_offsets", o);
    f.set_attr("/", "vocab_size", 10);
  }
  TokenDataset d = TokenDataset::open(path, "train");
  d.load_documents();  // reads no offset: nothing to find yet
  std::vector<int32_t> seg(16);
  for (int attempt = 0; attempt < 2; ++attempt) {  // again, the same error (nothing half-cached)
    try {
      d.documents->segments(250, 16, seg.data());
      ADD_FAILURE() << "a window over decreasing offsets was cut";
    } catch (const tessera::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("/doc_offsets[3] = 200"), std::string::npos) << msg;
      EXPECT_NE(msg.find("must increase"), std::string::npos) << msg;
    }
  }
  // With one-offset pages no page holds both: a window that reads only good offsets is cut, one whose
  // documents run over the bad one is stopped there.
  std::vector<DocumentIndex::Part> parts{
      {0, 1000, std::make_shared<const TokenReader>(H5File::open_read(path), "/doc_offsets", 0)}};
  const DocumentIndex small(std::move(parts), {1, 1, 8});
  small.segments(10, 16, seg.data());
  EXPECT_EQ(seg, std::vector<int32_t>(16, 0));
  std::vector<int32_t> long_window(300);
  try {
    small.segments(95, 300, long_window.data());  // documents at 100, 300, then 200
    ADD_FAILURE() << "a window over decreasing offsets was cut";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/doc_offsets[3] = 200"), std::string::npos) << e.what();
  }
}
