// io::CheckpointWriter / CheckpointReader on real MPI ranks: uneven (and empty) per-rank ranges of
// 1-D..3-D tensors, range reads, attributes, N-rank files read by one, commit/abort, corruption.
// ranks: 1 2 4
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/test_hooks.h"
#include "io/checkpoint_file.h"
#include "io/hdf5_file.h"

namespace fs = std::filesystem;
using tessera::Error;
using tessera::Shape;
using tessera::io::CheckpointReader;
using tessera::io::CheckpointWriter;

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// The value of element i of the tensor tagged `seed`: distinct, exactly representable, signed.
float value(int seed, int64_t i) { return static_cast<float>((i * 7 + seed * 13) % 1001 - 500) * 0.125f + seed; }

std::vector<float> values(int seed, int64_t begin, int64_t end) {
  std::vector<float> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(value(seed, i));
  return v;
}

// Rank r's share of n elements, uneven: proportional to r (rank 0 gets nothing when size > 1),
// handed out in reverse rank order so that ranges do not follow ranks.
std::pair<int64_t, int64_t> uneven_range(int64_t n, int rank, int size) {
  if (size == 1) return {0, n};
  const int64_t total = int64_t{size} * (size - 1) / 2;
  auto cut = [&](int64_t k) { return n * k / total; };  // k = weight of the chunks before
  const int slot = size - 1 - rank;                      // rank size-1 first, rank 0 last
  int64_t before = 0;
  for (int s = 0; s < slot; ++s) before += size - 1 - s;
  return {cut(before), cut(before + rank)};
}

