#include "normcheck/io/files.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/utf8.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <sys/mman.h>
#include <utility>
#include <cerrno>
#include <climits>
#include <ctime>
#include <csignal>
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

// A descriptor read to its end within the size limit: standard input (a pipe, a terminal or a file), or a
// regular file whose size says nothing (/proc and /sys report 0 for files that hold text).
std::string read_to_end(int fd, const std::string& name, const reader_limits& limits) {
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_reading(name, error_code::io_error, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) return text;
    if (text.size() + static_cast<std::size_t>(n) > limits.max_file_size)
      fail_reading(name, error_code::limit_exceeded,
                   "holds more than the limit of " + std::to_string(limits.max_file_size) +
                       " bytes (--max-file-size raises it)");
    text.append(buffer, static_cast<std::size_t>(n));
  }
}

std::string load_standard_input(const reader_limits& limits) {
  return read_to_end(0, std::string(standard_input_name), limits);
}

// What says that a file is still the one that was opened, with the content that was read: the same inode
// of the same device, the same size, and neither its content (modification time) nor its inode (change
// time) touched since.
file_identity file_identity_of(const struct stat& info) {
  file_identity id;
  id.device = static_cast<std::uint64_t>(info.st_dev);
  id.inode = static_cast<std::uint64_t>(info.st_ino);
  id.size = static_cast<std::uint64_t>(info.st_size);
  id.modified_seconds = static_cast<std::int64_t>(info.st_mtim.tv_sec);
  id.modified_nanoseconds = static_cast<std::int64_t>(info.st_mtim.tv_nsec);
  id.changed_seconds = static_cast<std::int64_t>(info.st_ctim.tv_sec);
  id.changed_nanoseconds = static_cast<std::int64_t>(info.st_ctim.tv_nsec);
  return id;
}

// Files mapped while they are read. A file that shrinks under its mapping makes reading past its new end
// raise SIGBUS; the handler maps a page of zeros there instead and marks the mapping, so that the read goes
// on and ends (the zeros are not JSON) and require_unchanged() reports io_error. A SIGBUS anywhere else
// is handed back to the default action. The registry is a fixed table of atomics: the handler neither
// allocates nor locks (mmap is a system call on Linux, safe in a handler there).
struct mapping_slot {
  std::atomic<bool> claimed{false};
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> shrank{false};
};
constexpr int mapping_slots = 64;
mapping_slot mappings[mapping_slots];
std::uintptr_t page_size = 4096;
struct sigaction previous_bus_error {};

extern "C" void on_bus_error(int, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (mapping_slot& slot : mappings) {
    const std::uintptr_t begin = slot.begin.load();
    if (begin == 0 || address < begin || address >= slot.end.load()) continue;
    void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
    if (::mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      slot.shrank = true;
      return;  // the faulting read is done again, and reads zeros
    }
    break;
  }
  ::sigaction(SIGBUS, &previous_bus_error, nullptr);  // not ours: the fault recurs under the old action
}

void install_bus_error_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO;
    ::sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &previous_bus_error);
  });
}

// Whether the process let normcheck own SIGBUS, SIGTERM and SIGINT (install_signal_handlers).
std::atomic<bool> signal_handlers_allowed{false};

// A free slot of the registry, or -1 when all are in use or the process keeps its signals to itself (the
// file is then read into memory).
int claim_mapping_slot() {
  if (!signal_handlers_allowed.load()) return -1;
  install_bus_error_handler();
  for (int i = 0; i < mapping_slots; ++i) {
    bool expected = false;
    if (mappings[i].claimed.compare_exchange_strong(expected, true)) return i;
  }
  return -1;
}

void watch_mapping(int slot, const char* begin, std::size_t size) {
  mappings[slot].shrank = false;
  mappings[slot].end = reinterpret_cast<std::uintptr_t>(begin) + size;
  mappings[slot].begin = reinterpret_cast<std::uintptr_t>(begin);
}

bool mapping_shrank(int slot) { return mappings[slot].shrank.load(); }

void release_mapping_slot(int slot) {
  mappings[slot].begin = 0;
  mappings[slot].end = 0;
  mappings[slot].claimed = false;
}

}  // namespace

