// Unit tests of streamed token data: TokenWriter's files read back by TokenReader (uint16, uint32,
// deflated, across chunks and shards), opening that reads no token, the loader's rows bit for bit
// those of the same tokens in memory, epoch sampling (every window once per epoch), the window
// permutation, the prefetcher's order and errors, and bad tokens found where they are read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_loader.h"
#include "io/token_prefetcher.h"
#include "io/token_writer.h"
#include "io/window_permutation.h"

namespace fs = std::filesystem;
using tessera::io::H5File;
using tessera::io::Sampling;
using tessera::io::TokenDataset;
using tessera::io::TokenLoader;
using tessera::io::TokenWriter;

namespace {

class TokenStreaming : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_tokstream_" + std::to_string(getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// token i = (i * 7 + 3) mod vocab, written in blocks of `block`, a document every `doc` tokens.
std::vector<int32_t> pattern(int64_t n, int64_t vocab, int64_t offset = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>(((offset + i) * 7 + 3) % vocab);
  return t;
}

void write_tokens(const std::string& path, const std::vector<int32_t>& tokens, int64_t vocab, int64_t chunk,
                  int deflate, int64_t doc = 0, const std::string& tokenizer = "test") {
  H5File f = H5File::create(path);
  TokenWriter w(f, "/train", vocab, chunk, deflate);
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t i = 0; i < n; i += 37) {
    if (doc > 0 && i % doc < 37) w.start_document();
    w.append(tokens.data() + i, std::min<int64_t>(37, n - i));
  }
  w.finish();
  f.set_attr("/", "vocab_size", vocab);
  f.set_attr("/", "tokenizer", tokenizer);
}

// Bytes this process has read through read(2)-like calls (Linux /proc/self/io rchar).
int64_t rchar() {
  std::ifstream in("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (in >> key >> value)
    if (key == "rchar:") return value;
  ADD_FAILURE() << "no rchar in /proc/self/io";
  return -1;
}

}  // namespace

TEST_F(TokenStreaming, RoundTripTypesChunksAndDeflate) {
  struct Case {
    int64_t vocab, chunk;
    int deflate;
    const char* type;
  };
  for (const Case& c : {Case{300, 64, 0, "u16"}, Case{65536, 1000, 0, "u16"}, Case{70000, 128, 0, "u32"},
                        Case{300, 50, 6, "u16"}, Case{100000, 33, 4, "u32"}}) {
    const std::string path = file("t.h5");
    const std::vector<int32_t> tokens = pattern(5000, c.vocab);
    write_tokens(path, tokens, c.vocab, c.chunk, c.deflate);
    EXPECT_EQ(H5File::open_read(path).stored_type("/train/tokens"), c.type);
    const TokenDataset d = TokenDataset::open(path, "train");
    ASSERT_EQ(d.size(), 5000);
    EXPECT_EQ(d.bytes_read(), 0);
    EXPECT_EQ(d.read(0, 5000), tokens) << c.type << " chunk " << c.chunk << " deflate " << c.deflate;
    // Ranges inside one chunk and across chunk boundaries.
    for (int64_t start : {0, 1, 49, 63, 64, 999, 4990})
      EXPECT_EQ(d.read(start, 10), std::vector<int32_t>(tokens.begin() + start, tokens.begin() + start + 10));
  }
}

TEST_F(TokenStreaming, OpeningReadsMetadataOnlyAndReadsCostTheirWindow) {
  // Opening a file 8 times larger reads no more of it: metadata only, no token.
  std::vector<int64_t> opened;
  for (int64_t n : {int64_t{2} << 20, int64_t{16} << 20}) {  // 4 MiB and 32 MiB of uint16
    const std::string path = file("big" + std::to_string(n) + ".h5");
    write_tokens(path, pattern(n, 50000), 50000, int64_t{1} << 20, 0);
    const int64_t before = rchar();
    const TokenDataset d = TokenDataset::open(path, "train");
    const TokenLoader loader(d, 128, 8, 3, Sampling::epoch);
    opened.push_back(rchar() - before);
    EXPECT_EQ(d.bytes_read(), 0);
    EXPECT_EQ(d.reads(), 0);
    std::vector<int32_t> rows(8 * 129);
    loader.train_rows(5, 0, 8, rows.data());
    EXPECT_EQ(d.bytes_read(), 8 * 129 * 2);  // the rows' windows, two bytes a token, nothing more
    EXPECT_EQ(d.reads(), 8);
  }
  EXPECT_LE(opened[1], opened[0] + (64 << 10)) << "opening read " << opened[0] << " bytes of a 4 MiB file and "
                                                << opened[1] << " of a 32 MiB one";
}