template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> words) {
  try {
    f();
    ADD_FAILURE() << "no error thrown; expected one with: " << *words.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

// A directory shared by the ranks (same node), fresh per test.
class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    int pid = static_cast<int>(getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_ckpt_" + std::to_string(pid) + "_" + info->name());
    if (world_rank() == 0) {
      fs::remove_all(dir_);
      fs::create_directories(dir_);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::remove_all(dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // A checkpoint of the tensors in `shapes` (tensor k holds value(k, i)), each rank writing its
  // uneven range; committed.
  void write_checkpoint(const std::string& path, const std::vector<std::pair<std::string, Shape>>& shapes) {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    for (const auto& [name, shape] : shapes) w.create(name, shape);
    for (size_t k = 0; k < shapes.size(); ++k) {
      const auto [b, e] = uneven_range(shapes[k].second.numel(), world_rank(), world_size());
      const std::vector<float> v = values(static_cast<int>(k), b, e);
      w.write_range(shapes[k].first, b, e, v.data());
    }
    w.set_attr("step", int64_t{5});
    w.commit();
  }

  // Every tensor of `shapes` read whole through `r` equals what write_checkpoint wrote.
  static void expect_contents(const CheckpointReader& r, const std::vector<std::pair<std::string, Shape>>& shapes) {
    for (size_t k = 0; k < shapes.size(); ++k) {
      const auto& [name, shape] = shapes[k];
      ASSERT_TRUE(r.has(name)) << name;
      EXPECT_EQ(r.shape(name), shape) << name;
      std::vector<float> got(static_cast<size_t>(shape.numel()));
      r.read_range(name, 0, shape.numel(), got.data());
      EXPECT_EQ(got, values(static_cast<int>(k), 0, shape.numel())) << name;
    }
  }

  fs::path dir_;
};

const std::vector<std::pair<std::string, Shape>> kShapes = {
    {"/params/wte.weight", Shape{37}},                     // 1-D, prime length
    {"/params/blocks.0.attn.qkv.weight", Shape{7, 5}},     // rows not divisible by 2 or 4
    {"/optim/blocks.0.mlp.fc.weight/exp_avg", Shape{3, 4, 5}},
    {"/params/scale", Shape{}},                            // a scalar: one element
    {"/params/empty", Shape{0, 4}},                        // no elements at all
    {"/params/one_row", Shape{1, 9}},
};

}  // namespace

TEST(CheckpointChecksum, PartialSumsAddUpAndSeeEveryBit) {
  const std::vector<float> v = values(3, 0, 100);
  const uint64_t whole = tessera::io::checkpoint_checksum(v.data(), 0, 100);
  EXPECT_EQ(tessera::io::checkpoint_checksum(v.data(), 0, 40) + tessera::io::checkpoint_checksum(v.data() + 40, 40, 100),
            whole);
  for (int bit = 0; bit < 32; ++bit) {
    std::vector<float> w = v;
    uint32_t x;
    std::memcpy(&x, &w[57], 4);
    x ^= 1u << bit;
    std::memcpy(&w[57], &x, 4);
    EXPECT_NE(tessera::io::checkpoint_checksum(w.data(), 0, 100), whole) << "bit " << bit;
  }
  std::vector<float> swapped = v;  // the same values at other positions: a different checksum
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(tessera::io::checkpoint_checksum(swapped.data(), 0, 100), whole);
}

TEST_F(CheckpointFile, UnevenRangesRoundTripOnEveryRankAndSerially) {
  const std::string path = file("step_5.h5");
  write_checkpoint(path, kShapes);
  {
    CheckpointReader r(path, MPI_COMM_WORLD);
    expect_contents(r, kShapes);
    std::vector<std::string> names;
    for (const auto& s : kShapes) names.push_back(s.first);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(r.tensors(), names);
    EXPECT_NO_THROW(r.verify());
  }
  // The file written by N ranks, read by one process without MPI-IO.
  CheckpointReader serial(path, MPI_COMM_NULL);
  expect_contents(serial, kShapes);
  EXPECT_NO_THROW(serial.verify());
  EXPECT_EQ(serial.attr_int("step"), 5);
  EXPECT_FALSE(serial.has("/params"));  // a group, not a tensor
  EXPECT_FALSE(serial.has("/params/nope"));
  EXPECT_TRUE(serial.has("params/wte.weight"));  // the leading '/' is optional
}

TEST_F(CheckpointFile, TensorWrittenInSeveralRoundsAndByRowShards) {
  // Round 1: each rank a contiguous block of whole rows of [10, 3] (ranks beyond 10 get none);
  // round 2 of the same tensor writes nothing. A second tensor gets one element per rank per round.
  const int rank = world_rank(), size = world_size();
  const std::string path = file("rounds.h5");
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    w.create("/params/rows", Shape{10, 3});
    w.create("/params/strided", Shape{4 * size});
    const int64_t rows_b = 10 * rank / size, rows_e = 10 * (rank + 1) / size;
    const std::vector<float> v = values(0, rows_b * 3, rows_e * 3);
    w.write_range("/params/rows", rows_b * 3, rows_e * 3, v.data());
    w.write_range("/params/rows", 0, 0, nullptr);
    for (int round = 0; round < 4; ++round) {
      const int64_t i = int64_t{round} * size + rank;
      const float x = value(1, i);
      w.write_range("/params/strided", i, i + 1, &x);
    }
    w.commit();
  }
  CheckpointReader r(path, MPI_COMM_NULL);
  expect_contents(r, {{"/params/rows", Shape{10, 3}}, {"/params/strided", Shape{4 * size}}});
  EXPECT_NO_THROW(r.verify());
}

TEST_F(CheckpointFile, ArbitraryRangesReadBackAcrossRows) {
  const std::vector<std::pair<std::string, Shape>> shapes = {{"/a", Shape{6, 7}}, {"/b/c", Shape{2, 3, 4}},
                                                            {"/d", Shape{2, 2, 3, 2}}};
  const std::string path = file("ranges.h5");
  write_checkpoint(path, shapes);
  CheckpointReader serial(path, MPI_COMM_NULL);
  CheckpointReader parallel(path, MPI_COMM_WORLD);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t n = shapes[k].second.numel();
    for (int64_t b = 0; b <= n; ++b) {
      for (int64_t e = b; e <= n; ++e) {
        // Every range through the serial reader; a rank-dependent sample through MPI-IO.
        std::vector<float> got(static_cast<size_t>(e - b), -1e30f);
        serial.read_range(shapes[k].first, b, e, got.data());
        ASSERT_EQ(got, values(static_cast<int>(k), b, e)) << shapes[k].first << " [" << b << ", " << e << ")";
        if ((b * 31 + e + world_rank()) % 17 == 0) {
          std::fill(got.begin(), got.end(), -1e30f);
          parallel.read_range(shapes[k].first, b, e, got.data());
          ASSERT_EQ(got, values(static_cast<int>(k), b, e)) << shapes[k].first << " [" << b << ", " << e << ")";
        }
      }
    }
  }
  expect_error([&] { std::vector<float> x(3); serial.read_range("/a", 41, 44, x.data()); }, {"/a", "outside", "42"});
  expect_error([&] { float x; serial.read_range("/zzz", 0, 1, &x); }, {"ranges.h5", "no tensor /zzz"});
}

TEST_F(CheckpointFile, AttributesRoundTripAndRankZeroWins) {
  const std::string path = file("attrs.h5");
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    w.create("/p", Shape{2});
    const float v[2] = {1, 2};
    w.write_range("/p", world_rank() == 0 ? 0 : 2, 2, v);
    w.set_attr("step", int64_t{1234567890123});
    w.set_attr("consumed_samples", int64_t{1} << 40);
    w.set_attr("lr", 3.5e-4);
    w.set_attr("layout", std::string("pp=1 dp=") + std::to_string(world_size()) + " tp=1");
    w.set_attr("rank_seen", world_rank() * 100 + 7);  // differs per rank: rank 0's is written
    w.set_attr("model.layers", 12);
    w.set_attr("model.layers", 6);  // replaced
    w.set_attr("note", "utf-8: \xc3\xa9t\xc3\xa9");
    expect_error([&] { w.set_attr("format", "x"); }, {"format", "reserved"});
    expect_error([&] { w.set_attr("version", 2); }, {"version", "reserved"});
    w.commit();
  }
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_NULL}) {
    CheckpointReader r(path, comm);
    EXPECT_EQ(r.attr_int("step"), 1234567890123);
    EXPECT_EQ(r.attr_int("consumed_samples"), int64_t{1} << 40);
    EXPECT_EQ(r.attr_double("lr"), 3.5e-4);
    EXPECT_EQ(r.attr_double("step"), 1234567890123.0);  // integers read as doubles too
    EXPECT_EQ(r.attr_string("layout"), "pp=1 dp=" + std::to_string(world_size()) + " tp=1");
    EXPECT_EQ(r.attr_int("rank_seen"), 7);
    EXPECT_EQ(r.attr_int("model.layers"), 6);
    EXPECT_EQ(r.attr_string("note"), "utf-8: \xc3\xa9t\xc3\xa9");
    EXPECT_EQ(r.attr_string("format"), "tessera-checkpoint");
    EXPECT_EQ(r.attr_int("version"), tessera::io::kCheckpointVersion);
    EXPECT_TRUE(r.has_attr("lr"));
    EXPECT_FALSE(r.has_attr("missing"));
    EXPECT_EQ(r.attr_keys(), (std::vector<std::string>{"consumed_samples", "format", "layout", "lr", "metadata_checksum",
                                                       "model.layers", "note", "rank_seen", "step", "version"}));
    EXPECT_EQ(r.attr_type("lr"), CheckpointReader::AttrType::float64);
    EXPECT_EQ(r.attr_type("step"), CheckpointReader::AttrType::int64);
    EXPECT_EQ(r.attr_type("layout"), CheckpointReader::AttrType::string);
    expect_error([&] { r.attr_int("missing"); }, {"attrs.h5", "no attribute missing"});
    expect_error([&] { r.attr_int("layout"); }, {"layout", "not an integer"});
    expect_error([&] { r.attr_string("lr"); }, {"lr", "not a string"});
  }
}

