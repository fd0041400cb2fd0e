// Unit tests of io::H5File: tensor round trips of every dtype, conversions, attributes, has/list,
// and the errors for missing files, objects and attributes.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/hdf5_file.h"

namespace fs = std::filesystem;
using tessera::DType;
using tessera::Shape;
using tessera::Tensor;
using tessera::io::H5File;

namespace {

// A fresh directory per test, removed afterwards.
class H5FileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tessera_io_h5_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Runs f, expecting a tessera::Error whose message contains every one of `words`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> words) {
  try {
    f();
    ADD_FAILURE() << "expected a tessera::Error";
  } catch (const tessera::Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

template <typename T>
Tensor make(Shape shape, DType dtype, T (*value)(int64_t)) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<T*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value(i);
  return t;
}

}  // namespace

TEST_F(H5FileTest, RoundTripEachDtype) {
  const std::string path = file("a.h5");
  const Tensor f32 = make<float>({2, 3}, DType::f32, [](int64_t i) { return 0.5f * i - 1.25f; });
  const Tensor i32 = make<int32_t>({5}, DType::i32, [](int64_t i) { return int32_t(i * 1000 - 7); });
  const Tensor u16 = make<uint16_t>({4, 2}, DType::u16, [](int64_t i) { return uint16_t(65535 - i); });
  const Tensor u8 = make<uint8_t>({3, 1, 2}, DType::u8, [](int64_t i) { return uint8_t(i * 40); });
  // f16 bits of 1.0, -2.0, 0.5, 65504; bf16 bits of 1.0, -2.0, 3.0.
  Tensor f16 = Tensor::empty({4}, DType::f16);
  const uint16_t f16_bits[] = {0x3c00, 0xc000, 0x3800, 0x7bff};
  std::copy(f16_bits, f16_bits + 4, f16.bits16());
  Tensor bf16 = Tensor::empty({3}, DType::bf16);
  const uint16_t bf16_bits[] = {0x3f80, 0xc000, 0x4040};
  std::copy(bf16_bits, bf16_bits + 3, bf16.bits16());
  {
    H5File f = H5File::create(path);
    f.write("/f32", f32);
    f.write("/deep/group/i32", i32);
    f.write("u16", u16);
    f.write("/u8", u8);
    f.write("/f16", f16);
    f.write("/bf16", bf16);
  }
  H5File f = H5File::open_read(path);
  EXPECT_EQ(f.dtype("/f32"), DType::f32);
  EXPECT_EQ(f.dtype("/deep/group/i32"), DType::i32);
  EXPECT_EQ(f.dtype("/u16"), DType::u16);
  EXPECT_EQ(f.dtype("/u8"), DType::u8);
  EXPECT_EQ(f.dtype("/f16"), DType::f16);
  EXPECT_EQ(f.dtype("/bf16"), DType::bf16);
  EXPECT_EQ(f.shape("/u8"), (std::vector<int64_t>{3, 1, 2}));
  for (const auto& [name, t] : std::vector<std::pair<std::string, Tensor>>{
           {"/f32", f32}, {"/deep/group/i32", i32}, {"/u16", u16}, {"/u8", u8}, {"/f16", f16}, {"/bf16", bf16}}) {
    const Tensor back = f.read(name, t.dtype());
    EXPECT_EQ(back.shape(), t.shape()) << name;
    EXPECT_EQ(back.dtype(), t.dtype()) << name;
    EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0) << name;
  }
}

TEST_F(H5FileTest, ConvertsOnRead) {
  const std::string path = file("c.h5");
  {
    H5File f = H5File::create(path);
    f.write("/i", make<int32_t>({4}, DType::i32, [](int64_t i) { return int32_t(i + 1); }));
    Tensor f16 = Tensor::empty({2}, DType::f16);
    f16.bits16()[0] = 0x3c00;  // 1.0
    f16.bits16()[1] = 0xc100;  // -2.5
    f.write("/h", f16);
    Tensor bf = Tensor::empty({2}, DType::bf16);
    bf.bits16()[0] = 0x3fc0;  // 1.5
    bf.bits16()[1] = 0xc040;  // -3.0
    f.write("/b", bf);
    f.write("/x", make<float>({2}, DType::f32, [](int64_t i) { return i == 0 ? 1.0f : 3.0f; }));
  }
  H5File f = H5File::open_read(path);
  const Tensor as_f32 = f.read("/i", DType::f32);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(as_f32.data<float>()[i], float(i + 1));
  const Tensor as_u8 = f.read("/i", DType::u8);
  EXPECT_EQ(as_u8.data<uint8_t>()[3], 4);
  const Tensor h = f.read("/h", DType::f32);
  EXPECT_EQ(h.data<float>()[0], 1.0f);
  EXPECT_EQ(h.data<float>()[1], -2.5f);
  const Tensor b = f.read("/b", DType::f32);
  EXPECT_EQ(b.data<float>()[0], 1.5f);
  EXPECT_EQ(b.data<float>()[1], -3.0f);
  const Tensor b_i32 = f.read("/b", DType::i32);
  EXPECT_EQ(b_i32.data<int32_t>()[1], -3);
  const Tensor x_bf = f.read("/x", DType::bf16);
  EXPECT_EQ(x_bf.bits16()[0], 0x3f80);
  EXPECT_EQ(x_bf.bits16()[1], 0x4040);
  const Tensor x_h = f.read("/x", DType::f16);
  EXPECT_EQ(x_h.bits16()[0], 0x3c00);
  EXPECT_EQ(x_h.bits16()[1], 0x4200);
}

