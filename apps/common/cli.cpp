// Command-line parsing with config files, and the top-level error handler of the apps.
#include "apps/common/cli.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "core/log.h"

namespace tessera::cli {
namespace {
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The values of an option as the user wrote them, for messages ("" for a switch).
std::string value_text(const po::option& o) {
  std::string text;
  for (const std::string& v : o.value) text += (text.empty() ? "" : " ") + v;
  return text;
}

// Whether the option's values are parsed as T (po::value<T>).
template <typename T>
bool typed_as(const po::option_description* d) {
  return d && dynamic_cast<const po::typed_value<T>*>(d->semantic().get()) != nullptr;
}

bool is_floating(const po::option_description* d) { return typed_as<double>(d) || typed_as<float>(d); }
bool is_unsigned(const po::option_description* d) {
  return typed_as<unsigned>(d) || typed_as<unsigned long>(d) || typed_as<unsigned long long>(d);
}

// "nan", "inf", "-infinity" and values past the type's range (1e999) parse as doubles in Boost.
bool finite_text(const std::string& text, bool single) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = single ? static_cast<double>(std::strtof(begin, &end)) : std::strtod(begin, &end);
  return end == begin || std::isfinite(value);  // not a number at all: Boost names it
}
// The message of a Boost.Program_options error, safely. Boost 1.74's what() substitutes
// placeholders such as %canonical_option% with user text in a loop that never ends when that text
// itself contains the placeholder (`--%canonical_option%`, or such a key in a config file): every
// '%' in the substituted values is swapped for a byte Boost ignores and restored afterwards.
std::string error_message(const po::error& e) {
  const auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  if (!named) return e.what();
  struct Defused : po::error_with_option_name {
    explicit Defused(const po::error_with_option_name& from) : po::error_with_option_name(from) {
      for (auto& entry : m_substitutions) std::replace(entry.second.begin(), entry.second.end(), '%', '\x01');
      for (auto& entry : m_substitution_defaults) {
        std::replace(entry.second.first.begin(), entry.second.first.end(), '%', '\x01');
        std::replace(entry.second.second.begin(), entry.second.second.end(), '%', '\x01');
      }
    }
  };
  std::string message = Defused(*named).what();
  std::replace(message.begin(), message.end(), '\x01', '%');
  return message;
}
}  // namespace

void check_parsed(const po::parsed_options& parsed, const std::string& where) {
  const std::string at = where == kOnCommandLine ? "" : " " + where;
  for (auto it = parsed.options.begin(); it != parsed.options.end(); ++it) {
    if (it->string_key.empty() || it->unregistered) continue;  // Boost refuses these itself
    const std::string name = "--" + it->string_key;
    for (auto first = parsed.options.begin(); first != it; ++first)
      if (first->string_key == it->string_key) {
        const std::string a = value_text(*first), b = value_text(*it);
        throw po::error(name + " is given more than once " + where +
                        (a.empty() && b.empty() ? "" : " (" + a + ", then " + b + ")") + ": give each option once");
      }
    const po::option_description* d =
        parsed.description ? parsed.description->find_nothrow(it->string_key, false) : nullptr;
    for (const std::string& v : it->value) {
      if (is_floating(d) && !finite_text(v, typed_as<float>(d)))
        throw po::error(name + " " + v + at + ": expected a finite number");
      const size_t digit = v.find_first_not_of(" \t");
      if (is_unsigned(d) && digit != std::string::npos && v[digit] == '-')
        throw po::error(name + " " + v + at + ": expected a whole number >= 0");
    }
  }
}

bool given(const po::variables_map& vm, const std::string& name) {
  const auto it = vm.find(name);
  return it != vm.end() && !it->second.defaulted();
}

int64_t parse_bytes(const std::string& text, const std::string& option) {
  size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = text.substr(used);
  for (const char* unit : {"iB", "B"})
    if (suffix.size() > 1 && suffix.ends_with(unit)) {
      suffix.resize(suffix.size() - std::char_traits<char>::length(unit));
      break;
    }
  const int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
  TESSERA_CHECK(used > 0 && value >= 0 && shift >= 0 && value <= (int64_t{1} << (62 - shift)), option, " ", text,
                ": expected a number of bytes, optionally with K, M or G (KiB, MiB, GiB), e.g. 2G");
  return static_cast<int64_t>(value) << shift;
}