TEST_F(CheckpointFile, CommitRenamesAndLeavesNoTmp) {
  const std::string path = file("step_1.h5");
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    EXPECT_EQ(w.tmp_path(), path + ".tmp");
    w.create("/x", Shape{5});
    const auto [b, e] = uneven_range(5, world_rank(), world_size());
    const std::vector<float> v = values(0, b, e);
    w.write_range("/x", b, e, v.data());
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_TRUE(fs::exists(path + ".tmp"));
    EXPECT_FALSE(fs::exists(path));
    w.commit();
    // On return from commit, on every rank: the final file, and no .tmp.
    EXPECT_TRUE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    expect_error([&] { w.create("/y", Shape{1}); }, {"after commit"});
  }
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(fs::directory_iterator(dir_) == fs::directory_iterator(), false);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) files += entry.path().filename() == "step_1.h5" ? 0 : 1;
  EXPECT_EQ(files, 0) << "only step_1.h5 should be left";
  CheckpointReader r(path, MPI_COMM_NULL);
  EXPECT_NO_THROW(r.verify());
}

TEST_F(CheckpointFile, WriterWithoutCommitRemovesTmpAndKeepsThePreviousFile) {
  const std::string path = file("step_2.h5");
  write_checkpoint(path, kShapes);  // a good checkpoint already at the path
  if (world_rank() == 0) std::ofstream(path + ".tmp") << "a stale temporary from an old crash";
  MPI_Barrier(MPI_COMM_WORLD);
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);  // truncates the stale .tmp
    w.create("/params/wte.weight", Shape{37});
    const std::vector<float> zeros(37, 0.0f);
    w.write_range("/params/wte.weight", 0, world_rank() == 0 ? 37 : 0, zeros.data());
    w.set_attr("step", 99);
  }  // no commit
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  CheckpointReader r(path, MPI_COMM_NULL);  // the previous file, untouched
  EXPECT_EQ(r.attr_int("step"), 5);
  expect_contents(r, kShapes);
  EXPECT_NO_THROW(r.verify());

  // A new name: without commit, nothing at all is left.
  const std::string fresh = file("step_3.h5");
  { CheckpointWriter w(fresh, MPI_COMM_WORLD); }
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(fresh + ".tmp"));
}

