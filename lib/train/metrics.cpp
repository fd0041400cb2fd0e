// JSON-lines metrics.
#include "train/metrics.h"

#include <cmath>

#include "core/error.h"

namespace tessera::train {

void JsonLine::key(const std::string& k) {
  if (!body_.empty()) body_ += ", ";
  body_ += "\"" + k + "\": ";
}

JsonLine& JsonLine::add(const std::string& k, double v) {
  key(k);
  if (!std::isfinite(v)) {
    body_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    body_ += buf;
  }
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}

JsonLine& JsonLine::add(const std::string& k, const std::string& v) {
  key(k);
  body_ += "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') body_ += '\\';
    body_ += c;
  }
  body_ += "\"";
  return *this;
}

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  file_.reset(std::fopen(path.c_str(), "w"));
  TESSERA_CHECK(file_, "cannot open metrics file ", path, " for writing");
}

void MetricsWriter::write(const JsonLine& line) {
  if (!file_) return;
  std::fprintf(file_.get(), "%s\n", line.str().c_str());
  std::fflush(file_.get());
}

}  // namespace tessera::train
