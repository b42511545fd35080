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

namespace {

[[noreturn]] void fail_reading(const std::string& name, error_code code, const std::string& why) {
  location where;
  where.file = name;
  throw error(code, why, where);
}

// Standard input, read to its end within the size limit (it may be a pipe, a terminal or a file).
std::string load_standard_input(const reader_limits& limits) {
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(0, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_reading(std::string(standard_input_name), error_code::io_error, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) return text;
    if (text.size() + static_cast<std::size_t>(n) > limits.max_file_size)
      fail_reading(std::string(standard_input_name), error_code::limit_exceeded,
             "holds more than the limit of " + std::to_string(limits.max_file_size) +
                 " bytes (--max-file-size raises it)");
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string load_file(const std::filesystem::path& path, const reader_limits& limits) {
  if (path == "-") return load_standard_input(limits);
  const std::string name = path.string();
  auto reject = [&](error_code code, const std::string& why) { fail_reading(name, code, why); };
  // Opened without blocking (a FIFO would wait for a writer) and examined through the open
  // descriptor, so that what is examined is what is read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat seen {};
  if (fd < 0 && errno == EACCES && ::stat(path.c_str(), &seen) == 0 && S_ISDIR(seen.st_mode))
    reject(error_code::io_error, "is a directory that cannot be read (permission denied): its files were not checked");
  if (fd < 0) {
    const int cause = errno;
    reject(error_code::io_error, cause == ENOENT  ? "cannot open: no such file (or a symbolic link to nothing)"
                                 : cause == ELOOP   ? "cannot open: a loop of symbolic links"
                                 : cause == EACCES  ? "cannot open: permission denied"
                                 : cause == ENOTDIR ? "cannot open: a part of the path is not a directory"
                                 : cause == ENXIO   ? "is not a regular file (a socket or device is not read)"
                                                    : std::string("cannot open: ") + std::strerror(cause));
  }
  struct descriptor {
    int fd;
    ~descriptor() { ::close(fd); }
  } open_file{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) reject(error_code::io_error, std::string("cannot be examined: ") + std::strerror(errno));
  if (S_ISDIR(info.st_mode))
    reject(error_code::io_error, ::access(path.c_str(), R_OK | X_OK) != 0
                                     ? "is a directory that cannot be read (permission denied): its files were not checked"
                                     : "is a directory where a file was expected");
  if (!S_ISREG(info.st_mode)) reject(error_code::io_error, "is not a regular file (a device, FIFO or socket is not read)");
  if (static_cast<std::uint64_t>(info.st_size) > limits.max_file_size)
    reject(error_code::limit_exceeded, "is " + std::to_string(info.st_size) + " bytes, more than the limit of " +
                                           std::to_string(limits.max_file_size) + " bytes (--max-file-size raises it)");
  std::string text(static_cast<std::size_t>(info.st_size), '\0');
  std::size_t filled = 0;
  while (filled < text.size()) {
    const ssize_t n = ::read(fd, text.data() + filled, text.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) reject(error_code::io_error, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) break;
    filled += static_cast<std::size_t>(n);
  }
  char more = 0;
  if (filled != text.size() || ::read(fd, &more, 1) > 0)
    reject(error_code::io_error, "changed size while it was read");
  return text;
}


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
