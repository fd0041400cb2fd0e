// Unit tests of the loss mask in token data (io/token_writer.h, io/token_dataset.h,
// io/token_loader.h): written beside the tokens and read back, its checks (length, type, values,
// shards), and the loader's mask rows following its token rows under random, epoch and blended
// sampling, with the global batch's count of counted targets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"
#include "io/token_loader.h"
#include "io/token_writer.h"

namespace fs = std::filesystem;
using tessera::DType;
using tessera::Tensor;
using tessera::io::H5File;
using tessera::io::TokenDataset;
using tessera::io::TokenLoader;
using tessera::io::TokenWriter;

namespace {

class LossMaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_loss_mask_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Tokens i % vocab with mask 1 exactly on the odd tokens: a row's mask can be checked from its tokens.
void write_masked(const std::string& path, int64_t n, int64_t vocab, int64_t chunk = 7) {
  H5File f = H5File::create(path);
  TokenWriter w(f, "/train", vocab, chunk, 0, true);
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  for (int64_t i = 0; i < n; ++i) {
    tokens.push_back(static_cast<int32_t>(i % vocab));
    mask.push_back(static_cast<uint8_t>((i % vocab) % 2));
  }
  w.start_document();
  w.append(tokens.data(), mask.data(), n);
  w.finish();
  f.set_attr("/", "vocab_size", vocab);
}

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> words) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

// Every row's mask value is its token's parity.
void expect_rows_match(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask) {
  ASSERT_EQ(tokens.size(), mask.size());
  for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(mask[i], tokens[i] % 2) << "value " << i;
}

TEST_F(LossMaskTest, WrittenBesideTheTokensAndReadBack) {
  write_masked(file("m.h5"), 50, 13);
  const H5File f = H5File::open_read(file("m.h5"));
  EXPECT_EQ(f.stored_type("/train/loss_mask"), "u8");
  const TokenDataset d = TokenDataset::open(file("m.h5"), "train");
  ASSERT_TRUE(d.has_mask());
  std::vector<uint8_t> m(20);
  d.read_mask(15, 20, m.data());
  expect_rows_match(d.read(15, 20), m);
}

TEST_F(LossMaskTest, WriterRefusesValuesOtherThanZeroAndOne) {
  H5File f = H5File::create(file("bad.h5"));
  TokenWriter w(f, "/train", 10, 4, 0, true);
  const int32_t t[2] = {1, 2};
  const uint8_t m[2] = {1, 2};
  expect_error([&] { w.append(t, m, 2); }, {"loss_mask", "value 1 = 2", "not 0 or 1"});
  expect_error([&] { w.append(t, 2); }, {"has a loss mask"});
}

TEST_F(LossMaskTest, LengthTypeAndShardsAreChecked) {
  {
    H5File f = H5File::create(file("short.h5"));
    Tensor t = Tensor::empty({6}, DType::u16), m = Tensor::zeros({5}, DType::u8);
    for (int i = 0; i < 6; ++i) t.data<uint16_t>()[i] = static_cast<uint16_t>(i);
    f.write("/train/tokens", t);
    f.write("/train/loss_mask", m);
    f.set_attr("/", "vocab_size", int64_t{8});
  }
  expect_error([&] { TokenDataset::open(file("short.h5"), "train"); },
               {"short.h5", "/train/loss_mask has 5 values", "/train/tokens has 6 tokens", "one value per token"});
  {
    H5File f = H5File::create(file("wide.h5"));
    Tensor t = Tensor::zeros({6}, DType::u16), m = Tensor::zeros({6}, DType::i32);
    f.write("/train/tokens", t);
    f.write("/train/loss_mask", m);
    f.set_attr("/", "vocab_size", int64_t{8});
  }
  expect_error([&] { TokenDataset::open(file("wide.h5"), "train"); }, {"wide.h5", "loss_mask must be 1-D uint8", "i32"});
  {
    H5File f = H5File::create(file("two.h5"));
    Tensor t = Tensor::zeros({6}, DType::u16), m = Tensor::zeros({6}, DType::u8);
    m.data<uint8_t>()[4] = 2;
    f.write("/train/tokens", t);
    f.write("/train/loss_mask", m);
    f.set_attr("/", "vocab_size", int64_t{8});
  }
  const TokenDataset two = TokenDataset::open(file("two.h5"), "train");
  std::vector<uint8_t> out(6);
  expect_error([&] { two.read_mask(0, 6, out.data()); }, {"two.h5", "/train/loss_mask[4] = 2"});
  // Shards: all with a mask or none.
  fs::create_directories(dir_ / "shards");
  write_masked(file("shards/a.h5"), 30, 13);
  {
    H5File f = H5File::create(file("shards/b.h5"));
    TokenWriter w(f, "/train", 13, 7);
    w.append(std::vector<int32_t>(30, 1));
    w.finish();
    f.set_attr("/", "vocab_size", int64_t{13});
  }
  expect_error([&] { TokenDataset::open(file("shards/*.h5"), "train"); }, {"disagree on the loss mask", "b.h5"});
}