input_text open_input(const std::filesystem::path& path, const reader_limits& limits) {
  input_text input;
  if (path == "-") {
    input.owned_ = load_standard_input(limits);
    return input;
  }
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
  input.name_ = name;
  input.fd_ = fd;  // closed with `input`, kept open so that a change of size can be seen after reading
  struct stat info {};
  if (::fstat(fd, &info) != 0) reject(error_code::io_error, std::string("cannot be examined: ") + std::strerror(errno));
  if (S_ISDIR(info.st_mode))
    reject(error_code::io_error,
           ::access(path.c_str(), R_OK | X_OK) != 0
               ? "is a directory that cannot be read (permission denied): its files were not checked"
               : "is a directory where a file was expected");
  if (!S_ISREG(info.st_mode))
    reject(error_code::io_error, "is not a regular file (a device, FIFO or socket is not read)");
  if (static_cast<std::uint64_t>(info.st_size) > limits.max_file_size)
    reject(error_code::limit_exceeded, "is " + std::to_string(info.st_size) + " bytes, more than the limit of " +
                                           std::to_string(limits.max_file_size) + " bytes (--max-file-size raises it)");
  input.seen_ = file_identity_of(info);
  if (info.st_size == 0) {
    // Empty, or a file that does not know its size (/proc, /sys): read to its end within the limit.
    input.owned_ = read_to_end(fd, name, limits);
    input.size_ = input.owned_.size();
    return input;
  }
  input.size_ = static_cast<std::size_t>(info.st_size);
  if ((input.slot_ = claim_mapping_slot()) >= 0) {
    // Mapped, not copied: the text is the page cache itself, read in at once (MAP_POPULATE).
    void* mapped = ::mmap(nullptr, input.size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (mapped != MAP_FAILED) {
      input.mapped_ = static_cast<const char*>(mapped);
      watch_mapping(input.slot_, input.mapped_, input.size_);
      return input;
    }
    release_mapping_slot(input.slot_);
    input.slot_ = -1;
  }
  // Not mapped (no free slot, a file system without mmap): read into memory.
  input.owned_.resize(input.size_);
  std::size_t filled = 0;
  while (filled < input.owned_.size()) {
    const ssize_t n = ::read(fd, input.owned_.data() + filled, input.owned_.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) reject(error_code::io_error, std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) break;
    filled += static_cast<std::size_t>(n);
  }
  if (filled != input.owned_.size()) reject(error_code::io_error, "changed size while it was read");
  return input;
}

std::string load_file(const std::filesystem::path& path, const reader_limits& limits) {
  input_text input = open_input(path, limits);
  std::string text(input.view());
  input.require_unchanged();
  return text;
}

input_text::input_text(input_text&& other) noexcept { *this = std::move(other); }

input_text& input_text::operator=(input_text&& other) noexcept {
  if (this != &other) {
    close();
    name_ = std::move(other.name_);
    owned_ = std::move(other.owned_);
    mapped_ = std::exchange(other.mapped_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
    slot_ = std::exchange(other.slot_, -1);
    seen_ = other.seen_;
  }
  return *this;
}

input_text::~input_text() { close(); }

void input_text::close() noexcept {
  if (mapped_) ::munmap(const_cast<char*>(mapped_), size_);
  if (slot_ >= 0) release_mapping_slot(slot_);
  if (fd_ >= 0) ::close(fd_);
  mapped_ = nullptr;
  slot_ = -1;
  fd_ = -1;
}

std::string_view input_text::view() const noexcept {
  return mapped_ ? std::string_view(mapped_, size_) : std::string_view(owned_);
}

void input_text::require_unchanged() const {
  if (fd_ < 0) return;  // standard input: read to its end
  struct stat info {};
  const bool shrank_under_mapping = slot_ >= 0 && mapping_shrank(slot_);
  if (shrank_under_mapping || ::fstat(fd_, &info) != 0 || info.st_size != static_cast<off_t>(seen_.size))
    fail_reading(name_, error_code::io_error, "changed size while it was read");
  const file_identity now = file_identity_of(info);
  struct stat named {};
  if (::stat(name_.c_str(), &named) != 0 || static_cast<std::uint64_t>(named.st_dev) != seen_.device ||
      static_cast<std::uint64_t>(named.st_ino) != seen_.inode)
    fail_reading(name_, error_code::io_error,
                 "was replaced (renamed over, or removed) while it was read: its name no longer holds what was read");
  if (now.modified_seconds != seen_.modified_seconds || now.modified_nanoseconds != seen_.modified_nanoseconds ||
      now.changed_seconds != seen_.changed_seconds || now.changed_nanoseconds != seen_.changed_nanoseconds)
    fail_reading(name_, error_code::io_error,
                 "was modified while it was read (its modification or change time moved): what was read may mix "
                 "two versions, so it has no verdict");
}


namespace {

// The path a guard protects, kept where a signal handler can read it without allocating.
char guarded_path[4096];
volatile std::sig_atomic_t guarding = 0;
struct sigaction previous_terminate {};
struct sigaction previous_interrupt {};

extern "C" void remove_guarded_file(int signal_number) {
  if (guarding) ::unlink(guarded_path);
  // Die of the same signal, as the interrupted process would have without the guard.
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

[[noreturn]] void fail_writing(const std::string& path, const std::string& what, int cause) {
  location where;
  where.file = path;
  throw error(error_code::io_error, cause ? what + ": " + std::strerror(cause) : what, where);
}

// Where a report for `path` goes: the file to replace atomically, or a descriptor, device or FIFO to
// write through. Symbolic links are followed to the file they name; a link into /proc/*/fd or /dev/fd
// (/dev/stdout is one) names an open descriptor and is written through.
struct output_target {
  std::string path;
  bool write_through = false;
};

// Whether `path` is an entry of a process's descriptor table: its folder is /proc/PID/fd or
// /proc/PID/task/TID/fd once resolved (/dev/fd and /proc/self/fd are links to one).
bool names_open_descriptor(const std::filesystem::path& path) {
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  char resolved[PATH_MAX];
  if (::realpath(folder.c_str(), resolved) == nullptr) return false;
  const std::string_view text = resolved;
  if (text.rfind("/proc/", 0) != 0 || text.size() < 4 || text.substr(text.size() - 3) != "/fd") return false;
  // /proc/PID/fd or /proc/PID/task/TID/fd: two or four parts between /proc and fd.
  const std::string_view middle = text.substr(6, text.size() - 6 - 3);
  const auto parts = static_cast<std::size_t>(std::count(middle.begin(), middle.end(), '/')) + 1;
  return !middle.empty() && (parts == 1 || (parts == 3 && middle.find("/task/") != std::string_view::npos));
}

output_target resolve_output(const std::string& path) {
  std::filesystem::path current = path;
  for (int hops = 0; hops <= 40; ++hops) {
    if (names_open_descriptor(current)) return {current.string(), true};
    struct stat link {};
    if (::lstat(current.c_str(), &link) != 0) {
      if (errno == ENOENT) return {current.string(), false};  // created, beside its missing name
      fail_writing(path, "cannot be examined", errno);
    }
    if (!S_ISLNK(link.st_mode)) {
      struct stat info {};
      if (::stat(current.c_str(), &info) != 0) fail_writing(path, "cannot be examined", errno);
      if (S_ISDIR(info.st_mode)) fail_writing(path, "is a directory where a report file was expected", 0);
      if (S_ISBLK(info.st_mode)) fail_writing(path, "is a block device: a report is not written onto a disk", 0);
      return {current.string(), !S_ISREG(info.st_mode)};  // a character device, FIFO or socket: written through
    }
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(current, ec);
    if (ec) fail_writing(path, "its symbolic link cannot be read", ec.value());
    const std::string text = target.string();
    if (text.rfind("/proc/", 0) == 0 && text.find("/fd/") != std::string::npos) return {path, true};
    if (text.rfind("/dev/fd/", 0) == 0) return {path, true};
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  fail_writing(path, "is a loop of symbolic links", 0);
}

// Appends `content` to what `path` names (a device, a FIFO, a descriptor), without replacing it.
void write_through(const std::string& path, std::string_view content) {
  // Not blocking on a FIFO that nobody reads; blocking again once open, to write it all.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    fail_writing(path, errno == ENXIO ? "is a FIFO or socket that no process reads" : "cannot be opened for writing",
                 errno == ENXIO ? 0 : errno);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int cause = n < 0 ? errno : EIO;
      ::close(fd);
      fail_writing(path, "cannot write", cause);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) fail_writing(path, "cannot write", errno);
}

// A new file beside `target` for its replacement, created with `mode` (the umask applies), and its name.
int create_temporary(const std::string& shown, const std::string& target, mode_t mode, std::string& temporary) {
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    struct timespec now {};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const std::uint64_t salt =
        (static_cast<std::uint64_t>(now.tv_nsec) << 20) ^ static_cast<std::uint64_t>(::getpid()) ^ (counter++ << 40);
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp.%012llx", static_cast<unsigned long long>(salt & 0xFFFFFFFFFFFFull));
    temporary = target + suffix;
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd >= 0 || errno != EEXIST) {
      if (fd < 0) fail_writing(shown, "cannot create a temporary file beside it", errno);
      return fd;
    }
  }
  fail_writing(shown, "cannot create a temporary file beside it", EEXIST);
}

// Writes a temporary file beside `target`, flushes it, renames it over `target` and flushes the directory.
// The new file takes the permissions of the file it replaces, or those a new file gets (0666 less the
// umask) when there is none.
void replace_atomically(const std::string& shown, const std::string& target, std::string_view content) {
  struct stat replaced {};
  const bool replacing = ::stat(target.c_str(), &replaced) == 0 && S_ISREG(replaced.st_mode);
  std::string temporary;
  // Created with no more permissions than the replaced file has, so that its content is never more exposed.
  const int fd = create_temporary(shown, target, replacing ? (replaced.st_mode & 0666) : 0666, temporary);
  const temporary_file_guard guard(temporary);
  auto abandon = [&](const std::string& what) {
    const int cause = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    fail_writing(shown, what, cause);
  };
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) abandon("cannot write");
    written += static_cast<std::size_t>(n);
  }
  if (replacing && ::fchmod(fd, replaced.st_mode & 07777) != 0)
    abandon("cannot give it the replaced file's permissions");
  if (::fsync(fd) != 0) abandon("cannot flush");
  ::close(fd);
  if (std::rename(temporary.c_str(), target.c_str()) != 0) {
    const int cause = errno;
    ::unlink(temporary.c_str());
    fail_writing(shown, "cannot rename the temporary file over it", cause);
  }
  // The rename is durable once the directory that holds the name is flushed too.
  const std::filesystem::path where(target);
  const std::filesystem::path parent = where.has_parent_path() ? where.parent_path() : std::filesystem::path(".");
  const int directory = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory < 0 || ::fsync(directory) != 0) {
    const int cause = errno;
    if (directory >= 0) ::close(directory);
    fail_writing(shown, "written in full, but its directory could not be flushed to disk", cause);
  }
  ::close(directory);
}

}  // namespace

