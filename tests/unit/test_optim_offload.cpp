// Unit tests of offload's pieces: AdamW with its states in a scratch file, streamed in small
// pieces through two buffers, or split between the device and the host tier in small chunks,
// equals AdamW with the states on the device bit for bit (whole store and a shard, decay ranges cut
// across pieces); the host tier's bytes count apart from the device's; read_states / write_states
// round-trip; the scratch file leaves nothing behind; an unusable directory is an error naming
// it; IoWorker order and errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/philox.h"
#include "memory/io_worker.h"
#include "memory/scratch_file.h"
#include "nn/param_store.h"
#include "optim/adamw.h"

using tessera::Device;
using tessera::nn::Init;
using tessera::nn::ParamStore;
using tessera::optim::AdamW;
using tessera::optim::AdamWConfig;

namespace {

// Decay and no-decay parameters of awkward sizes, so that pieces of 7 cut ranges anywhere.
void build(ParamStore& s) {
  s.add("w1", {13, 3}, Init::Normal(0.5f), true);
  s.add("b1", {13}, Init::Normal(0.5f), false);
  s.add("w2", {5, 11}, Init::Normal(0.5f), true);
  s.add("ln", {11}, Init::Ones(), false);
  s.allocate(Device::cpu, 99);
}

void set_grads(ParamStore& s, int step) {
  float* g = s.flat_grads().data<float>();
  for (int64_t i = 0; i < s.numel(); ++i)
    g[i] = tessera::philox_normal(7, tessera::stream_id("grads"), static_cast<uint64_t>(step * 1000 + i));
}

// A fresh directory under the system's temporary one, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string name = (std::filesystem::temp_directory_path() / "tessera-offload-XXXXXX").string();
    path = ::mkdtemp(name.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  bool empty() const { return std::filesystem::is_empty(path); }
};

TEST(AdamWOffload, StreamedStatesEqualInMemoryOnesBitForBit) {
  TempDir dir;
  for (tessera::parallel::Range shard : {tessera::parallel::Range{0, -1}, tessera::parallel::Range{20, 90}}) {
    ParamStore a, b;
    build(a);
    build(b);
    if (shard.end < 0) shard.end = a.numel();
    AdamWConfig memory_cfg, file_cfg;
    file_cfg.offload = "nvme";
    file_cfg.offload_dir = dir.path.string();
    file_cfg.offload_chunk = 7;
    AdamW in_memory(a, memory_cfg, shard), in_file(b, file_cfg, shard);
    EXPECT_TRUE(in_file.states_in_files());
    EXPECT_TRUE(dir.empty()) << "the scratch file must be unlinked at once";
    for (int t = 1; t <= 5; ++t) {
      set_grads(a, t);
      set_grads(b, t);
      in_memory.step(0.01f, 0.7f);
      in_file.step(0.01f, 0.7f);
    }
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(a.flat_values().data<float>()[i], b.flat_values().data<float>()[i]) << "shard " << shard.begin << " i=" << i;
    std::vector<float> m(shard.size()), v(shard.size());
    in_file.read_states(0, shard.size(), m.data(), v.data());
    for (int64_t i = 0; i < shard.size(); ++i) {
      ASSERT_EQ(m[i], in_memory.exp_avg().data<float>()[i]) << i;
      ASSERT_EQ(v[i], in_memory.exp_avg_sq().data<float>()[i]) << i;
    }
    EXPECT_THROW(in_file.exp_avg(), tessera::Error);
  }
  EXPECT_TRUE(dir.empty());
}

TEST(AdamWOffload, HostTierStatesEqualDeviceOnesAndCountApart) {
  for (const double fraction : {0.5, 1.0})
    for (tessera::parallel::Range shard : {tessera::parallel::Range{0, -1}, tessera::parallel::Range{20, 90}}) {
      ParamStore a, b;
      build(a);
      build(b);
      if (shard.end < 0) shard.end = a.numel();
      AdamWConfig split_cfg;
      split_cfg.host_fraction = fraction;
      split_cfg.placement_chunk = 7;  // chunks cut the decay ranges anywhere
      const int64_t host_before = tessera::host_tier_stats().current_bytes;
      const int64_t device_before = tessera::memory_stats(Device::cpu).current_bytes;
      AdamW on_device(a, AdamWConfig{}, shard);
      const int64_t device_states = tessera::memory_stats(Device::cpu).current_bytes - device_before;
      AdamW split(b, split_cfg, shard);
      const int64_t chunks = (shard.size() + 6) / 7;
      const int64_t host = std::min(shard.size(), static_cast<int64_t>(fraction * double(chunks) + 0.5) * 7);
      EXPECT_EQ(split.host_tier_elements(), host);
      EXPECT_EQ(tessera::host_tier_stats().current_bytes - host_before, 2 * 4 * host);
      EXPECT_EQ(tessera::memory_stats(Device::cpu).current_bytes - device_before - device_states,
                2 * 4 * (shard.size() - host))
          << "the host tier's bytes must not count on the device";
      for (int t = 1; t <= 5; ++t) {
        set_grads(a, t);
        set_grads(b, t);
        on_device.step(0.01f, 0.7f);
        split.step(0.01f, 0.7f);
      }
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_EQ(a.flat_values().data<float>()[i], b.flat_values().data<float>()[i]) << fraction << " i=" << i;
      std::vector<float> m(shard.size()), v(shard.size());
      split.read_states(0, shard.size(), m.data(), v.data());
      for (int64_t i = 0; i < shard.size(); ++i) {
        ASSERT_EQ(m[i], on_device.exp_avg().data<float>()[i]) << i;
        ASSERT_EQ(v[i], on_device.exp_avg_sq().data<float>()[i]) << i;
      }
      EXPECT_THROW(split.exp_avg(), tessera::Error);
    }
}

TEST(AdamWOffload, WriteThenReadStatesRoundTrips) {
  TempDir dir;
  for (const char* where : {"none", "nvme", "cpu", "half"}) {
    ParamStore s;
    build(s);
    AdamWConfig cfg;
    cfg.offload = std::string(where) == "half" ? "none" : where;
    cfg.host_fraction = std::string(where) == "half" ? 0.5 : 0.0;
    cfg.placement_chunk = 7;
    cfg.offload_dir = dir.path.string();
    AdamW opt(s, cfg);
    const int64_t n = s.numel();
    std::vector<float> m(n), v(n), m2(n, -1.0f), v2(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) {
      m[i] = 0.5f * float(i);
      v[i] = 2.0f + float(i);
    }
    opt.write_states(0, n, m.data(), v.data());
    opt.read_states(3, n - 5, m2.data() + 3, v2.data() + 3);
    for (int64_t i = 3; i < n - 2; ++i) {
      ASSERT_EQ(m2[i], m[i]) << where << " " << i;
      ASSERT_EQ(v2[i], v[i]) << where << " " << i;
    }
    EXPECT_THROW(opt.read_states(1, n, m2.data(), v2.data()), tessera::Error);
  }
}

TEST(AdamWOffload, UnusableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  const std::string missing = (dir.path / "no" / "such").string();
  try {
    tessera::memory::check_scratch_dir(missing, "--offload-dir");
    FAIL() << "no error";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--offload-dir '" + missing + "'"), std::string::npos) << e.what();
  }
  ParamStore s;
  build(s);
  AdamWConfig cfg;
  cfg.offload = "nvme";
  cfg.offload_dir = missing;
  EXPECT_THROW(AdamW(s, cfg), tessera::Error);
  cfg.offload = "disk";
  EXPECT_THROW(AdamW(s, cfg), tessera::Error);
  EXPECT_NO_THROW(tessera::memory::check_scratch_dir(dir.path.string(), "--offload-dir"));
  EXPECT_TRUE(dir.empty());
}

TEST(IoWorker, RunsJobsInOrderAndReportsTheFirstError) {
  tessera::memory::IoWorker io;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) io.submit([&order, i] { order.push_back(i); });
  io.wait_all();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  const int64_t bad = io.submit([] { throw std::runtime_error("disk on fire"); });
  io.submit([&order] { order.push_back(99); });
  EXPECT_THROW(io.wait(bad), std::runtime_error);
  EXPECT_THROW(io.wait_all(), std::runtime_error);
  EXPECT_EQ(order.size(), 5u) << "jobs after a failed one must not run";
}

}  // namespace
