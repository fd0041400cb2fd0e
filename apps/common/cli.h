// What every tessera executable shares on its command line: a --config FILE.ini whose keys are
// the long option names, --help, and the top-level error handling (one "error:" line, exit code).
#pragma once
#include <boost/program_options.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

namespace po = boost::program_options;

// Exit codes: 0 success, 1 runtime error (bad data, failed run), 2 usage error (bad options).
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// Parses argv (and the --config file, if given: command-line values win over the file's) into
// `vm`. An option given twice on the command line, or twice in the file, is refused, and so is a
// --config that is not a readable file or a config file that names another (check_parsed).
// Returns false when --help was printed.
bool parse(int argc, char** argv, const po::options_description& options, po::variables_map& vm,
           const std::string& usage);

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
