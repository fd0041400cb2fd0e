// Unit tests of io::TokenDataset: the layouts it accepts (split groups, a single /tokens,
// attributes on group or root) and every validation error, each naming the file and dataset.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/hdf5_file.h"
#include "io/token_dataset.h"

namespace fs = std::filesystem;
using tessera::DType;
using tessera::Tensor;
using tessera::io::H5File;
using tessera::io::TokenDataset;

namespace {

class TokenDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_io_tokens_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

Tensor u16_tokens(std::initializer_list<int> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::u16);
  int64_t i = 0;
  for (int v : values) t.data<uint16_t>()[i++] = static_cast<uint16_t>(v);
  return t;
}

Tensor i32_tokens(std::initializer_list<int> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::i32);
  int64_t i = 0;
  for (int v : values) t.data<int32_t>()[i++] = v;
  return t;
}

// Expects TokenDataset::open(path, split) to fail with a message holding all of `words`.
void expect_open_error(const std::string& path, const std::string& split,
                       std::initializer_list<std::string> words) {
  try {
    TokenDataset::open(path, split);
    ADD_FAILURE() << "expected an error opening " << path;
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

// Opening reads no token; reading them all fails with a message holding all of `words`.
void expect_read_error(const std::string& path, const std::string& split, std::initializer_list<std::string> words) {
  const TokenDataset d = TokenDataset::open(path, split);
  EXPECT_EQ(d.bytes_read(), 0) << "opening read tokens";
  try {
    d.read(0, d.size());
    ADD_FAILURE() << "expected an error reading " << path;
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

}  // namespace

TEST_F(TokenDatasetTest, SplitGroupsWithRootAttributes) {
  const std::string path = file("d.h5");
  {
    H5File f = H5File::create(path);
    f.write("/train/tokens", u16_tokens({1, 2, 3, 4, 5}));
    f.write("/val/tokens", u16_tokens({9, 8}));
    f.set_attr("/", "vocab_size", 10);
    f.set_attr("/", "tokenizer", "bytes");
    f.set_attr("/", "entropy_rate", 1.25);
  }
  const TokenDataset train = TokenDataset::open(path, "train");
  EXPECT_EQ(train.path, path);
  EXPECT_EQ(train.split, "train");
  EXPECT_EQ(train.dataset, "/train/tokens");
  EXPECT_EQ(train.vocab_size, 10);
  EXPECT_EQ(train.tokenizer, "bytes");
  ASSERT_TRUE(train.entropy_rate.has_value());
  EXPECT_DOUBLE_EQ(*train.entropy_rate, 1.25);
  EXPECT_EQ(train.read(0, train.size()), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  const TokenDataset val = TokenDataset::open(path, "val");
  EXPECT_EQ(val.read(0, val.size()), (std::vector<int32_t>{9, 8}));
}

TEST_F(TokenDatasetTest, GroupAttributesTakePrecedence) {
  const std::string path = file("g.h5");
  {
    H5File f = H5File::create(path);
    f.write("/train/tokens", i32_tokens({100, 200}));
    f.set_attr("/train", "vocab_size", 1000);
    f.set_attr("/train", "tokenizer", "gpt2");
    f.set_attr("/", "vocab_size", 50);  // would reject the tokens if it were used
    f.set_attr("/", "tokenizer", "root");
  }
  const TokenDataset d = TokenDataset::open(path, "train");
  EXPECT_EQ(d.vocab_size, 1000);
  EXPECT_EQ(d.tokenizer, "gpt2");
  EXPECT_FALSE(d.entropy_rate.has_value());
}

TEST_F(TokenDatasetTest, SingleTokensDatasetServesAnySplit) {
  const std::string path = file("one.h5");
  {
    H5File f = H5File::create(path);
    f.write("/tokens", i32_tokens({0, 1, 2}));
    f.write("/doc_offsets", i32_tokens({0, 2}));
    f.set_attr("/", "vocab_size", 3);
    f.set_attr("/", "tokenizer", "t");
  }
  EXPECT_EQ(TokenDataset::open(path, "val").dataset, "/tokens");
  EXPECT_EQ(TokenDataset::open(path, "train").size(), 3);
}

TEST_F(TokenDatasetTest, MissingFile) {
  const std::string path = file("nope.h5");
  expect_open_error(path, "train", {path, "no such file"});
}

TEST_F(TokenDatasetTest, NotHdf5) {
  const std::string path = file("text.h5");
  std::ofstream(path) << "plain text, not a hierarchical data format file at all......................";
  expect_open_error(path, "train", {path, "not an HDF5 file"});
}

TEST_F(TokenDatasetTest, UnknownSplit) {
  const std::string path = file("s.h5");
  H5File::create(path).write("/tokens", u16_tokens({1}));
  expect_open_error(path, "test", {"split", "test"});
}

TEST_F(TokenDatasetTest, MissingTokensNamesPathsTried) {
  const std::string path = file("m.h5");
  {
    H5File f = H5File::create(path);
    f.write("/train/tokens", u16_tokens({1, 2}));
    f.set_attr("/", "vocab_size", 10);
  }
  expect_open_error(path, "val", {path, "/val/tokens", "/tokens", "tried"});
}

TEST_F(TokenDatasetTest, TokensIsAGroup) {
  const std::string path = file("grp.h5");
  {
    H5File f = H5File::create(path);
    f.write("/tokens/inner", u16_tokens({1, 2}));
    f.set_attr("/", "vocab_size", 10);
  }
  expect_open_error(path, "train", {path, "/tokens", "not a dataset"});
}

TEST_F(TokenDatasetTest, WrongRank) {
  const std::string path = file("r.h5");
  {
    H5File f = H5File::create(path);
    f.write("/tokens", Tensor::zeros({2, 3}, DType::i32));
    f.set_attr("/", "vocab_size", 10);
  }
  expect_open_error(path, "train", {path, "/tokens", "1-D", "[2, 3]"});
}

TEST_F(TokenDatasetTest, WrongDtypeIsNamed) {
  const std::string path = file("t.h5");
  {
    H5File f = H5File::create(path);
    f.write("/tokens", Tensor::zeros({4}, DType::f32));
    f.set_attr("/", "vocab_size", 10);
  }
  expect_open_error(path, "train", {path, "/tokens", "uint16 or int32", "f32"});
  const std::string path64 = file("t64.h5");
  {
    hid_t fid = H5Fcreate(path64.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 2;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(fid, "tokens", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const int64_t v[2] = {1, 2};
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(fid);
    H5File::open_rw(path64).set_attr("/", "vocab_size", 10);
  }
  expect_open_error(path64, "train", {path64, "/tokens", "i64"});
}

TEST_F(TokenDatasetTest, MissingVocabSize) {
  const std::string path = file("v.h5");
  H5File::create(path).write("/train/tokens", u16_tokens({1, 2}));
  expect_open_error(path, "train", {path, "vocab_size", "/train", "/"});
}

TEST_F(TokenDatasetTest, InvalidVocabSize) {
  const std::string path = file("v0.h5");
  {
    H5File f = H5File::create(path);
    f.write("/tokens", u16_tokens({1, 2}));
    f.set_attr("/", "vocab_size", 0);
  }
  expect_open_error(path, "train", {path, "invalid vocab_size", "0"});
  const std::string spath = file("vs.h5");
  {
    H5File f = H5File::create(spath);
    f.write("/tokens", u16_tokens({1, 2}));
    f.set_attr("/", "vocab_size", "fifty");
  }
  expect_open_error(spath, "train", {spath, "vocab_size", "string"});
}

TEST_F(TokenDatasetTest, TokenOutOfRangeReportedWhenRead) {
  const std::string path = file("o.h5");
  {
    H5File f = H5File::create(path);
    f.write("/train/tokens", u16_tokens({1, 2, 3, 300, 4, 500}));
    f.set_attr("/", "vocab_size", 256);
  }
  expect_read_error(path, "train", {path, "/train/tokens", "[3]", "300", "256"});
  const std::string neg = file("neg.h5");
  {
    H5File f = H5File::create(neg);
    f.write("/tokens", i32_tokens({0, 5, -1, 2}));
    f.set_attr("/", "vocab_size", 10);
  }
  expect_read_error(neg, "val", {neg, "/tokens", "[2]", "-1"});
  const std::string edge = file("edge.h5");
  {
    H5File f = H5File::create(edge);
    f.write("/tokens", i32_tokens({0, 9, 10}));  // 10 == vocab_size is outside
    f.set_attr("/", "vocab_size", 10);
  }
  expect_read_error(edge, "train", {edge, "[2]", "10"});
}

TEST_F(TokenDatasetTest, EmptyDataset) {
  const std::string path = file("e.h5");
  {
    H5File f = H5File::create(path);
    f.write("/train/tokens", Tensor::empty({0}, DType::u16));
    f.set_attr("/", "vocab_size", 10);
  }
  expect_open_error(path, "train", {path, "/train/tokens", "empty"});
}