namespace {
// One option's value as text: the shortest text that reads back as the same number.
template <typename T>
bool value_text(const boost::any& value, std::string& text) {
  const T* v = boost::any_cast<T>(&value);
  if (!v) return false;
  if constexpr (std::is_same_v<T, std::string>) {
    text = *v;
  } else if constexpr (std::is_same_v<T, bool>) {
    text = *v ? "true" : "false";
  } else {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, *v);
    text.assign(buf, ec == std::errc() ? end : buf);
  }
  return true;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> option_values(const po::variables_map& vm) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, variable] : vm) {
    if (name == "help" || name == "version") continue;
    const boost::any& value = variable.value();
    std::string text;
    if (value_text<std::string>(value, text) || value_text<bool>(value, text) || value_text<int>(value, text) ||
        value_text<long>(value, text) || value_text<long long>(value, text) || value_text<unsigned>(value, text) ||
        value_text<unsigned long>(value, text) || value_text<unsigned long long>(value, text) ||
        value_text<float>(value, text) || value_text<double>(value, text)) {
      out.emplace_back(name, text);
    } else if (const auto* list = boost::any_cast<std::vector<std::string>>(&value)) {
      for (const std::string& item : *list) text += (text.empty() ? "" : ",") + item;
      out.emplace_back(name, text);
    } else {
      out.emplace_back(name, value.empty() ? "" : "?");
    }
  }
  return out;
}

namespace {
constexpr unsigned kHelpWidth = 110;  // --help's line length (Boost's default is 80)
}  // namespace

po::options_description& OptionSections::section(const std::string& title) {
  for (auto& [name, description] : sections_)
    if (name == title) return *description;
  sections_.emplace_back(title, std::make_unique<po::options_description>(title, kHelpWidth, kHelpWidth / 2));
  return *sections_.back().second;
}

void OptionSections::add_to(po::options_description& all) const {
  const std::vector<std::string> order = {kModel,      kData,   kTraining, kLayout, kPrecisionMemory,
                                          kCheckpoints, kLogging, kDebugging};
  for (const std::string& title : order)
    for (const auto& [name, description] : sections_)
      if (name == title) all.add(*description);
  for (const auto& [name, description] : sections_)
    if (std::find(order.begin(), order.end(), name) == order.end()) all.add(*description);
}

void add_renamed(po::options_description& hidden, const po::options_description& all,
                 const std::vector<RenamedOption>& renamed) {
  for (const RenamedOption& r : renamed) {
    const po::option_description& target = all.find(r.name, false);
    if (target.semantic()->max_tokens() == 0)
      hidden.add_options()(r.old_name.c_str(), po::bool_switch(), "");
    else
      hidden.add_options()(r.old_name.c_str(), po::value<std::string>(), "");
  }
}

void apply_renames(po::parsed_options& parsed, const std::vector<RenamedOption>& renamed, const std::string& where) {
  const std::string at = where == kOnCommandLine ? "" : " " + where;
  for (po::option& o : parsed.options)
    for (const RenamedOption& r : renamed)
      if (o.string_key == r.old_name) {
        log::warn("--", r.old_name, at, " is the old name of --", r.name, ": it still works, but will be",
                  " removed; write --", r.name);
        o.string_key = r.name;
      }
}

bool parse(int argc, char** argv, const OptionSections& options, po::variables_map& vm, const HelpText& help,
           const std::vector<RenamedOption>& renamed) {
  po::options_description general("General", kHelpWidth, kHelpWidth / 2);
  general.add_options()("help,h", "print this help and exit")("version", "print the version, commit, build options and devices, and exit")(
      "config", po::value<std::string>()->value_name("FILE.ini"),
      "read options from an .ini file (keys are long option names: `layers = 6`); the command line wins");
  po::options_description all(kHelpWidth, kHelpWidth / 2);
  options.add_to(all);
  all.add(general);
  po::options_description parsing;  // what the parser knows: every option, and the old names
  parsing.add(all);
  parsing.add(options.foreign());
  po::options_description hidden;
  add_renamed(hidden, parsing, renamed);
  parsing.add(hidden);
  try {
    po::parsed_options command_line = po::parse_command_line(argc, argv, parsing);
    apply_renames(command_line, renamed, kOnCommandLine);
    check_parsed(command_line, kOnCommandLine);
    po::store(command_line, vm);
    if (vm.count("help")) {
      std::cout << help.usage << "\n\n" << all << "\nExample:\n" << help.example << "\n";
      return false;
    }
    if (vm.count("version")) {
      std::cout << version_text(help.tool);
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec))
        throw UsageError("--config " + path + " is a directory: expected an .ini file");
      std::ifstream in(path);
      if (!in) throw UsageError("cannot read config file " + path + ": " + std::strerror(errno));
      po::parsed_options file = po::parse_config_file(in, parsing);
      if (in.bad()) throw UsageError("cannot read config file " + path + ": " + std::strerror(errno));
      const std::string where = "in config file " + path;
      for (const po::option& o : file.options)
        if (o.string_key == "config" || o.string_key == "help" || o.string_key == "version")
          throw UsageError("config file " + path + " sets " + o.string_key +
                           ": only options of the run belong in a config file (one file per run)");
      apply_renames(file, renamed, where);
      check_parsed(file, where);
      po::store(file, vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(error_message(e));
  }
  return true;
}

int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());
    return kExitUsage;
  } catch (const po::error& e) {
    std::fprintf(stderr, "error: %s (see --help)\n", error_message(e).c_str());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitRuntime;
  }
}

}  // namespace tessera::cli