TEST_F(TokenStreaming, LoaderRowsMatchTheSameTokensInMemory) {
  const std::string path = file("m.h5");
  const std::vector<int32_t> tokens = pattern(20011, 1000);
  write_tokens(path, tokens, 1000, 512, 0);
  TokenDataset mem;
  mem.path = "mem";
  mem.split = "train";
  mem.vocab_size = 1000;
  mem.tokens = tokens;
  const TokenDataset disk = TokenDataset::open(path, "train");
  for (Sampling s : {Sampling::random, Sampling::epoch}) {
    const TokenLoader a(mem, 31, 12, 7, s), b(disk, 31, 12, 7, s);
    std::vector<int32_t> ra(12 * 32), rb(12 * 32);
    for (int64_t step : {0, 1, 17, 400}) {
      a.train_rows(step, 0, 12, ra.data());
      b.train_rows(step, 0, 12, rb.data());
      EXPECT_EQ(ra, rb);
    }
    a.eval_rows(3, 2, 5, ra.data());
    b.eval_rows(3, 2, 5, rb.data());
    EXPECT_EQ(ra, rb);
  }
}

TEST_F(TokenStreaming, ShardsAreOneSequenceAndMustShareTheirVocabulary) {
  const std::vector<int32_t> all = pattern(3000, 500);
  fs::create_directories(dir_ / "shards");
  write_tokens(file("shards/shard_0.h5"), {all.begin(), all.begin() + 1000}, 500, 64, 0);
  write_tokens(file("shards/shard_1.h5"), {all.begin() + 1000, all.begin() + 1700}, 500, 64, 0);
  write_tokens(file("shards/shard_2.h5"), {all.begin() + 1700, all.end()}, 500, 100, 3);
  const TokenDataset d = TokenDataset::open(file("shards/shard_*.h5"), "train");
  ASSERT_EQ(d.parts.size(), 3u);
  EXPECT_EQ(d.size(), 3000);
  EXPECT_EQ(d.read(0, 3000), all);
  EXPECT_EQ(d.read(990, 720), std::vector<int32_t>(all.begin() + 990, all.begin() + 1710));  // spans all three

  write_tokens(file("shards/shard_3.h5"), pattern(100, 600), 600, 64, 0);
  try {
    TokenDataset::open(file("shards/shard_*.h5"), "train");
    ADD_FAILURE() << "shards of different vocabularies opened";
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("disagree on their vocabulary"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shard_3.h5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("600"), std::string::npos) << msg;
  }
  EXPECT_THROW(TokenDataset::open(file("nothing_*.h5"), "train"), tessera::Error);
}

TEST_F(TokenStreaming, DocumentOffsetsWrittenAndCheckedAtOpen) {
  const std::string path = file("docs.h5");
  write_tokens(path, pattern(1000, 100), 100, 64, 0, 111);  // documents start near every 111th token
  const H5File f = H5File::open_read(path);
  const std::vector<int64_t> offsets = f.read_i64("/train/doc_offsets", 0, f.shape("/train/doc_offsets")[0]);
  ASSERT_GE(offsets.size(), 5u);
  EXPECT_EQ(offsets[0], 0);
  for (size_t i = 1; i < offsets.size(); ++i) EXPECT_GT(offsets[i], offsets[i - 1]);
  EXPECT_LT(offsets.back(), 1000);

  // An offset past the last token: refused when opened, naming the dataset and the offset.
  const std::string bad = file("bad_offsets.h5");
  {
    H5File g = H5File::create(bad);
    tessera::Tensor tok = tessera::Tensor::zeros({100}, tessera::DType::u16);
    g.write("/tokens", tok);
    tessera::Tensor o = tessera::Tensor::empty({3}, tessera::DType::i32);
    o.data<int32_t>()[0] = 0;
    o.data<int32_t>()[1] = 40;
    o.data<int32_t>()[2] = 100;  // == size: past the last token
    g.write("/doc_offsets", o);
    g.set_attr("/", "vocab_size", 10);
  }
  try {
    TokenDataset::open(bad, "train");
    ADD_FAILURE() << "out-of-range /doc_offsets opened";
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/doc_offsets[2] = 100"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  }
}

TEST_F(TokenStreaming, BadTokenDeepInsideIsNamedWhenItsWindowIsRead) {
  const std::string path = file("deep.h5");
  std::vector<int32_t> tokens = pattern(200000, 1000);
  std::vector<int32_t> bad = tokens;
  bad[150001] = 5000;
  // Token 150001 is 5000: written under a wide vocabulary, then labelled with the small one.
  write_tokens(path, bad, 65536, 4096, 0);
  H5File::open_rw(path).set_attr("/", "vocab_size", 1000);
  const TokenDataset d = TokenDataset::open(path, "train");
  EXPECT_NO_THROW(d.read(0, 150001));
  try {
    d.read(149990, 100);
    ADD_FAILURE() << "the bad token was not found";
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    for (const std::string& w : {path, std::string("/train/tokens[150001] = 5000"), std::string("[0, 1000)")})
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

TEST(WindowPermutation, EveryElementOncePerEpoch) {
  for (int64_t n : {1, 2, 3, 5, 16, 17, 1000, 4097}) {
    const tessera::io::WindowPermutation p(n, 42, 7);
    for (int64_t epoch : {0, 1, 9}) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) ++seen[static_cast<size_t>(p.at(epoch, i))];
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n) << "n " << n << " epoch " << epoch;
    }
  }
  const tessera::io::WindowPermutation p(1000, 42, 7);
  int same = 0;
  for (int64_t i = 0; i < 1000; ++i) same += p.at(0, i) == p.at(1, i);
  EXPECT_LT(same, 20) << "epochs 0 and 1 should be different orders";
}

