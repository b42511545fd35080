// Outputs never destroy what they name: a report replaces a regular file (or creates one) atomically,
// follows a symbolic link to replace its target, writes through a character device, a FIFO or standard
// output, and refuses a directory or a block device. As root (usual in CI containers) a rename over
// /dev/null would replace the machine's device node, so the nodes here are made in a temporary folder.

#include "normcheck/core/errors.hpp"
#include "normcheck/io/files.hpp"

#include "process.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

const std::string reference_cases = std::string(NORMCHECK_CASES_DIR) + "/reference";

bool is_root() { return ::geteuid() == 0; }

mode_t kind_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & S_IFMT;
}

// The reading end of a FIFO, opened without waiting for a writer: opened before the writer starts, as a
// consumer would, so that the writer always finds a reader however the processes are scheduled.
int open_fifo_reader(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(fd >= 0);
  return fd;
}

// What the FIFO's reader `fd` receives within `seconds`: it reads until the writer, once it came, closes. A
// writer that never comes gives "" instead of a hang. Closes `fd`.
std::string read_fifo(int fd, double seconds) {
  std::string received;
  bool writer_seen = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    char buffer[4096];
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      received.append(buffer, static_cast<std::size_t>(n));
      writer_seen = true;
    } else if (n == 0 && writer_seen) {
      break;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ::close(fd);
  return received;
}

hardening::process_result check_with(const std::string& option, const std::string& path) {
  return hardening::run_process({NORMCHECK_EXECUTABLE, "check", option, path, reference_cases});
}

}  // namespace

TEST_CASE("--output to a character device writes through it and leaves the node a device") {
  if (!is_root()) {
    MESSAGE("skipped: making a device node needs root");
    return;
  }
  hardening::temporary_directory dir;
  const std::string null = dir / "null";
  REQUIRE(::mknod(null.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0);
  const hardening::process_result result = check_with("--output", null);
  CHECK(result.status == 0);
  CHECK(kind_of(null) == S_IFCHR);
  for (const auto& entry : fs::directory_iterator(dir.path)) CHECK(entry.path().filename() == "null");
}

TEST_CASE("--output to a full device fails with io_error and leaves the node") {
  if (!is_root()) {
    MESSAGE("skipped: making a device node needs root");
    return;
  }
  hardening::temporary_directory dir;
  const std::string full = dir / "full";
  REQUIRE(::mknod(full.c_str(), S_IFCHR | 0666, ::makedev(1, 7)) == 0);
  const hardening::process_result result = check_with("--output", full);
  CHECK(result.status == 2);
  CHECK(result.err.find("io_error") != std::string::npos);
  CHECK(kind_of(full) == S_IFCHR);
}

TEST_CASE("a block device is refused, not written") {
  if (!is_root()) {
    MESSAGE("skipped: making a device node needs root");
    return;
  }
  hardening::temporary_directory dir;
  const std::string disk = dir / "disk";
  REQUIRE(::mknod(disk.c_str(), S_IFBLK | 0600, ::makedev(7, 0)) == 0);
  const hardening::process_result result = check_with("--junit", disk);
  CHECK(result.status == 2);
  CHECK(result.err.find("block device") != std::string::npos);
  CHECK(kind_of(disk) == S_IFBLK);
}

TEST_CASE("--junit through a symbolic link replaces the link's target and keeps the link") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "target.xml", "stale");
  fs::create_symlink("target.xml", dir / "report.xml");
  const hardening::process_result result = check_with("--junit", dir / "report.xml");
  CHECK(result.status == 0);
  CHECK(kind_of(dir / "report.xml") == S_IFLNK);
  CHECK(hardening::slurp(dir / "target.xml").rfind("<?xml", 0) == 0);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++entries;
  CHECK(entries == 2);
  SUBCASE("a link to a file not there yet creates the target") {
    fs::create_symlink("later.json", dir / "dangling.json");
    CHECK(check_with("--output", dir / "dangling.json").status == 0);
    CHECK(kind_of(dir / "dangling.json") == S_IFLNK);
    CHECK(hardening::slurp(dir / "later.json").rfind("{\"format\"", 0) == 0);
  }
}

TEST_CASE("--output to a FIFO writes the report through to its reader") {
  hardening::temporary_directory dir;
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  const int reading_end = open_fifo_reader(fifo);  // before the writer starts: no race with it
  std::thread reader([&] { received = read_fifo(reading_end, 20); });
  const hardening::process_result result = check_with("--output", fifo);
  reader.join();
  CHECK(result.status == 0);
  CHECK(received.rfind("{\"format\": \"normcheck-report/1\"", 0) == 0);
  CHECK(kind_of(fifo) == S_IFIFO);
  SUBCASE("a FIFO without a reader is an error, not a hang") {
    const hardening::process_result unread = check_with("--output", fifo);
    CHECK(unread.status == 2);
    CHECK(unread.err.find("io_error") != std::string::npos);
  }
}

TEST_CASE("--output to a link to standard output writes the report on standard output") {
  hardening::temporary_directory dir;
  fs::create_symlink("/proc/self/fd/1", dir / "stdout");
  const hardening::process_result result = check_with("--output", dir / "stdout");
  CHECK(result.status == 0);
  CHECK(result.out.find("{\"format\": \"normcheck-report/1\"") != std::string::npos);
  CHECK(result.out.find("9 files: 9 passed") != std::string::npos);  // the text report is still there
  CHECK(kind_of(dir / "stdout") == S_IFLNK);
}

