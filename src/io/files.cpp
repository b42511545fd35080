#include "normcheck/io/files.hpp"

#include "normcheck/core/errors.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <string>
#include <unistd.h>

namespace normcheck {

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  const std::string target = path.string();
  auto fail = [&](const std::string& what) {
    location where;
    where.file = target;
    throw error(error_code::io_error, what + ": " + std::strerror(errno), where);
  };
  std::string temporary = target + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) fail("cannot create a temporary file beside it");
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      ::unlink(temporary.c_str());
      fail("cannot write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::fchmod(fd, 0644) != 0) {
    ::close(fd);
    ::unlink(temporary.c_str());
    fail("cannot flush");
  }
  ::close(fd);
  if (std::rename(temporary.c_str(), target.c_str()) != 0) {
    ::unlink(temporary.c_str());
    fail("cannot rename the temporary file over it");
  }
  // The rename is durable once the directory that holds the name is flushed too.
  const std::filesystem::path parent = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int directory = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory < 0 || ::fsync(directory) != 0) {
    if (directory >= 0) ::close(directory);
    fail("written in full, but its directory could not be flushed to disk");
  }
  ::close(directory);
}

}  // namespace normcheck