TEST_F(CheckpointFile, IncompleteOrOverlappingCoverageIsNotCommitted) {
  for (const bool overlap : {false, true}) {
    const std::string path = file(overlap ? "overlap.h5" : "gap.h5");
    {
      CheckpointWriter w(path, MPI_COMM_WORLD);
      w.create("/t", Shape{4, 4});
      const std::vector<float> v = values(0, 0, 16);
      // gap: every rank writes [0, 15), once in total (rank 0); overlap: rank 0 all, others 1 more.
      if (overlap) w.write_range("/t", 0, world_rank() == 0 ? 16 : 1, v.data());
      else w.write_range("/t", 0, world_rank() == 0 ? 15 : 0, v.data());
      if (!overlap || world_size() > 1) {
        expect_error([&] { w.commit(); }, {path, "/t", overlap ? "overlapping" : "missing", "not committed"});
      } else {
        w.commit();  // one rank: the "overlap" case is exactly the whole tensor
      }
    }
    EXPECT_EQ(fs::exists(path), overlap && world_size() == 1);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
}

TEST_F(CheckpointFile, BadArgumentsThrowOnEveryRank) {
  const std::string path = file("args.h5");
  CheckpointWriter w(path, MPI_COMM_WORLD);
  w.create("/t", Shape{8});
  expect_error([&] { w.create("/t", Shape{8}); }, {"/t", "created twice"});
  expect_error([&] { w.create("/n", Shape{-1, 2}); }, {"/n", "negative"});
  // A range outside the tensor on the last rank only: every rank throws, naming it.
  const std::vector<float> v(9, 1.0f);
  const bool last = world_rank() == world_size() - 1;
  expect_error([&] { w.write_range("/t", 0, last ? 9 : 0, v.data()); },
               {"/t", "outside", world_size() > 1 ? "(rank " + std::to_string(world_size() - 1) + ")" : "[0, 9)"});
  expect_error([&] { w.write_range("/nope", 0, 0, nullptr); }, {"no tensor /nope"});
  if (world_size() > 1) {  // a collective call with a different name on one rank
    expect_error([&] { w.create(world_rank() == 1 ? "/u" : "/v", Shape{1}); }, {"different arguments"});
  }
  // Bad arguments leave the writer usable.
  w.write_range("/t", 0, world_rank() == 0 ? 8 : 0, v.data());
  w.commit();
  CheckpointReader r(path, MPI_COMM_NULL);
  EXPECT_EQ(r.tensors(), std::vector<std::string>{"/t"});
  EXPECT_NO_THROW(r.verify());
  expect_error([&] { CheckpointWriter bad(file("x.h5.tmp"), MPI_COMM_WORLD); }, {".tmp"});
  expect_error([&] { CheckpointWriter bad(file("no_dir/x.h5"), MPI_COMM_WORLD); }, {"no_dir", "does not exist"});
}

TEST_F(CheckpointFile, VerifyDetectsOneFlippedBit) {
  const std::string path = file("flip.h5");
  write_checkpoint(path, kShapes);
  const std::string victim = "/params/blocks.0.attn.qkv.weight";
  // Flips one bit of one element of the victim's data in the file (rank 0), found with H5Dget_offset.
  auto flip = [&](int element, int bit) {
    if (world_rank() == 0) {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      ASSERT_GE(f, 0);
      const hid_t d = H5Dopen2(f, victim.c_str(), H5P_DEFAULT);
      const haddr_t offset = H5Dget_offset(d);
      H5Dclose(d);
      H5Fclose(f);
      ASSERT_NE(offset, HADDR_UNDEF);
      std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
      const auto pos = static_cast<std::streamoff>(offset + 4 * static_cast<haddr_t>(element) + bit / 8);
      io.seekg(pos);
      char c = 0;
      io.read(&c, 1);
      c = static_cast<char>(c ^ (1 << (bit % 8)));
      io.seekp(pos);
      io.write(&c, 1);
      ASSERT_TRUE(io.good());
    }
    MPI_Barrier(MPI_COMM_WORLD);
  };
  for (const int element : {0, 17, 34}) {
    for (const int bit : {0, 22, 31}) {
      flip(element, bit);
      {
        CheckpointReader r(path, MPI_COMM_NULL);  // it still opens: only the data changed
        expect_error([&] { r.verify(); }, {"flip.h5", victim, "corrupt", "checksum mismatch"});
        // The other tensors still read as written.
        std::vector<float> got(37);
        r.read_range("/params/wte.weight", 0, 37, got.data());
        EXPECT_EQ(got, values(0, 0, 37));
      }
      {
        CheckpointReader r(path, MPI_COMM_WORLD);
        expect_error([&] { r.verify(); }, {victim, "checksum mismatch"});
      }
      MPI_Barrier(MPI_COMM_WORLD);
      flip(element, bit);  // back
      CheckpointReader r(path, MPI_COMM_NULL);
      EXPECT_NO_THROW(r.verify()) << "element " << element << " bit " << bit;
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
}

// A file carried with the model (the tokenizer's): written whole by rank 0, read back by any reader
// (and as a plain uint8 dataset by H5File, which the tokenizer's loader uses), covered by verify()
// and by the metadata checksum, never listed among the tensors.
TEST_F(CheckpointFile, ByteDatasetsRoundTripAreCheckedAndAreNotTensors) {
  const std::string path = file("bytes.h5");
  std::string bytes;
  for (int i = 0; i < 3000; ++i) bytes += static_cast<char>((i * 37) % 256);
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    w.create("/t", Shape{4});
    const std::vector<float> v = values(1, 0, 4);
    w.write_range("/t", 0, world_rank() == 0 ? 4 : 0, v.data());
    w.write_bytes("/tokenizer_file", bytes);
    w.write_bytes("/hf_files/empty.json", "");
    expect_error([&] { w.write_bytes("/tokenizer_file", bytes); }, {"/tokenizer_file", "created twice"});
    if (world_size() > 1)
      expect_error([&] { w.write_bytes("/other", world_rank() == 1 ? "a" : "b"); }, {"different arguments"});
    w.commit();
  }
  for (const MPI_Comm comm : {MPI_COMM_NULL, MPI_COMM_WORLD}) {
    CheckpointReader r(path, comm);
    EXPECT_EQ(r.tensors(), std::vector<std::string>{"/t"});
    EXPECT_EQ(r.byte_datasets(), (std::vector<std::string>{"/hf_files/empty.json", "/tokenizer_file"}));
    EXPECT_EQ(r.read_bytes("/tokenizer_file"), bytes);
    EXPECT_EQ(r.read_bytes("hf_files/empty.json"), "");
    EXPECT_NO_THROW(r.verify());
    expect_error([&] { r.read_bytes("/t"); }, {"/t", "not a byte dataset"});
    expect_error([&] { r.read_bytes("/none"); }, {"no byte dataset /none"});
  }
  if (world_rank() == 0) {
    const tessera::Tensor t = tessera::io::H5File::open_read(path).read("/tokenizer_file", tessera::DType::u8);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.data<uint8_t>()), static_cast<size_t>(t.numel())), bytes);
    // One changed byte is found by read_bytes and verify.
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "/tokenizer_file", H5P_DEFAULT);
    const haddr_t offset = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(offset, HADDR_UNDEF);
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(offset + 1234));
    const char c = static_cast<char>(bytes[1234] ^ 0x10);
    io.write(&c, 1);
    ASSERT_TRUE(io.good());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CheckpointReader r(path, MPI_COMM_NULL);
  expect_error([&] { r.read_bytes("/tokenizer_file"); }, {"bytes.h5", "/tokenizer_file", "checksum mismatch"});
  expect_error([&] { r.verify(); }, {"bytes.h5", "/tokenizer_file", "checksum mismatch"});
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(CheckpointFile, TruncatedFileIsRefused) {
  const std::string path = file("cut.h5");
  write_checkpoint(path, {{"/params/big", Shape{64, 64}}});
  const auto size = fs::file_size(path);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) fs::resize_file(path, size / 2);
  MPI_Barrier(MPI_COMM_WORLD);
  expect_error([&] { CheckpointReader r(path, MPI_COMM_NULL); }, {"cut.h5", "truncated"});
  expect_error([&] { CheckpointReader r(path, MPI_COMM_WORLD); }, {"cut.h5", "truncated"});
}

