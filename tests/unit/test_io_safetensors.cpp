// io::SafetensorsFile / write_safetensors / SafetensorsFolder: round trips in F32, F16 and BF16,
// the conversions' rounding, sharding with an index, and each malformed header refused with a
// message naming the tensor and the file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_folder.h"

namespace {
namespace fs = std::filesystem;
using namespace tessera::io;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_st_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A file of the 8-byte length, `header` and `data` bytes of data.
  std::string raw(const std::string& name, const std::string& header, size_t data, int64_t length = -1) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = length >= 0 ? static_cast<uint64_t>(length) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << std::string(data, '\0');
    return p;
  }
  // The message of the error opening `p` ("" if it opened).
  static std::string error_of(const std::string& p) {
    try {
      SafetensorsFile f(p);
    } catch (const tessera::Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(Safetensors, RoundTripsEveryDtype) {
  const std::vector<float> v = {1.0f, -2.5f, 3.140625f, 0.0f, -0.0f, 65504.0f};
  std::vector<StWriteTensor> ts;
  for (StDtype d : {StDtype::f32, StDtype::f16, StDtype::bf16})
    ts.push_back({std::string("t_") + st_dtype_name(d), d, {2, 3}, st_encode(v.data(), 6, d)});
  ts.push_back({"empty", StDtype::f32, {0, 4}, {}});
  write_safetensors(path("a.safetensors"), ts, {{"format", "pt"}});
  const SafetensorsFile f(path("a.safetensors"));
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  for (StDtype d : {StDtype::f32, StDtype::f16, StDtype::bf16}) {
    const StTensor* t = f.find(std::string("t_") + st_dtype_name(d));
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, d);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    const std::vector<float> back = f.read_f32(*t);
    for (size_t i = 0; i < v.size(); ++i)
      if (d != StDtype::bf16 || i != 5) { EXPECT_EQ(back[i], v[i]) << st_dtype_name(d) << " element " << i; }
    EXPECT_EQ(std::signbit(back[4]), true);
  }
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_TRUE(f.read_f32(*f.find("empty")).empty());  // no buffer to copy into (the fuzzer's first find)
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_THROW(write_safetensors(path("a.safetensors"), ts, {}), tessera::Error);  // never overwritten
}

TEST_F(Safetensors, NarrowingRoundsToNearestEvenAndWideningIsExact) {
  // bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1); just above rounds up.
  const float up = std::nextafter(1.0f + 1.0f / 256, 2.0f);
  const std::vector<float> v = {1.0f + 1.0f / 256, up, std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(), 1e-7f, 70000.0f};
  std::vector<float> b(v.size()), h(v.size());
  st_decode(st_encode(v.data(), 6, StDtype::bf16).data(), 6, StDtype::bf16, b.data());
  st_decode(st_encode(v.data(), 6, StDtype::f16).data(), 6, StDtype::f16, h.data());
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], 1.0f + 1.0f / 128);
  EXPECT_TRUE(std::isnan(b[2]) && std::isnan(h[2]));
  EXPECT_TRUE(std::isinf(b[3]) && std::isinf(h[3]));
  EXPECT_EQ(h[4], std::ldexp(2.0f, -24));  // 1e-7 is nearest to the subnormal 2 x 2^-24
  EXPECT_TRUE(std::isinf(h[5]));           // past f16's largest
  // Every f16 bit pattern survives widening and narrowing unchanged (NaNs stay NaNs).
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint8_t in[2] = {static_cast<uint8_t>(bits & 0xff), static_cast<uint8_t>(bits >> 8)};
    float x;
    st_decode(in, 1, StDtype::f16, &x);
    const std::vector<uint8_t> out = st_encode(&x, 1, StDtype::f16);
    if (std::isnan(x)) continue;
    ASSERT_EQ(out[0] | (out[1] << 8), static_cast<int>(bits)) << "f16 bits " << bits;
  }
}

TEST_F(Safetensors, RefusesMalformedHeadersNamingTensorAndFile) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(error_of(raw("ok.st", ok, 8)), "");
  struct Case {
    std::string name, header, expect;
    size_t data;
    int64_t length = -1;
  };
  const std::vector<Case> cases = {
      {"short", "", "shorter than the 8-byte header length", 0, -2},
      {"length", ok, "header length 1000 runs past the end of the file", 8, 1000},
      {"json", "{\"w\":", "not valid JSON", 0},
      {"array", "[1,2]", "not a JSON object", 0},
      {"dtype", R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", "tensor w: dtype I64 is not supported", 8},
      {"shape_bytes", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "tensor w: shape and dtype F32 need 12 bytes", 8},
      {"past", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "tensor w: data_offsets [0, 16) run past the data", 8},
      {"reversed", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", "tensor w: data_offsets [8, 0) end before", 8},
      {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       "overlap another tensor", 8},
      {"gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", "tensor a: a gap of 4 bytes", 8},
      {"trailing", ok, "bytes after the last tensor's data belong to no tensor", 12},
      {"negative", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "tensor w: shape has a dimension", 8},
      {"offset_type", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":["0",8]}})", "tensor w: data_offsets must be", 8},
      {"metadata", R"({"__metadata__":{"format":1}})", "__metadata__ entry format is not a string", 0},
      {"field", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", "tensor w: unknown field x", 8},
      {"overflow", R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", "tensor w: its size overflows", 8},
  };
  for (const Case& c : cases) {
    const std::string p = c.length == -2 ? path(c.name) : raw(c.name, c.header, c.data, c.length);
    if (c.length == -2) std::ofstream(p) << "abc";
    const std::string err = error_of(p);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(p), std::string::npos) << c.name << " does not name the file: " << err;
  }
  EXPECT_NE(error_of(path("absent")).find("cannot open"), std::string::npos);
}

TEST_F(Safetensors, FolderShardsPastTheSizeAndChecksTheIndex) {
  std::vector<StWriteTensor> ts;
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> v(16, static_cast<float>(i));
    ts.push_back({"t" + std::to_string(i), StDtype::f32, {4, 4}, st_encode(v.data(), 16, StDtype::f32)});
  }
  fs::create_directories(path("one"));
  EXPECT_EQ(write_safetensors_folder(path("one"), ts, 0, {}).size(), 1u);
  EXPECT_FALSE(SafetensorsFolder(path("one")).sharded());
  fs::create_directories(path("many"));
  const std::vector<std::string> files = write_safetensors_folder(path("many"), ts, 128, {{"format", "pt"}});
  ASSERT_EQ(files.size(), 4u);  // three shards of 128 bytes at most, and the index
  EXPECT_EQ(fs::path(files[0]).filename(), "model-00001-of-00003.safetensors");
  const SafetensorsFolder f(path("many"));
  EXPECT_TRUE(f.sharded());
  EXPECT_EQ(f.names().size(), 5u);
  EXPECT_EQ(f.read_f32("t3")[7], 3.0f);
  // An index that places a tensor in the wrong shard, or forgets one, is refused naming it.
  std::ofstream(path("many/model.safetensors.index.json"))
      << R"({"weight_map":{"t0":"model-00001-of-00003.safetensors","t1":"model-00001-of-00003.safetensors",)"
      << R"("t2":"model-00001-of-00003.safetensors","t3":"model-00002-of-00003.safetensors"}})";
  try {
    SafetensorsFolder bad(path("many"));
    FAIL() << "a wrong index was accepted";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("t2"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_byte_size("2GB"), 2000000000u);
  EXPECT_EQ(parse_byte_size("1MiB"), 1048576u);
  EXPECT_THROW(parse_byte_size("2 parsecs"), tessera::Error);
}

}  // namespace
