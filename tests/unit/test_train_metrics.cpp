// train::JsonLine and train::MetricsWriter: valid, escaped JSON lines with their time; a fresh run
// refuses a file holding lines unless told to overwrite; a resume keeps the lines up to its step,
// cuts the rest (and a torn last line) and appends; a failed write throws naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using tessera::Error;
using tessera::train::JsonLine;
using tessera::train::MetricsWriter;

namespace {

class Metrics : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("tessera_metrics_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "m.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void put(const std::string& text) const { std::ofstream(path_, std::ios::binary) << text; }
  std::string text() const {
    std::ostringstream s;
    s << std::ifstream(path_, std::ios::binary).rdbuf();
    return s.str();
  }
  fs::path dir_;
  std::string path_;
};

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonLine, KeepsTheOrderAndEscapesEveryString) {
  JsonLine line;
  line.add("step", int64_t{3}).add("loss", 2.5).add("name", std::string("a\"b\\c\nd\x01") + '\xff');
  line.add("nan", std::numeric_limits<double>::quiet_NaN()).add("inf", INFINITY);
  EXPECT_EQ(line.str(), R"({"step":3,"loss":2.5,"name":"a\"b\\c\nd\u0001)" "\xef\xbf\xbd" R"(","nan":null,"inf":null})");
  const nlohmann::json back = nlohmann::json::parse(line.str());
  EXPECT_EQ(back["name"], "a\"b\\c\nd\x01\xef\xbf\xbd");
}

TEST(JsonLine, NestsObjectsAndRoundsToNineDigits) {
  JsonLine inner;
  inner.add("world_size", 4);
  JsonLine line;
  const std::vector<std::pair<std::string, std::string>> options = {{"lr", "0.001"}, {"metrics", "m \"x\".jsonl"}};
  line.add("run", inner).add("options", options).add("x", 1.0 / 3.0);
  EXPECT_EQ(line.str(), R"({"run":{"world_size":4},"options":{"lr":"0.001","metrics":"m \"x\".jsonl"},"x":0.333333333})");
}

TEST_F(Metrics, EveryLineCarriesItsTime) {
  MetricsWriter w = MetricsWriter::start(path_, false);
  w.write(JsonLine().add("step", int64_t{1}));
  w.close();
  const nlohmann::json row = nlohmann::json::parse(text());
  const std::string time = row["time"];
  ASSERT_EQ(time.size(), 24u) << time;  // 2025-03-01T12:34:56.789Z
  EXPECT_EQ(time[10], 'T');
  EXPECT_EQ(time[19], '.');
  EXPECT_EQ(time.back(), 'Z');
}

TEST_F(Metrics, AFreshRunRefusesAFileHoldingLinesUnlessOverwriting) {
  put("{\"step\":1}\n");
  const std::string message = message_of([&] { MetricsWriter::start(path_, false); });
  EXPECT_NE(message.find("metrics file " + path_), std::string::npos) << message;
  EXPECT_NE(message.find("--overwrite"), std::string::npos) << message;
  EXPECT_EQ(text(), "{\"step\":1}\n");
  MetricsWriter::start(path_, true).close();
  EXPECT_EQ(text(), "");
  MetricsWriter::start(path_, false).close();  // empty: started
  EXPECT_EQ(message_of([&] { MetricsWriter::start(dir_.string(), true); }).find("is a directory") != std::string::npos,
            true);
}

TEST_F(Metrics, AResumeKeepsTheLinesUpToItsStepAndCutsTheRest) {
  const std::string kept = "{\"run\":{}}\n{\"step\":1}\n{\"step\":2}\n{\"step\":2,\"eval_loss\":1.5}\n";
  put(kept + "{\"step\":3}\n{\"resume\":{\"step\":2}}\n{\"step\":3}\n{\"step\":4,\"eval_loss\":1}\n{\"step\":5,\"lo");
  std::string dropped;
  MetricsWriter w = MetricsWriter::resume(path_, 2, dropped);
  EXPECT_NE(dropped.find("dropped 4 line(s) of steps 3..4 after the resumed step 2"), std::string::npos) << dropped;
  EXPECT_NE(dropped.find("cut short by a crash"), std::string::npos) << dropped;
  EXPECT_EQ(text(), kept);
  w.write(JsonLine().add("step", int64_t{3}));
  w.close();
  EXPECT_EQ(text().substr(0, kept.size() + 10), kept + "{\"step\":3,");
}

TEST_F(Metrics, AResumeOfAFileEndingMidRunKeepsItWhole) {
  put("{\"step\":1}\n{\"step\":2}");  // a complete last line without its newline
  std::string dropped;
  MetricsWriter w = MetricsWriter::resume(path_, 2, dropped);
  EXPECT_EQ(dropped, "");
  w.write(JsonLine().add("step", int64_t{3}));
  w.close();
  EXPECT_EQ(text().substr(0, 32), "{\"step\":1}\n{\"step\":2}\n{\"step\":3,");
  MetricsWriter::resume((dir_ / "absent.jsonl").string(), 7, dropped).close();  // started
  EXPECT_TRUE(fs::exists(dir_ / "absent.jsonl"));
}

TEST_F(Metrics, AResumeRefusesALineThatIsNotJson) {
  const std::string damaged = "{\"step\":1}\nnot json\n{\"step\":2}\n";
  put(damaged);
  std::string dropped;
  const std::string message = message_of([&] { MetricsWriter::resume(path_, 1, dropped); });
  EXPECT_NE(message.find("metrics file " + path_ + " line 2 is not JSON"), std::string::npos) << message;
  EXPECT_EQ(text(), damaged);
}

TEST(MetricsWriter, AFailedWriteThrowsNamingTheFile) {
  MetricsWriter w = MetricsWriter::start("/dev/full", false);
  const std::string message = message_of([&] { w.write(JsonLine().add("step", int64_t{1})); });
  EXPECT_NE(message.find("cannot write metrics file /dev/full: No space left on device"), std::string::npos)
      << message;
}
