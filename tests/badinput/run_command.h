// run_command: runs a shell command for the badinput tests and returns its exit code, stdout and
// stderr (header-only, POSIX popen), plus shell_quote for building command lines safely.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;  // the command's exit status; 128 + signal number when killed by a signal
  std::string out;     // everything written to stdout
  std::string err;     // everything written to stderr
};

// 'arg' for /bin/sh: single-quoted, with embedded single quotes escaped.
inline std::string shell_quote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `command` with /bin/sh; stdin is /dev/null. Stderr goes through a temporary file so that
// neither stream can block the other.
inline CommandResult run_command(const std::string& command) {
  char err_path[] = "/tmp/tessera_run_command_XXXXXX";
  const int fd = mkstemp(err_path);
  if (fd < 0) throw std::runtime_error("run_command: cannot create a temporary file");
  close(fd);
  const std::string full = "( " + command + " ) </dev/null 2>" + shell_quote(err_path);
  CommandResult r;
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) {
    std::remove(err_path);
    throw std::runtime_error("run_command: popen failed for: " + command);
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  if (status == -1) r.exit_code = -1;
  else if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) r.exit_code = 128 + WTERMSIG(status);
  std::ifstream err(err_path, std::ios::binary);
  std::ostringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  std::remove(err_path);
  return r;
}

}  // namespace tessera::testing