TEST_F(H5FileTest, ReadIntoChecksShape) {
  const std::string path = file("r.h5");
  H5File f = H5File::create(path);
  f.write("/w", make<float>({2, 2}, DType::f32, [](int64_t i) { return float(i); }));
  Tensor out = Tensor::zeros({2, 2}, DType::f32);
  f.read_into("/w", out);
  EXPECT_EQ(out.data<float>()[3], 3.0f);
  Tensor as_int = Tensor::zeros({2, 2}, DType::i32);
  f.read_into("/w", as_int);
  EXPECT_EQ(as_int.data<int32_t>()[2], 2);
  Tensor wrong = Tensor::zeros({4}, DType::f32);
  expect_error([&] { f.read_into("/w", wrong); }, {path, "/w", "[2, 2]", "[4]"});
}

TEST_F(H5FileTest, ScalarAndEmptyTensors) {
  const std::string path = file("s.h5");
  H5File f = H5File::create(path);
  Tensor scalar = Tensor::empty(Shape{}, DType::f32);
  *scalar.data<float>() = 42.0f;
  f.write("/scalar", scalar);
  f.write("/empty", Tensor::empty({0, 3}, DType::i32));
  EXPECT_TRUE(f.shape("/scalar").empty());
  EXPECT_EQ(*f.read("/scalar", DType::f32).data<float>(), 42.0f);
  EXPECT_EQ(f.shape("/empty"), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(f.read("/empty", DType::i32).numel(), 0);
}

TEST_F(H5FileTest, Attributes) {
  const std::string path = file("attr.h5");
  {
    H5File f = H5File::create(path);
    f.write("/g/d", make<uint8_t>({1}, DType::u8, [](int64_t) { return uint8_t(1); }));
    f.set_attr("/", "step", int64_t{1234567890123});
    f.set_attr("/", "lr", 3e-4);
    f.set_attr("/", "name", std::string("gpt-tiny"));
    f.set_attr("/", "empty", std::string());
    f.set_attr("/g", "n", 7);
    f.set_attr("/g/d", "kind", "weights");
    f.set_attr("/", "step", int64_t{5});  // replaces
  }
  H5File f = H5File::open_read(path);
  EXPECT_EQ(f.attr_int("/", "step"), 5);
  EXPECT_DOUBLE_EQ(f.attr_double("/", "lr"), 3e-4);
  EXPECT_DOUBLE_EQ(f.attr_double("/", "step"), 5.0);  // integers read as doubles
  EXPECT_EQ(f.attr_string("/", "name"), "gpt-tiny");
  EXPECT_EQ(f.attr_string("/", "empty"), "");
  EXPECT_EQ(f.attr_int("/g", "n"), 7);
  EXPECT_EQ(f.attr_string("/g/d", "kind"), "weights");
  EXPECT_TRUE(f.has_attr("/", "lr"));
  EXPECT_FALSE(f.has_attr("/", "nope"));
  EXPECT_FALSE(f.has_attr("/missing", "lr"));
  expect_error([&] { f.attr_int("/", "nope"); }, {path, "/", "nope"});
  expect_error([&] { f.attr_int("/missing/obj", "k"); }, {path, "/missing/obj", "k"});
  expect_error([&] { f.attr_int("/", "name"); }, {path, "name", "string", "integer"});
  expect_error([&] { f.attr_string("/", "lr"); }, {path, "lr", "f64", "string"});
}

TEST_F(H5FileTest, FixedLengthStringAttribute) {
  // Files written by other tools (h5py's np.bytes_) store fixed-length strings.
  const std::string path = file("fixed.h5");
  {
    hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 5);
    H5Tset_strpad(type, H5T_STR_NULLPAD);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, "tokenizer", type, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, type, "bytes");
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
  }
  EXPECT_EQ(H5File::open_read(path).attr_string("/", "tokenizer"), "bytes");
}

