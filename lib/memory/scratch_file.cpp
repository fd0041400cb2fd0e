// ScratchFile: mkstemp in the directory, unlink at once, ftruncate to size; pread/pwrite loops.
#include "memory/scratch_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tessera::memory {
namespace {

// mkstemp on dir/tessera-<purpose>-XXXXXX, already unlinked; -1 and errno on failure.
int create_unlinked(const std::string& dir, const std::string& purpose) {
  std::string path = dir + "/tessera-" + purpose + "-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd >= 0) ::unlink(name.data());
  return fd;
}

}  // namespace

ScratchFile::ScratchFile(const std::string& dir, int64_t bytes, const std::string& purpose)
    : dir_(dir), purpose_(purpose), bytes_(bytes) {
  fd_ = create_unlinked(dir, purpose);
  TESSERA_CHECK(fd_ >= 0, "cannot create a scratch file for ", purpose, " in '", dir, "': ", std::strerror(errno));
  if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    TESSERA_CHECK(false, "cannot size the scratch file for ", purpose, " in '", dir, "' to ", bytes,
                  " bytes: ", std::strerror(err));
  }
}

ScratchFile::~ScratchFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ScratchFile::read(int64_t offset, void* dst, int64_t bytes) const {
  char* at = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t got = ::pread(fd_, at, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    TESSERA_CHECK(got > 0, "reading the scratch file for ", purpose_, " in '", dir_, "' at byte ", offset, ": ",
                  got < 0 ? std::strerror(errno) : "unexpected end of file");
    at += got;
    offset += got;
    bytes -= got;
  }
}

void ScratchFile::write(int64_t offset, const void* src, int64_t bytes) {
  const char* at = static_cast<const char*>(src);
  while (bytes > 0) {
    const ssize_t put = ::pwrite(fd_, at, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (put < 0 && errno == EINTR) continue;
    TESSERA_CHECK(put > 0, "writing the scratch file for ", purpose_, " in '", dir_, "' at byte ", offset, ": ",
                  put < 0 ? std::strerror(errno) : "nothing written (disk full?)");
    at += put;
    offset += put;
    bytes -= put;
  }
}

void check_scratch_dir(const std::string& dir, const std::string& option) {
  TESSERA_CHECK(!dir.empty(), option, " is required");
  const int fd = create_unlinked(dir, "probe");
  TESSERA_CHECK(fd >= 0, option, " '", dir, "': cannot create files there: ", std::strerror(errno));
  const char byte = 0;
  const bool wrote = ::pwrite(fd, &byte, 1, 0) == 1;
  const int err = errno;
  ::close(fd);
  TESSERA_CHECK(wrote, option, " '", dir, "': cannot write files there: ", std::strerror(err));
}

}  // namespace tessera::memory
