// Reading input files (io/files.hpp): a regular file is read whole (mapped); anything else is io_error, a
// file above the size limit limit_exceeded, and a file that changes while read (its size, its inode, its
// modification or change time) io_error. The atomic writer has its own tests in tests/hardening/.

#include "normcheck/io/files.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using normcheck::error;
using normcheck::reader_limits;

// A scratch file under the temporary directory, removed at the end of the test.
struct scratch_file {
  std::filesystem::path path;
  explicit scratch_file(std::string_view name, std::string_view content)
      : path(std::filesystem::temp_directory_path() /
             ("normcheck_files_test_" + std::to_string(::getpid()) + "_" + std::string(name))) {
    std::ofstream(path, std::ios::binary) << content;
  }
  ~scratch_file() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace

TEST_CASE("load_file reads a regular file whole") {
  const scratch_file file("load.json", "{\"a\": 1}\n");
  CHECK(normcheck::load_file(file.path) == "{\"a\": 1}\n");
}

TEST_CASE("load_file rejects missing paths and directories with io_error") {
  const std::filesystem::path missing = std::filesystem::temp_directory_path() / "normcheck_files_test_missing.json";
  try {
    (void)normcheck::load_file(missing);
    FAIL("a missing file was read");
  } catch (const error& e) {
    CHECK(e.code() == normcheck::error_code::io_error);
    REQUIRE(e.where().has_value());
    CHECK(e.where()->file == missing.string());
  }
  try {
    (void)normcheck::load_file(std::filesystem::temp_directory_path());
    FAIL("a directory was read");
  } catch (const error& e) {
    CHECK(e.code() == normcheck::error_code::io_error);
  }
}

TEST_CASE("load_file rejects a file above the size limit with limit_exceeded") {
  const scratch_file file("large.json", std::string(100, ' '));
  reader_limits limits;
  limits.max_file_size = 99;
  try {
    (void)normcheck::load_file(file.path, limits);
    FAIL("a file above the limit was read");
  } catch (const error& e) {
    CHECK(e.code() == normcheck::error_code::limit_exceeded);
  }
  limits.max_file_size = 100;
  CHECK(normcheck::load_file(file.path, limits).size() == 100);
}

// Where nothing called install_signal_handlers, as in a training process that loaded the Python extension:
// CTest runs each test case in a process of its own, and the program run alone (doctest's order, by file
// and line) reaches this case before the next one installs the handlers for good.
TEST_CASE("without install_signal_handlers no signal disposition changes and inputs are read, not mapped") {
  auto disposition = [](int signal_number) {
    struct sigaction now {};
    ::sigaction(signal_number, nullptr, &now);
    return reinterpret_cast<std::uintptr_t>(now.sa_handler);
  };
  const std::uintptr_t bus = disposition(SIGBUS), terminate = disposition(SIGTERM), interrupt = disposition(SIGINT);
  std::string content(256 * 1024, ' ');
  content.front() = '{';
  content.back() = '}';
  const scratch_file file("unmapped.json", content);
  const normcheck::input_text input = normcheck::open_input(file.path);
  std::filesystem::resize_file(file.path, 10);
  CHECK(input.view() == content);  // a copy: what a mapping would have turned into zeros is still there
  const scratch_file report("report.json", "");
  normcheck::write_file_atomically(report.path, "{}\n");
  CHECK(normcheck::load_file(report.path) == "{}\n");
  CHECK(disposition(SIGBUS) == bus);
  CHECK(disposition(SIGTERM) == terminate);
  CHECK(disposition(SIGINT) == interrupt);
}

TEST_CASE("a mapped file that shrinks while it is read reads as zeros and is reported changed, never SIGBUS") {
  std::string content(256 * 1024, ' ');
  content.front() = '{';
  content.back() = '}';
  const scratch_file file("shrinking.json", content);
  normcheck::install_signal_handlers();  // as the executable does: without it the file is read, not mapped
  const normcheck::input_text input = normcheck::open_input(file.path);
  REQUIRE(input.view().size() == content.size());
  std::filesystem::resize_file(file.path, 10);
  // Every page past the new end would raise SIGBUS; the handler puts zeros there instead.
  std::size_t zeros = 0;
  for (char c : input.view()) zeros += c == '\0';
  CHECK(zeros > content.size() - 8192);
  CHECK(input.view().substr(0, 10) == content.substr(0, 10));
  try {
    input.require_unchanged();
    FAIL("a shrunk file was not reported");
  } catch (const normcheck::error& e) {
    CHECK(e.code() == normcheck::error_code::io_error);
    CHECK(e.message().find("changed size while it was read") != std::string::npos);
  }
}

TEST_CASE("a file that grows after it was opened is reported changed") {
  const scratch_file file("growing.json", "{\"a\": 1}\n");
  const normcheck::input_text input = normcheck::open_input(file.path);
  CHECK(input.view() == "{\"a\": 1}\n");
  std::ofstream(file.path, std::ios::app) << "more";
  CHECK_THROWS_AS(input.require_unchanged(), normcheck::error);
}

TEST_CASE("an empty file is read, not mapped") {
  const scratch_file file("empty.json", "");
  const normcheck::input_text input = normcheck::open_input(file.path);
  CHECK(input.view().empty());
  CHECK_NOTHROW(input.require_unchanged());
}

namespace {

// Moves the file's modification and change times to the past, so that a write now moves them whatever the
// clock tick of the file system's timestamps.
void age(const std::filesystem::path& path) {
  const struct timespec past[2] = {{946684800, 0}, {946684800, 0}};  // 2000-01-01
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), past, 0) == 0);
}

