// JSON-lines metrics: lines built and escaped by nlohmann-json, the file started, continued after a
// resume, and every write checked.
#include "train/metrics.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {
std::string error_text(int err) { return err != 0 ? std::strerror(err) : "the write failed"; }
}  // namespace

std::string json_text(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string utc_time_now() {
  const auto now = std::chrono::system_clock::now();
  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &utc);
  char text[48];
  std::snprintf(text, sizeof text, "%s.%03dZ", date, static_cast<int>(ms % 1000));
  return text;
}

JsonLine& JsonLine::add(const std::string& k, double v) {
  if (!std::isfinite(v)) {
    json_[k] = nullptr;
  } else {
    char buf[32];  // the 9 significant digits the file has always had
    std::snprintf(buf, sizeof buf, "%.9g", v);
    json_[k] = std::strtod(buf, nullptr);
  }
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, int64_t v) {
  json_[k] = v;
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const std::string& v) {
  json_[k] = v;
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const JsonLine& object) {
  json_[k] = object.json_;
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const std::vector<std::pair<std::string, std::string>>& strings) {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (const auto& [name, value] : strings) object[name] = value;
  json_[k] = std::move(object);
  return *this;
}

MetricsWriter::MetricsWriter(std::string path, const char* mode) : path_(std::move(path)) {
  file_.reset(std::fopen(path_.c_str(), mode));
  TESSERA_CHECK(file_, "cannot open metrics file ", path_, " for writing: ", error_text(errno));
}

MetricsWriter MetricsWriter::start(const std::string& path, bool overwrite) {
  if (path.empty()) return {};
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return MetricsWriter(path, "w");
  TESSERA_CHECK(!fs::is_directory(status), "--metrics ", path, " is a directory");
  if (!fs::is_regular_file(status)) return MetricsWriter(path, "a");  // /dev/stdout, a pipe: never truncated
  const uintmax_t size = fs::file_size(path, ec);
  TESSERA_CHECK(overwrite || ec || size == 0, "metrics file ", path, " already holds ", size,
                " bytes (the lines of an earlier run), and this run starts at step 1: continue that run with",
                " --resume auto|FILE, move the file away, or give --overwrite to replace it");
  return MetricsWriter(path, "w");
}

MetricsWriter MetricsWriter::resume(const std::string& path, int64_t step, std::string& dropped) {
  dropped.clear();
  if (path.empty()) return {};
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return MetricsWriter(path, "w");
  TESSERA_CHECK(!fs::is_directory(status), "--metrics ", path, " is a directory");
  if (!fs::is_regular_file(status)) return MetricsWriter(path, "a");

  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, "cannot read metrics file ", path, " to continue it: ", error_text(errno));
  // The cut: the start of the first line of a step after `step` (or of a torn last line).
  int64_t offset = 0, cut = -1, line_number = 0, dropped_lines = 0;
  int64_t first_dropped = -1, last_dropped = -1;
  bool torn = false, ends_with_newline = true;
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    const bool newline = !in.eof();  // getline stopped at a '\n', not at the end of the file
    const int64_t start = offset;
    offset += static_cast<int64_t>(line.size()) + (newline ? 1 : 0);
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded()) {
      if (!newline) {  // the last line, cut short by a crash while it was written
        torn = true;
        if (cut < 0) cut = start;
        continue;
      }
      if (cut >= 0) {
        ++dropped_lines;
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line
      fail("metrics file ", path, " line ", line_number, " is not JSON, so this resumed run cannot continue the",
           " file: move it away or mend that line");
    }
    const bool has_step = row.is_object() && row.contains("step") && row["step"].is_number();
    const int64_t row_step = has_step ? row["step"].get<int64_t>() : 0;
    if (cut < 0 && has_step && row_step > step) cut = start;
    if (cut >= 0) {
      ++dropped_lines;
      if (has_step) {
        if (first_dropped < 0) first_dropped = row_step;
        last_dropped = row_step;
      }
      continue;
    }
    ends_with_newline = newline;
  }
  TESSERA_CHECK(!in.bad(), "cannot read metrics file ", path, " to continue it: ", error_text(errno));
  in.close();
  if (cut >= 0) {
    // The lines cut are kept beside the file (<path>.after_step_<N>[.k]), never deleted: a run
    // resumed from an earlier checkpoint trains their steps again.
    std::string kept = path + ".after_step_" + std::to_string(step);
    for (int k = 2; fs::exists(kept); ++k) kept = path + ".after_step_" + std::to_string(step) + "." + std::to_string(k);
    {
      std::ifstream from(path, std::ios::binary);
      from.seekg(cut);
      std::ofstream to(kept, std::ios::binary);
      to << from.rdbuf();
      to.flush();
      TESSERA_CHECK(from && to, "cannot keep the cut lines of metrics file ", path, " in ", kept);
    }
    fs::resize_file(path, static_cast<uintmax_t>(cut), ec);
    TESSERA_CHECK(!ec, "cannot cut metrics file ", path, " after step ", step, ": ", ec.message());
    if (dropped_lines > 0)
      dropped = "metrics file " + path + ": dropped " + std::to_string(dropped_lines) + " line(s) of steps " +
                std::to_string(first_dropped) + ".." + std::to_string(last_dropped) + " after the resumed step " +
                std::to_string(step) + " (they will be trained again; kept in " + kept + ")";
    if (torn) dropped += std::string(dropped.empty() ? "metrics file " + path + ": dropped" : ", and") +
                         " a last line cut short by a crash";
  }
  MetricsWriter writer(path, "a");
  if (cut < 0 && !ends_with_newline) {  // a complete last line without its newline: end it first
    errno = 0;
    if (std::fputc('\n', writer.file_.get()) == EOF || std::fflush(writer.file_.get()) != 0)
      fail("cannot write metrics file ", path, ": ", error_text(errno));
  }
  return writer;
}

void MetricsWriter::write(JsonLine line) {
  if (!file_) return;
  line.add("time", utc_time_now());
  const std::string text = line.str() + "\n";
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), file_.get()) != text.size() || std::fflush(file_.get()) != 0)
    fail("cannot write metrics file ", path_, ": ", error_text(errno));
}

void MetricsWriter::close() {
  FILE* f = file_.release();
  errno = 0;
  if (f && std::fclose(f) != 0) fail("cannot write metrics file ", path_, ": ", error_text(errno));
}

}  // namespace tessera::train