TEST_F(H5FileTest, HasAndList) {
  const std::string path = file("l.h5");
  H5File f = H5File::create(path);
  f.write("/params/b", Tensor::zeros({1}));
  f.write("/params/a", Tensor::zeros({1}));
  f.write("/optim/a/exp_avg", Tensor::zeros({1}));
  EXPECT_TRUE(f.has("/"));
  EXPECT_TRUE(f.has("/params"));
  EXPECT_TRUE(f.has("/params/a"));
  EXPECT_TRUE(f.has("/optim/a/exp_avg"));
  EXPECT_FALSE(f.has("/params/c"));
  EXPECT_FALSE(f.has("/nope/a/b"));
  EXPECT_FALSE(f.has("/params/a/child"));  // a dataset has no children
  EXPECT_EQ(f.list("/"), (std::vector<std::string>{"optim", "params"}));
  EXPECT_EQ(f.list("/params"), (std::vector<std::string>{"a", "b"}));
  expect_error([&] { f.list("/params/a"); }, {path, "/params/a", "not a group"});
  expect_error([&] { f.list("/missing"); }, {path, "/missing"});
}

TEST_F(H5FileTest, ObjectErrors) {
  const std::string path = file("e.h5");
  H5File f = H5File::create(path);
  f.write("/d", Tensor::zeros({2}));
  expect_error([&] { f.write("/d", Tensor::zeros({2})); }, {path, "/d", "exists"});
  expect_error([&] { f.read("/missing", DType::f32); }, {path, "/missing"});
  expect_error([&] { f.shape("/a/b/c"); }, {path, "/a/b/c"});
  expect_error([&] { f.dtype("/"); }, {path, "group"});
  expect_error([&] { f.set_attr("/nope", "k", 1.0); }, {path, "/nope"});
}

TEST_F(H5FileTest, UnsupportedStoredTypeIsNamed) {
  const std::string path = file("t.h5");
  {
    hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 3;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(file, "x", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const double v[3] = {1.5, 2.5, -1};
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(file);
  }
  H5File f = H5File::open_read(path);
  expect_error([&] { f.dtype("/x"); }, {path, "/x", "f64"});
  const Tensor t = f.read("/x", DType::f32);  // numeric types still convert
  EXPECT_EQ(t.data<float>()[1], 2.5f);
}

TEST_F(H5FileTest, OpenErrors) {
  const std::string missing = file("missing.h5");
  expect_error([&] { H5File::open_read(missing); }, {missing, "no such file"});
  const std::string text = file("text.h5");
  std::ofstream(text) << "this is not an HDF5 file, just some text that is long enough to look like one";
  expect_error([&] { H5File::open_read(text); }, {text, "not an HDF5 file"});
  const std::string empty = file("empty.h5");
  std::ofstream(empty).close();
  expect_error([&] { H5File::open_read(empty); }, {empty, "not an HDF5 file"});
  const std::string nodir = file("nodir/x.h5");
  expect_error([&] { H5File::create(nodir); }, {nodir, "does not exist"});

  // A truncated file: a real HDF5 file cut short.
  const std::string good = file("good.h5");
  {
    H5File f = H5File::create(good);
    f.write("/big", Tensor::zeros({4096}));
    f.set_attr("/", "vocab_size", 10);
  }
  const std::string cut = file("cut.h5");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) / 2);
  expect_error([&] {
    H5File f = H5File::open_read(cut);
    f.read("/big", DType::f32);
  }, {cut});
  try {
    H5File::open_read(cut);
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST_F(H5FileTest, MoveAndReopen) {
  const std::string path = file("m.h5");
  H5File a = H5File::create(path);
  a.write("/x", Tensor::zeros({3}));
  a.flush();
  H5File b = std::move(a);
  EXPECT_EQ(b.path(), path);
  b.set_attr("/x", "k", 1);
  b = H5File::open_rw(path);  // closes the first handle
  b.write("/y", Tensor::zeros({1}));
  EXPECT_TRUE(b.has("/x"));
  EXPECT_EQ(b.attr_int("/x", "k"), 1);
}