TEST_F(TokenStreaming, EpochSamplingVisitsEveryWindowOncePerEpoch) {
  const std::string path = file("e.h5");
  const int64_t seq = 15, windows = 103, n = windows * (seq + 1) + 7;  // 7 tokens left over
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), 0);
  write_tokens(path, tokens, n, 256, 0);
  const TokenDataset d = TokenDataset::open(path, "train");
  const int64_t batch = 8;
  const TokenLoader l(d, seq, batch, 5, Sampling::epoch);
  ASSERT_EQ(l.epoch_windows(), windows);
  // Three epochs of samples (batches straddle epochs): each epoch's windows are all of them, once.
  std::vector<std::set<int64_t>> per_epoch(3);
  std::vector<int32_t> rows(static_cast<size_t>(batch * (seq + 1)));
  for (int64_t step = 0; step * batch < 3 * windows; ++step) {
    l.train_rows(step, 0, batch, rows.data());
    for (int64_t r = 0; r < batch; ++r) {
      const int64_t sample = step * batch + r;
      if (sample >= 3 * windows) break;
      const int32_t first = rows[static_cast<size_t>(r * (seq + 1))];
      ASSERT_EQ(first % (seq + 1), 0) << "a window starts at a multiple of seq + 1";
      for (int64_t k = 0; k <= seq; ++k) ASSERT_EQ(rows[static_cast<size_t>(r * (seq + 1) + k)], first + k);
      EXPECT_TRUE(per_epoch[static_cast<size_t>(sample / windows)].insert(first / (seq + 1)).second)
          << "window " << first / (seq + 1) << " twice in epoch " << sample / windows;
    }
  }
  for (const auto& e : per_epoch) EXPECT_EQ(static_cast<int64_t>(e.size()), windows);
  // Any split of the rows gives the global batch's rows.
  std::vector<int32_t> whole(rows.size()), part(rows.size());
  l.train_rows(40, 0, batch, whole.data());
  l.train_rows(40, 0, 3, part.data());
  l.train_rows(40, 3, 5, part.data() + 3 * (seq + 1));
  EXPECT_EQ(whole, part);
  EXPECT_EQ(tessera::io::parse_sampling("epoch"), Sampling::epoch);
  EXPECT_THROW(tessera::io::parse_sampling("shuffle"), tessera::Error);
}

TEST(TokenPrefetcher, StepsInOrderAndErrorsAtTheirStep) {
  tessera::io::TokenPrefetcher p(
      [](int64_t step, int32_t* out) {
        if (step == 6) tessera::fail("step 6 cannot be read");
        for (int i = 0; i < 4; ++i) out[i] = static_cast<int32_t>(step * 10 + i);
      },
      2, 4, 2);
  for (int64_t step = 2; step < 6; ++step) {
    EXPECT_EQ(p.next_step(), step);
    const tessera::io::TokenBatch& b = p.next();
    EXPECT_EQ(b.step, step);
    EXPECT_EQ(b.tokens, (std::vector<int32_t>{static_cast<int32_t>(step * 10), static_cast<int32_t>(step * 10 + 1),
                                              static_cast<int32_t>(step * 10 + 2), static_cast<int32_t>(step * 10 + 3)}));
  }
  EXPECT_THROW(p.next(), tessera::Error);
  EXPECT_THROW(p.next(), tessera::Error);  // again, not a hang
}