// Rewrites `path` in place (same inode, same size) with `content`.
void rewrite_in_place(const std::filesystem::path& path, std::string_view content) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, content.data(), content.size(), 0) == static_cast<ssize_t>(content.size()));
  ::close(fd);
}

std::string rejection_of(const normcheck::input_text& input) {
  try {
    input.require_unchanged();
  } catch (const normcheck::error& e) {
    return std::string(normcheck::code_name(e.code())) + ": " + e.message();
  }
  return "";
}

}  // namespace

TEST_CASE("a file rewritten in place at the same size while it is read is reported changed") {
  SUBCASE("mapped") {
    std::string before(64 * 1024, ' ');
    before.front() = '{';
    before.back() = '}';
    std::string after = before;
    after[1] = '\n';
    const scratch_file file("rewritten_mapped.json", before);
    age(file.path);
    const normcheck::input_text input = normcheck::open_input(file.path);
    rewrite_in_place(file.path, after);
    const std::string rejected = rejection_of(input);
    CHECK(rejected.rfind("io_error: ", 0) == 0);
    CHECK(rejected.find("modified while it was read") != std::string::npos);
  }
  SUBCASE("small") {
    const scratch_file file("rewritten_small.json", "{\"a\": 1}\n");
    age(file.path);
    const normcheck::input_text input = normcheck::open_input(file.path);
    rewrite_in_place(file.path, "{\"a\": 2}\n");
    CHECK(rejection_of(input).rfind("io_error: ", 0) == 0);
  }
  SUBCASE("a file only touched (its times moved, the content the same) is reported too") {
    const scratch_file file("touched.json", "{\"a\": 1}\n");
    age(file.path);
    const normcheck::input_text input = normcheck::open_input(file.path);
    REQUIRE(::utimensat(AT_FDCWD, file.path.c_str(), nullptr, 0) == 0);
    CHECK(rejection_of(input).rfind("io_error: ", 0) == 0);
  }
  SUBCASE("an untouched file is not") {
    const scratch_file file("untouched.json", "{\"a\": 1}\n");
    age(file.path);
    const normcheck::input_text input = normcheck::open_input(file.path);
    CHECK(rejection_of(input).empty());
  }
}

TEST_CASE("a file replaced by a rename while it is read is reported replaced") {
  const scratch_file file("replaced.json", "{\"a\": 1}\n");
  const scratch_file other("replacement.json", "{\"a\": 2}\n");
  const normcheck::input_text input = normcheck::open_input(file.path);
  std::filesystem::rename(other.path, file.path);
  // The descriptor still reads the old inode, which no name holds now: its link count and change time moved.
  CHECK(rejection_of(input).rfind("io_error: ", 0) == 0);
}

TEST_CASE("a file that says it is empty but holds text (/proc, /sys) is read to its end") {
  REQUIRE(std::filesystem::file_size("/proc/self/status") == 0);
  const std::string status = normcheck::load_file("/proc/self/status");
  CHECK(status.find("Pid:") != std::string::npos);
  reader_limits limits;
  limits.max_file_size = 16;
  CHECK_THROWS_AS(normcheck::load_file("/proc/self/status", limits), normcheck::error);
}