TEST_F(LossMaskTest, LoaderMaskRowsFollowTheTokenRows) {
  write_masked(file("m.h5"), 400, 13);
  const TokenDataset d = TokenDataset::open(file("m.h5"), "train");
  const int64_t seq = 9, batch = 4, row = seq + 1;
  for (const auto sampling : {tessera::io::Sampling::random, tessera::io::Sampling::epoch}) {
    const TokenLoader loader(d, seq, batch, 17, sampling);
    ASSERT_TRUE(loader.has_mask());
    for (int64_t step = 0; step < 12; ++step) {
      std::vector<int32_t> tokens(batch * row);
      std::vector<uint8_t> mask(batch * row);
      loader.train_rows(step, 1, 3, tokens.data());
      loader.train_mask(step, 1, 3, mask.data());
      tokens.resize(3 * row);
      mask.resize(3 * row);
      expect_rows_match(tokens, mask);
      // The count: odd targets over the whole global batch.
      std::vector<int32_t> all(batch * row);
      loader.train_rows(step, 0, batch, all.data());
      int64_t odd = 0;
      for (int64_t r = 0; r < batch; ++r)
        for (int64_t t = 1; t < row; ++t) odd += all[r * row + t] % 2;
      EXPECT_EQ(loader.train_mask_count(step), odd);
    }
    std::vector<int32_t> tokens(2 * row);
    std::vector<uint8_t> mask(2 * row);
    loader.eval_rows(1, 2, 2, tokens.data());
    loader.eval_mask(1, 2, 2, mask.data());
    expect_rows_match(tokens, mask);
  }
}

TEST_F(LossMaskTest, BlendSourcesWithoutAMaskCountEveryToken) {
  write_masked(file("masked.h5"), 300, 13);
  {
    H5File f = H5File::create(file("plain.h5"));
    TokenWriter w(f, "/train", 13, 7);
    w.append(std::vector<int32_t>(300, 2));  // even tokens: the parity rule would give 0
    w.finish();
    f.set_attr("/", "vocab_size", int64_t{13});
  }
  const std::vector<tessera::io::BlendSource> sources{{file("masked.h5"), 0.5}, {file("plain.h5"), 0.5}};
  const std::vector<TokenDataset> data{TokenDataset::open(file("masked.h5"), "train"),
                                       TokenDataset::open(file("plain.h5"), "train")};
  const int64_t seq = 5, batch = 6, row = seq + 1;
  const TokenLoader loader(sources, data, seq, batch, 3);
  ASSERT_TRUE(loader.has_mask());
  int64_t plain_rows = 0;
  for (int64_t step = 0; step < 6; ++step) {
    std::vector<int32_t> tokens(batch * row);
    std::vector<uint8_t> mask(batch * row);
    loader.train_rows(step, 0, batch, tokens.data());
    loader.train_mask(step, 0, batch, mask.data());
    int64_t count = 0;
    for (int64_t r = 0; r < batch; ++r) {
      const bool plain = loader.train_source(step, r) == 1;
      plain_rows += plain;
      for (int64_t t = 0; t < row; ++t) {
        const size_t i = static_cast<size_t>(r * row + t);
        ASSERT_EQ(mask[i], plain ? 1 : tokens[i] % 2) << "step " << step << " row " << r << " position " << t;
        if (t > 0) count += mask[i];
      }
    }
    EXPECT_EQ(loader.train_mask_count(step), count);
  }
  EXPECT_GT(plain_rows, 0);
}

TEST_F(LossMaskTest, WithoutAMaskTheCountIsEveryTarget) {
  {
    H5File f = H5File::create(file("plain.h5"));
    TokenWriter w(f, "/train", 13, 7);
    w.append(std::vector<int32_t>(100, 2));
    w.finish();
    f.set_attr("/", "vocab_size", int64_t{13});
  }
  const TokenLoader loader(TokenDataset::open(file("plain.h5"), "train"), 5, 3, 1);
  EXPECT_FALSE(loader.has_mask());
  EXPECT_EQ(loader.train_mask_count(4), 15);
  EXPECT_EQ(loader.eval_mask_count(2), 30);
}

}  // namespace