TEST_CASE("--output naming a directory is io_error and leaves it") {
  hardening::temporary_directory dir;
  fs::create_directory(dir / "reports");
  const hardening::process_result result = check_with("--output", dir / "reports");
  CHECK(result.status == 2);
  CHECK(result.err.find("io_error") != std::string::npos);
  CHECK(fs::is_directory(dir / "reports"));
}

TEST_CASE("an empty output path is misuse, never silently ignored") {
  for (const char* option : {"--output", "--junit"}) {
    const hardening::process_result result = check_with(option, "");
    CHECK(result.status == 2);
    CHECK(result.err.find("empty") != std::string::npos);
  }
  CHECK(hardening::run_process({NORMCHECK_EXECUTABLE, "suggest", "-o", ""}).status == 2);
}

TEST_CASE("SIGTERM or SIGINT during a write removes the temporary file") {
  for (int signal_number : {SIGTERM, SIGINT}) {
    hardening::temporary_directory dir;
    const std::string temporary = dir / "report.json.tmp.test";
    const pid_t child = ::fork();
    if (child == 0) {
      hardening::write_text(temporary, "half a report");
      normcheck::install_signal_handlers();  // as the executable does
      const normcheck::temporary_file_guard guard(temporary);
      ::raise(signal_number);
      ::_exit(0);  // not reached: the signal ends the process
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == signal_number);
    CHECK_FALSE(fs::exists(temporary));
  }
}

TEST_CASE("without install_signal_handlers a guard leaves SIGTERM to the process") {
  hardening::temporary_directory dir;
  const std::string temporary = dir / "report.json.tmp.test";
  const pid_t child = ::fork();
  if (child == 0) {
    hardening::write_text(temporary, "half a report");
    const normcheck::temporary_file_guard guard(temporary);
    ::raise(SIGTERM);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(fs::exists(temporary));  // the library removed nothing: no handler of its own ran
}

TEST_CASE("--output naming a descriptor (/dev/fd/1, /proc/self/fd/1) writes through it, as /dev/stdout does") {
  for (const char* descriptor : {"/dev/fd/1", "/proc/self/fd/1", "/dev/stdout"}) {
    CAPTURE(descriptor);
    const hardening::process_result result = check_with("--output", descriptor);
    CAPTURE(result.err);
    CHECK(result.status == 0);
    CHECK(result.out.find("9 files: 9 passed") != std::string::npos);  // the text report was not replaced
    CHECK(result.out.find("{\"format\": \"normcheck-report/1\"") != std::string::npos);
  }
}

namespace {

mode_t permissions_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

}  // namespace

TEST_CASE("a replaced report keeps the replaced file's permissions, a new one takes the umask's") {
  hardening::temporary_directory dir;
  SUBCASE("replacing a private file keeps it private") {
    hardening::write_text(dir / "private.json", "old");
    REQUIRE(::chmod((dir / "private.json").c_str(), 0600) == 0);
    CHECK(check_with("--output", dir / "private.json").status == 0);
    CHECK(permissions_of(dir / "private.json") == 0600);
    CHECK(hardening::slurp(dir / "private.json").rfind("{\"format\"", 0) == 0);
  }
  SUBCASE("replacing a group-writable file keeps it so") {
    hardening::write_text(dir / "shared.xml", "old");
    REQUIRE(::chmod((dir / "shared.xml").c_str(), 0664) == 0);
    CHECK(check_with("--junit", dir / "shared.xml").status == 0);
    CHECK(permissions_of(dir / "shared.xml") == 0664);
  }
  SUBCASE("a new file honours the umask") {
    const mode_t previous = ::umask(077);
    const hardening::process_result result = check_with("--output", dir / "new.json");
    ::umask(previous);
    CHECK(result.status == 0);
    CHECK(permissions_of(dir / "new.json") == 0600);
    const mode_t open_umask = ::umask(002);
    CHECK(check_with("--output", dir / "newer.json").status == 0);
    ::umask(open_umask);
    CHECK(permissions_of(dir / "newer.json") == 0664);
  }
}

TEST_CASE("an output that names one of the inputs is refused, and the input left as it was") {
  hardening::temporary_directory dir;
  const std::string input = dir / "dump.json";
  const std::string content = hardening::slurp(reference_cases + "/01_global_mean.json");
  hardening::write_text(input, content);
  fs::create_symlink("dump.json", dir / "link.json");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"check", "--output", input, input},
        std::vector<std::string>{"check", "--junit", dir / "link.json", input},
        std::vector<std::string>{"check", "--output", input, dir.path}}) {
    const hardening::process_result result = hardening::run_process(
        [&] {
          std::vector<std::string> command{NORMCHECK_EXECUTABLE};
          command.insert(command.end(), args.begin(), args.end());
          return command;
        }());
    CAPTURE(result.err);
    CHECK(result.status == 2);
    CHECK(result.err.find("usage_error") != std::string::npos);
    CHECK(result.err.find("which is also an input") != std::string::npos);
    CHECK(hardening::slurp(input) == content);
  }
  SUBCASE("suggest --counts with -o onto the counts file") {
    hardening::write_text(dir / "counts.json", R"({"counts": [[3, 1], [2]]})");
    const hardening::process_result result = hardening::run_process(
        {NORMCHECK_EXECUTABLE, "suggest", "--counts", dir / "counts.json", "-o", dir / "counts.json"});
    CHECK(result.status == 2);
    CHECK(hardening::slurp(dir / "counts.json") == R"({"counts": [[3, 1], [2]]})");
  }
}