TEST_F(CheckpointFile, FilesThatAreNotCheckpointsAreRefused) {
  const std::string plain = file("plain.h5"), wrong_format = file("other.h5"), future = file("future.h5");
  const std::string text = file("notes.txt"), empty = file("empty.h5");
  if (world_rank() == 0) {
    tessera::io::H5File f = tessera::io::H5File::create(plain);
    f.set_attr("/", "vocab_size", int64_t{256});
    tessera::io::H5File g = tessera::io::H5File::create(wrong_format);
    g.set_attr("/", "format", "something-else");
    g.set_attr("/", "version", int64_t{1});
    tessera::io::H5File h = tessera::io::H5File::create(future);
    h.set_attr("/", "format", "tessera-checkpoint");
    h.set_attr("/", "version", tessera::io::kCheckpointVersion + 1);  // from a later tessera
    std::ofstream(text) << "step = 5\n";
    std::ofstream{empty};
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (MPI_Comm comm : {MPI_COMM_NULL, MPI_COMM_WORLD}) {
    expect_error([&] { CheckpointReader r(plain, comm); }, {"plain.h5", "not a tessera checkpoint", "no format"});
    expect_error([&] { CheckpointReader r(wrong_format, comm); }, {"other.h5", "not a tessera checkpoint", "something-else"});
    expect_error([&] { CheckpointReader r(future, comm); }, {"future.h5", "unsupported checkpoint version " + std::to_string(tessera::io::kCheckpointVersion + 1)});
    expect_error([&] { CheckpointReader r(text, comm); }, {"notes.txt", "not an HDF5 file"});
    expect_error([&] { CheckpointReader r(empty, comm); }, {"empty.h5", "not an HDF5 file"});
    expect_error([&] { CheckpointReader r(file("missing.h5"), comm); }, {"missing.h5", "no such file"});
    expect_error([&] { CheckpointReader r(dir_.string(), comm); }, {"directory"});
  }
}

TEST_F(CheckpointFile, TmpFilesAreNeverCheckpoints) {
  const std::string path = file("step_7.h5");
  write_checkpoint(path, kShapes);
  // A complete file (format and all), under a .tmp name as a crash before the rename leaves it.
  if (world_rank() == 0) fs::copy_file(path, path + ".tmp");
  MPI_Barrier(MPI_COMM_WORLD);
  for (MPI_Comm comm : {MPI_COMM_NULL, MPI_COMM_WORLD})
    expect_error([&] { CheckpointReader r(path + ".tmp", comm); }, {"step_7.h5.tmp", "uncommitted"});
  // A file cut off before commit has no "format": refused whatever its name.
  {
    CheckpointWriter w(file("step_8.h5"), MPI_COMM_WORLD);
    w.create("/x", Shape{2});
    const float v[2] = {1, 2};
    w.write_range("/x", 0, world_rank() == 0 ? 2 : 0, v);
    w.set_attr("step", 8);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) fs::copy_file(file("step_8.h5.tmp"), file("copied.h5"));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // (Before any flush its superblock is not even on disk yet: refused as "not an HDF5 file".)
  expect_error([&] { CheckpointReader r(file("copied.h5"), MPI_COMM_NULL); }, {"copied.h5", "cannot open checkpoint"});
}

TEST_F(CheckpointFile, FullDiskThrowsEverywhereRemovesTmpAndKeepsOldFiles) {
  // The writer's fault hook makes its space reservation fail with ENOSPC once the file would grow
  // past 256 KiB: the same path a full disk takes. (A real full disk was tried by hand on a small
  // tmpfs; tests/unit/test_io_checkpoint_crash.cpp also meets a real kernel error, EFBIG.)
  const std::string old_path = file("step_10.h5"), path = file("step_20.h5");
  write_checkpoint(old_path, kShapes);
  tessera::test_hooks().checkpoint_disk_limit_bytes = 262144;  // TESSERA_CKPT_DISK_LIMIT_BYTES
  const int64_t n = 1 << 20;  // 4 MiB of floats
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    w.create("/params/small", Shape{1000});  // fits
    const auto [b, e] = uneven_range(n, world_rank(), world_size());
    const std::vector<float> v = values(0, b, e);
    bool threw = false;
    try {
      w.create("/params/huge", Shape{n});
      w.write_range("/params/huge", b, e, v.data());
      w.commit();
    } catch (const Error& ex) {  // on every rank, with rank 0's message
      threw = true;
      const std::string msg = ex.what();
      EXPECT_NE(msg.find("writing checkpoint " + path + ": no space left on device"), std::string::npos) << msg;
      EXPECT_NE(msg.find("/params/huge"), std::string::npos) << msg;
    }
    EXPECT_TRUE(threw);
    EXPECT_FALSE(fs::exists(path + ".tmp"));  // removed before the error reached the caller
    expect_error([&] { w.commit(); }, {"earlier write error"});
    expect_error([&] { w.create("/x", Shape{1}); }, {"earlier write error"});
  }
  tessera::test_hooks().checkpoint_disk_limit_bytes = -1;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  CheckpointReader r(old_path, MPI_COMM_NULL);
  expect_contents(r, kShapes);
  EXPECT_NO_THROW(r.verify());
  // A later checkpoint in the same process still works.
  write_checkpoint(file("step_30.h5"), kShapes);
  EXPECT_NO_THROW(CheckpointReader(file("step_30.h5"), MPI_COMM_NULL).verify());
}

TEST_F(CheckpointFile, FullDiskAtCommitIsCaughtBeforeTheMetadataIsWritten) {
  // Room for the data but not for the metadata reservation that commit() makes.
  const std::string path = file("step_40.h5");
  const int64_t n = 64 * 1024;  // 256 KiB of floats
  tessera::test_hooks().checkpoint_disk_limit_bytes = 4 * n + 16 * 1024;
  {
    CheckpointWriter w(path, MPI_COMM_WORLD);
    w.create("/params/w", Shape{n});
    const auto [b, e] = uneven_range(n, world_rank(), world_size());
    const std::vector<float> v = values(0, b, e);
    w.write_range("/params/w", b, e, v.data());
    expect_error([&] { w.commit(); }, {"no space left on device", "the metadata"});
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
  tessera::test_hooks().checkpoint_disk_limit_bytes = -1;
  EXPECT_FALSE(fs::exists(path));
}
