// What every tessera executable shares on its command line: a --config FILE.ini whose keys are
// the long option names, --help in sections with an example, --version, renamed options that still
// work with a warning, and the top-level error handling (one "error:" line, exit code).
#pragma once
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

namespace po = boost::program_options;

// Exit codes: 0 success, 1 runtime error (bad data, failed run), 2 usage error (bad options).
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// The sections --help prints a tool's options under, in this order (a tool uses those it needs).
inline constexpr const char* kModel = "Model";
inline constexpr const char* kData = "Data";
inline constexpr const char* kTraining = "Training";
inline constexpr const char* kLayout = "Layout";
inline constexpr const char* kPrecisionMemory = "Precision and memory";
inline constexpr const char* kCheckpoints = "Checkpoints";
inline constexpr const char* kLogging = "Logging";
inline constexpr const char* kDebugging = "Debugging";

// A tool's options by section: section(kModel).add_options()(...). Sections print in the order of
// kModel ... kDebugging, then any others in the order they were first asked for.
class OptionSections {
 public:
  po::options_description& section(const std::string& title);
  // Options a tool parses but does not offer: another tool's, kept only so that using them gets an
  // error naming the tool that has them (gpt_train --ep 2: "use moe_train"). --help leaves them out.
  po::options_description& foreign() { return foreign_; }
  // Every section, captioned, in print order (what --help prints).
  void add_to(po::options_description& all) const;
  const po::options_description& foreign() const { return foreign_; }

 private:
  std::vector<std::pair<std::string, std::unique_ptr<po::options_description>>> sections_;
  po::options_description foreign_;
};

// An option's old name, still accepted (on the command line and in config files) with a warning
// that names the new one: {"data", "input"}.
struct RenamedOption {
  std::string old_name, name;
};

// What --help prints around the sections: the usage line(s) first, an example last.
struct HelpText {
  std::string tool;     // "gpt_train": --version's first word
  std::string usage;    // "usage: gpt_train --input DATA.h5 [options]" and what the tool does
  std::string example;  // one or more command lines
};

// Parses argv (and the --config file, if given: command-line values win over the file's) into
// `vm`. An option given twice on the command line, or twice in the file, is refused, and so is a
// --config that is not a readable file or a config file that names another (check_parsed).
// Returns false when --help or --version was printed.
bool parse(int argc, char** argv, const OptionSections& options, po::variables_map& vm, const HelpText& help,
           const std::vector<RenamedOption>& renamed = {});

// Renames the old names in `parsed` to their new ones, warning once per use (`where` as for
// check_parsed). The old names must be known to the parser (add_renamed) so that it reads their values.
void apply_renames(po::parsed_options& parsed, const std::vector<RenamedOption>& renamed, const std::string& where);
// Adds each old name to `hidden` (not printed by --help) with its new name's arity.
void add_renamed(po::options_description& hidden, const po::options_description& all,
                 const std::vector<RenamedOption>& renamed);

// --version's text: the tool, tessera's version and commit, the build options and the devices
// compiled in, as configured (apps/common/build_info.h.in).
std::string version_text(const std::string& tool);

// Every option in `vm` as name -> value text, by name (defaults included; --help left out): what a
// run records of its configuration (the metrics file's run line) and what the ranks of a job
// compare before training (check_ranks_started_alike).
std::vector<std::pair<std::string, std::string>> option_values(const po::variables_map& vm);

// The checks every parsed source gets before its values are stored (`where`: "on the command
// line", "in config file x.ini"); each throws po::error naming the option and its value:
// - an option given more than once;
// - a floating-point value that is not finite ("nan", "inf", or out of range such as 1e999);
// - a negative value for an unsigned option (Boost would wrap "-1" to 2^64 - 1).
void check_parsed(const po::parsed_options& parsed, const std::string& where);
inline constexpr const char* kOnCommandLine = "on the command line";  // check_parsed's `where` for argv

// Whether the user gave `name` (on the command line or in the config file), not its default.
bool given(const po::variables_map& vm, const std::string& name);

// A size in bytes: a whole number with an optional suffix K, M or G (KiB, MiB, GiB; "KiB", "MB"
// and the like are read the same). Throws naming `option` on anything else.
int64_t parse_bytes(const std::string& text, const std::string& option);

// Runs body, turning exceptions into one "error: ..." line on stderr and the matching exit code.
int run_main(const std::function<int()>& body);

}  // namespace tessera::cli
