// MetricsWriter: one JSON object per line (rank 0), fields in the order they are added.
#pragma once
#include <cstdio>
#include <memory>
#include <string>

namespace tessera::train {

class JsonLine {
 public:
  JsonLine& add(const std::string& key, double value);
  JsonLine& add(const std::string& key, int64_t value);
  JsonLine& add(const std::string& key, const std::string& value);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

class MetricsWriter {
 public:
  MetricsWriter() = default;
  explicit MetricsWriter(const std::string& path);  // empty path: write nothing
  void write(const JsonLine& line);

 private:
  struct Close {
    void operator()(FILE* f) const { if (f) std::fclose(f); }
  };
  std::unique_ptr<FILE, Close> file_;
};

}  // namespace tessera::train
