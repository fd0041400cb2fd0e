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

// Parses argv (and the --config file, if given: command-line values win; a repeated option takes
// its last value) into `vm`.
// Returns false when --help was printed.
bool parse(int argc, char** argv, const po::options_description& options, po::variables_map& vm,
           const std::string& usage);

// Every option in `vm` as name -> value text, by name (defaults included; --help left out): what a
// run records of its configuration (the metrics file's run line) and what the ranks of a job
// compare before training (check_ranks_started_alike).
std::vector<std::pair<std::string, std::string>> option_values(const po::variables_map& vm);

// A size in bytes: a whole number with an optional suffix K, M or G (KiB, MiB, GiB; "KiB", "MB"
// and the like are read the same). Throws naming `option` on anything else.
int64_t parse_bytes(const std::string& text, const std::string& option);

// Runs body, turning exceptions into one "error: ..." line on stderr and the matching exit code.
int run_main(const std::function<int()>& body);

}  // namespace tessera::cli
