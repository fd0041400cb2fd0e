// Logging: one line per message, prefixed with the time since start and, once set, the rank.
#pragma once
#include <string>

#include "core/error.h"

namespace tessera::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3 };

void set_rank(int rank);            // prefix lines with "[rank N]" (multi-rank runs)
void set_level(Level level);        // lines below the level are dropped (errors never are)
bool enabled(Level level);          // whether lines of `level` are written
// "debug", "info", "warn" or "error" (--log-level); throws naming the choices.
Level parse_level(const std::string& name);
void write(Level level, const std::string& line);

template <typename... Args>
void info(const Args&... args) { write(Level::info, detail::concat(args...)); }
template <typename... Args>
void warn(const Args&... args) { write(Level::warn, detail::concat(args...)); }
template <typename... Args>
void error(const Args&... args) { write(Level::error, detail::concat(args...)); }
template <typename... Args>
void debug(const Args&... args) { write(Level::debug, detail::concat(args...)); }

}  // namespace tessera::log
