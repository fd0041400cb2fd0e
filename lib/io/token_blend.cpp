// parse_blend: --input 'a.h5:0.7,b.h5:0.3' and --input @blend.txt into checked (path, weight) pairs.
#include "io/token_blend.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::io {
namespace {

// A weight as text, or nullopt when it is not a whole number literal ("0.7", "3", "1e-2").
std::optional<double> number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

void check_weights(const std::vector<BlendSource>& sources, const std::string& input) {
  double sum = 0;
  for (const BlendSource& s : sources) {
    TESSERA_CHECK(!s.path.empty(), "--input ", input, ": a blend source without a path");
    TESSERA_CHECK(std::isfinite(s.weight), "--input ", input, ": the weight of ", s.path, " is not finite");
    TESSERA_CHECK(s.weight >= 0, "--input ", input, ": the weight of ", s.path, " is negative (", s.weight,
                  "); blend weights must be >= 0");
    sum += s.weight;
  }
  TESSERA_CHECK(sum > 0, "--input ", input, ": the blend weights sum to zero; give at least one source a",
                " positive weight");
}

std::vector<BlendSource> read_blend_file(const std::string& path, const std::string& input) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), "--input ", input, ": cannot read the blend file ", path);
  std::vector<BlendSource> sources;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::istringstream fields(t);
    std::string file, weight, extra;
    fields >> file >> weight;
    const bool more = static_cast<bool>(fields >> extra);
    const std::optional<double> w = number(weight);
    if (file.empty() || !w || more)
      fail("blend file ", path, " line ", n, ": expected 'PATH WEIGHT' (a path and a number), got '", t, "'");
    sources.push_back({file, *w});
  }
  TESSERA_CHECK(!sources.empty(), "blend file ", path, ": no 'PATH WEIGHT' line");
  return sources;
}

}  // namespace

std::optional<std::vector<BlendSource>> parse_blend(const std::string& input) {
  std::vector<BlendSource> sources;
  if (!input.empty() && input[0] == '@') {
    sources = read_blend_file(input.substr(1), input);
  } else {
    // One plain path: no comma and no ':NUMBER' suffix (a path may hold ':' elsewhere).
    const auto weighted = [](const std::string& entry) {
      const size_t colon = entry.rfind(':');
      return colon != std::string::npos && number(entry.substr(colon + 1)).has_value();
    };
    if (input.find(',') == std::string::npos && !weighted(input)) return std::nullopt;
    std::stringstream entries(input);
    std::string entry;
    while (std::getline(entries, entry, ',')) {
      entry = trim(entry);
      const size_t colon = entry.rfind(':');
      const std::optional<double> w =
          colon == std::string::npos ? std::nullopt : number(entry.substr(colon + 1));
      if (!w)
        fail("--input ", input, ": blend entry '", entry, "' is not PATH:WEIGHT (each source of a blend needs",
             " its weight, e.g. 'a.h5:0.7,b.h5:0.3')");
      sources.push_back({entry.substr(0, colon), *w});
    }
  }
  check_weights(sources, input);
  return sources;
}

std::string blend_text(const std::vector<BlendSource>& sources) {
  std::ostringstream out;
  out.precision(17);
  for (size_t i = 0; i < sources.size(); ++i) out << (i ? "," : "") << sources[i].path << ":" << sources[i].weight;
  return out.str();
}

}  // namespace tessera::io