temporary_file_guard::temporary_file_guard(const std::string& path) {
  if (!signal_handlers_allowed.load()) return;
  const std::size_t length = std::min(path.size(), sizeof guarded_path - 1);
  std::memcpy(guarded_path, path.data(), length);
  guarded_path[length] = '\0';
  struct sigaction action {};
  action.sa_handler = remove_guarded_file;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, &previous_terminate);
  ::sigaction(SIGINT, &action, &previous_interrupt);
  guarding = 1;
}

temporary_file_guard::~temporary_file_guard() {
  if (!guarding) return;
  guarding = 0;
  ::sigaction(SIGTERM, &previous_terminate, nullptr);
  ::sigaction(SIGINT, &previous_interrupt, nullptr);
}

void install_signal_handlers() { signal_handlers_allowed = true; }

void refuse_output_over_inputs(std::string_view option, const std::filesystem::path& output,
                               const std::vector<std::filesystem::path>& inputs) {
  struct stat written {};
  if (output.empty() || ::stat(output.c_str(), &written) != 0 || !S_ISREG(written.st_mode)) return;
  for (const std::filesystem::path& input : inputs) {
    struct stat read {};
    if (input == "-" || ::stat(input.c_str(), &read) != 0) continue;
    if (read.st_dev == written.st_dev && read.st_ino == written.st_ino)
      throw error(error_code::usage_error,
                  std::string(option) + " names " + escaped_name(output.string()) + ", which is also an input (" +
                      escaped_name(input.string()) +
                      "): the report would replace the document it is about; name another file");
  }
}

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  const std::string shown = path.string();
  if (shown.empty()) throw error(error_code::usage_error, "an output path must not be empty");
  const output_target target = resolve_output(shown);
  if (target.write_through) write_through(target.path, content);
  else replace_atomically(shown, target.path, content);
}

}  // namespace normcheck
