// FolderLock: a checkpoint folder belongs to one running job. Rank 0 creates <dir>/.tessera.lock
// (O_EXCL) holding its host, process id, Slurm job id and start time, and removes it when the run
// ends. A lock left by a job that is gone is taken over (same host and its process dead, or the
// same Slurm job: a requeue); a live one makes the second job stop, naming the first.
#pragma once
#include <string>

#include "comm/communicator.h"

namespace tessera::train {

class FolderLock {
 public:
  FolderLock() = default;
  // Collective over world: throws on every rank when rank 0 cannot take the lock.
  FolderLock(const std::string& dir, comm::Communicator& world);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  FolderLock(FolderLock&& other) noexcept { *this = std::move(other); }
  FolderLock& operator=(FolderLock&& other) noexcept;

  static std::string file_name() { return ".tessera.lock"; }

 private:
  std::string path_;  // rank 0's lock file; empty: none held here
};

}  // namespace tessera::train
