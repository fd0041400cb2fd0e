// Logging sink: stderr for warnings and errors, stdout for the rest.
#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace tessera::log {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(Level::info)};
const auto g_start = std::chrono::steady_clock::now();
}  // namespace

void set_rank(int rank) { g_rank = rank; }
void set_level(Level level) { g_level = static_cast<int>(level < Level::error ? level : Level::error); }
bool enabled(Level level) { return static_cast<int>(level) >= g_level; }

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  fail("--log-level ", name, ": expected debug, info, warn or error");
}

void write(Level level, const std::string& line) {
  if (static_cast<int>(level) < g_level) return;
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - g_start).count();
  static const char* names[] = {"debug", "info", "warn", "error"};
  FILE* out = level >= Level::warn ? stderr : stdout;
  if (g_rank >= 0)
    std::fprintf(out, "[%8.2fs] [rank %d] %s: %s\n", t, g_rank.load(), names[static_cast<int>(level)], line.c_str());
  else
    std::fprintf(out, "[%8.2fs] %s: %s\n", t, names[static_cast<int>(level)], line.c_str());
  std::fflush(out);
}

}  // namespace tessera::log
