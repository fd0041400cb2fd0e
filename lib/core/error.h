// tessera::Error and the checks that throw it: every failure carries where it happened and what
// it concerned (file, dataset, parameter, rank), so apps can print one clear "error:" line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws tessera::Error whose message is the arguments streamed together.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

}  // namespace tessera

// TESSERA_CHECK(cond, parts...): throw tessera::Error("parts...") when cond is false.
#define TESSERA_CHECK(cond, ...)                   \
  do {                                             \
    if (!(cond)) ::tessera::fail(__VA_ARGS__);     \
  } while (0)
