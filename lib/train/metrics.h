// The metrics file (JSON lines, rank 0): JsonLine builds one object, fields in the order added;
// MetricsWriter starts the file for a fresh run or continues it after a resume, stamps each line
// with its wall-clock "time", and stops the run naming the file when a write fails.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::train {

// One line of JSON: escaped by nlohmann-json; bytes that are not UTF-8 become U+FFFD, so the text
// is valid JSON whatever a name or path holds.
std::string json_text(const nlohmann::ordered_json& value);

// Now as ISO-8601 UTC with milliseconds, e.g. "2025-03-01T12:34:56.789Z": the lines' "time".
std::string utc_time_now();

class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);  // 9 significant digits; non-finite: null
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, int value) { return add(key, int64_t{value}); }
  JsonLine& add(const std::string& key, const std::string& value);
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const std::string& key, const JsonLine& object);  // a nested object
  // A nested object of strings, e.g. option name -> value.
  JsonLine& add(const std::string& key, const std::vector<std::pair<std::string, std::string>>& strings);
  std::string str() const { return json_text(json_); }
  const nlohmann::ordered_json& json() const { return json_; }

 private:
  nlohmann::ordered_json json_ = nlohmann::ordered_json::object();
};

class MetricsWriter {
 public:
  MetricsWriter() = default;  // writes nothing (no --metrics, or not rank 0)
  // A run starting at step 1. A regular file that already holds anything is refused, naming it,
  // unless `overwrite`; an absent or empty file is started, and a device or pipe (/dev/stdout) is
  // written to as it is.
  static MetricsWriter start(const std::string& path, bool overwrite);
  // A run resumed after `step`: keeps the file's lines up to that step (step and evaluation lines
  // by their "step"; the run and resume lines among them) and appends after them. The lines after
  // it (a run that went further than its checkpoint) are cut, as is a last line torn by a crash;
  // `dropped` says what was cut ("" if nothing). A line that is not JSON before the cut is refused.
  static MetricsWriter resume(const std::string& path, int64_t step, std::string& dropped);

  const std::string& path() const { return path_; }
  // Adds "time" (utc_time_now) as the line's last field and writes it, flushed; throws naming the
  // file when the write fails (a full disk).
  void write(JsonLine line);
  // Closes the file; throws naming it when that fails. The destructor closes without a word.
  void close();

 private:
  MetricsWriter(std::string path, const char* mode);
  struct Close {
    void operator()(FILE* f) const { if (f) std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<FILE, Close> file_;
};

}  // namespace tessera::train
