// The checkpoint folder's lock file: who holds it, and whether that holder is gone.
#include "train/folder_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "comm/string_exchange.h"
#include "core/error.h"
#include "core/log.h"

namespace tessera::train {
namespace {

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::string slurm_job() {
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

// The holder a lock file names: "host <h>\npid <p>\nslurm_job <j>\nsince <t>\n".
struct Holder {
  std::string host, slurm_job, since;
  long pid = 0;
  std::string describe() const {
    return "host " + host + ", process " + std::to_string(pid) +
           (slurm_job.empty() ? std::string() : ", Slurm job " + slurm_job) + (since.empty() ? "" : ", since " + since);
  }
};

Holder read_holder(const std::string& path) {
  Holder h;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space), value = space == std::string::npos ? "" : line.substr(space + 1);
    if (key == "host") h.host = value;
    if (key == "pid") h.pid = std::atol(value.c_str());
    if (key == "slurm_job") h.slurm_job = value;
    if (key == "since") h.since = value;
  }
  return h;
}

// Why the lock's holder is gone ("" while it may still run): this very Slurm job (a requeued job
// runs again under its id), or a process of this host that no longer exists. A job torn down by its
// launcher may take a few seconds to exit: a holder on this host is given 10 s to go.
std::string gone(const Holder& h) {
  if (!h.slurm_job.empty() && h.slurm_job == slurm_job()) return "it is this Slurm job's earlier run (requeued)";
  if (h.host != this_host() || h.pid <= 0) return "";
  for (int i = 0; i < 100; ++i) {
    if (kill(static_cast<pid_t>(h.pid), 0) != 0 && errno == ESRCH) return "its process no longer runs";
    usleep(100000);
  }
  return "";
}

// Rank 0: creates the lock (taking over one whose holder is gone); "" or why it cannot.
std::string take(const std::string& path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      const std::time_t now = std::time(nullptr);
      char since[32];
      std::strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      std::ostringstream text;
      text << "host " << this_host() << "\npid " << getpid() << "\nslurm_job " << slurm_job() << "\nsince " << since
           << "\n";
      const std::string s = text.str();
      const bool written = ::write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
      ::close(fd);
      if (!written) return "cannot write the lock file " + path + ": " + std::strerror(errno);
      return "";
    }
    if (errno != EEXIST) return "cannot create the lock file " + path + ": " + std::strerror(errno);
    const Holder holder = read_holder(path);
    const std::string reason = gone(holder);
    if (reason.empty() || attempt > 0)
      return "the checkpoint folder is in use by another job (" + holder.describe() + "; lock file " + path +
             "): two runs must not write one folder. If that job no longer runs, remove the lock file";
    log::warn("taking over the lock ", path, " of ", holder.describe(), ": ", reason);
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  return "cannot take the lock " + path;
}

}  // namespace

FolderLock::FolderLock(const std::string& dir, comm::Communicator& world) {
  const std::string path = (std::filesystem::path(dir) / file_name()).string();
  const std::string problem = world.rank() == 0 ? take(path) : std::string();
  const std::string said = comm::broadcast_string(problem, world);
  TESSERA_CHECK(said.empty(), said);
  if (world.rank() == 0) path_ = path;
}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  std::swap(path_, other.path_);
  return *this;
}

FolderLock::~FolderLock() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

}  // namespace tessera::train
