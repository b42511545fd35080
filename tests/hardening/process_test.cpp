// Hostile input through the real executable: the bombs (time and peak memory of the process), paths
// that are not partition files, and a standard output that is a closed pipe.

#include "process.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace {

using hardening::output_to;
using hardening::process_result;
using hardening::run_process;

// Sanitizers multiply memory (shadow memory, quarantine): the bound applies to the normal build.
#ifdef NORMCHECK_SANITIZED
constexpr long peak_bound_kib = 1024 * 1024;
#else
constexpr long peak_bound_kib = 64 * 1024;
#endif

const std::string normcheck = NORMCHECK_EXECUTABLE;
const std::string good_case = std::string(NORMCHECK_CASES_DIR) + "/reference/01_global_mean.json";

process_result check(const std::vector<std::string>& args, output_to stdout_to = output_to::file) {
  std::vector<std::string> command{normcheck, "check"};
  command.insert(command.end(), args.begin(), args.end());
  return run_process(command, stdout_to);
}

std::string prefix = R"({"format": "normcheck/1", "ranks": [{"targets": [)";

// Runs one bomb, prints what it cost and checks the verdict and the memory bound. The content is
// written and released before the run: a forked child starts with its parent's resident pages, and
// they count toward its peak.
void defuse(const std::string& name, const std::function<std::string()>& make, const std::string& code,
            const std::string& names) {
  hardening::temporary_directory dir;
  const std::string path = dir / (name + ".json");
  std::size_t size = 0;
  {
    const std::string content = make();
    size = content.size();
    hardening::write_text(path, content);
  }
  const process_result result = check({path});
  std::printf("bomb %-26s %9zu bytes: exit %d in %.3f s, peak %ld KiB\n", name.c_str(), size, result.status,
              result.seconds, result.peak_kib);
  CAPTURE(name);
  CAPTURE(result.out);
  CHECK_FALSE(result.timed_out);
  CHECK(result.status == 2);
  CHECK(result.out.find(code) != std::string::npos);
  CHECK(result.out.find(names) != std::string::npos);
  CHECK(result.peak_kib < peak_bound_kib);
}

}  // namespace

TEST_CASE("the bombs are rejected quickly in little memory") {
  // The schema rejects the first unexpected array; the brackets are never closed, so it is also cut off.
  defuse("million_brackets", [] { return prefix + std::string(1000000, '['); }, "schema_error", "found an array");
  defuse("million_brackets_skipped", [] { return "{\"x\": " + std::string(1000000, '['); }, "schema_error",
         "unknown key");
  defuse("ten_million_digits", [] { return prefix + std::string(10000000, '9') + "]}]}"; }, "number_out_of_range",
         "--max-digits");
  defuse("ten_million_digit_string", [] { return prefix + "\"" + std::string(10000000, '1') + "\"]}]}"; },
         "number_out_of_range", "--max-digits");
  defuse("huge_decimal_exponent", [] { return prefix + "1e999999999]}]}"; }, "number_out_of_range", "--max-exponent");
  defuse("huge_binary_exponent", [] { return prefix + "\"0x1p-99999999\"]}]}"; }, "number_out_of_range",
         "--max-exponent");
  defuse("ten_million_exponent_digits", [] { return prefix + "1e" + std::string(10000000, '9') + "]}]}"; },
         "number_out_of_range", "--max-exponent");
}

TEST_CASE("a file above the size limit is limit_exceeded before it is read") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "big.json", prefix + std::string(5000, '1') + "]}]}");
  const process_result result = check({"--max-file-size", "1000", dir / "big.json"});
  CHECK(result.status == 2);
  CHECK(result.out.find("limit_exceeded") != std::string::npos);
  CHECK(result.out.find("--max-file-size") != std::string::npos);
  CHECK(check({"--max-file-size", "10000", dir / "big.json"}).status == 0);
}

TEST_CASE("the limit options raise the limits") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "e.json", prefix + "1e10001]}]}");
  hardening::write_text(dir / "d.json", prefix + std::string(100001, '1') + "]}]}");
  CHECK(check({dir / "e.json"}).status == 2);
  CHECK(check({"--max-exponent", "10001", dir / "e.json"}).status == 0);
  CHECK(check({dir / "d.json"}).status == 2);
  CHECK(check({"--max-digits", "100001", dir / "d.json"}).status == 0);
  CHECK(check({"--max-depth", "100000", dir / "e.json"}).status == 2);
  CHECK(check({"--max-depth", "100001", dir / "e.json"}).status == 2);  // beyond the option's range: misuse
}

TEST_CASE("paths that are not partition files are each reported and the others still checked") {
  hardening::temporary_directory dir;
  const std::string fifo = dir / "fifo.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  REQUIRE(::symlink((dir / "nothing.json").c_str(), (dir / "dangling.json").c_str()) == 0);
  REQUIRE(::symlink((dir / "loop_b.json").c_str(), (dir / "loop_a.json").c_str()) == 0);
  REQUIRE(::symlink((dir / "loop_a.json").c_str(), (dir / "loop_b.json").c_str()) == 0);
  const process_result result = check({good_case, fifo, dir / "dangling.json", dir / "loop_a.json", "/dev/zero",
                                       dir / "missing.json", good_case});
  CAPTURE(result.out);
  CHECK_FALSE(result.timed_out);
  CHECK(result.status == 2);
  CHECK(result.out.find("7 files: 2 passed, 0 failed, 5 rejected") != std::string::npos);
  CHECK(result.out.find("fifo.json: io_error: is not a regular file") != std::string::npos);
  CHECK(result.out.find("dangling.json: io_error: cannot open: no such file") != std::string::npos);
  CHECK(result.out.find("loop_a.json: io_error: cannot open: a loop of symbolic links") != std::string::npos);
  CHECK(result.out.find("/dev/zero: io_error: is not a regular file") != std::string::npos);
}

TEST_CASE("a directory is walked for its json files, broken entries reported") {
  hardening::temporary_directory dir;
  REQUIRE(::mkdir((dir / "sub").c_str(), 0755) == 0);
  hardening::write_text(dir / "sub/a.json", hardening::slurp(good_case));
  hardening::write_text(dir / "notes.txt", "not json, not walked");
  REQUIRE(::mkfifo((dir / "sub/fifo.json").c_str(), 0644) == 0);
  REQUIRE(::symlink("nowhere.json", (dir / "sub/dangling.json").c_str()) == 0);
  REQUIRE(::symlink(dir.path.c_str(), (dir / "sub/cycle").c_str()) == 0);  // not followed: no endless walk
  const process_result result = check({dir.path});
  CAPTURE(result.out);
  CHECK_FALSE(result.timed_out);
  CHECK(result.status == 2);
  CHECK(result.out.find("3 files: 1 passed, 0 failed, 2 rejected") != std::string::npos);
}

TEST_CASE("an unreadable file is reported and the others still checked") {
  hardening::temporary_directory dir;
  const std::string locked = dir / "locked.json";
  hardening::write_text(locked, hardening::slurp(good_case));
  REQUIRE(::chmod(locked.c_str(), 0) == 0);
  process_result result;
  if (::geteuid() == 0) {
    // root reads any file: run the check as an ordinary user instead, with copies it can reach.
    std::filesystem::copy_file(normcheck, dir / "normcheck");
    std::filesystem::copy_file(good_case, dir / "good.json");
    const std::string command = "setpriv --reuid=65534 --regid=65534 --clear-groups " + (dir / "normcheck") + " check " +
                                locked + " " + (dir / "good.json") + " > " + (dir / "out.txt") + " 2>&1; echo $? > " +
                                (dir / "status.txt");
    REQUIRE(std::system(command.c_str()) == 0);
    result.out = hardening::slurp(dir / "out.txt");
    result.status = std::stoi(hardening::slurp(dir / "status.txt"));
  } else {
    result = check({locked, good_case});
  }
  CAPTURE(result.out);
  CHECK(result.status == 2);
  CHECK(result.out.find("locked.json: io_error: cannot open: permission denied") != std::string::npos);
  CHECK(result.out.find("2 files: 1 passed, 0 failed, 1 rejected") != std::string::npos);
}

TEST_CASE("an unreadable subdirectory is reported, not skipped") {
  hardening::temporary_directory dir;
  REQUIRE(::mkdir((dir / "cases").c_str(), 0755) == 0);
  REQUIRE(::mkdir((dir / "cases/locked").c_str(), 0755) == 0);
  hardening::write_text(dir / "cases/good.json", hardening::slurp(good_case));
  hardening::write_text(dir / "cases/locked/hidden.json", hardening::slurp(good_case));
  REQUIRE(::chmod((dir / "cases/locked").c_str(), 0) == 0);
  process_result result;
  if (::geteuid() == 0) {
    // root enters any directory: run the check as an ordinary user instead.
    std::filesystem::copy_file(normcheck, dir / "normcheck");
    const std::string command = "setpriv --reuid=65534 --regid=65534 --clear-groups " + (dir / "normcheck") + " check " +
                                (dir / "cases") + " > " + (dir / "out.txt") + " 2>&1; echo $? > " + (dir / "status.txt");
    REQUIRE(std::system(command.c_str()) == 0);
    result.out = hardening::slurp(dir / "out.txt");
    result.status = std::stoi(hardening::slurp(dir / "status.txt"));
  } else {
    result = check({dir / "cases"});
  }
  REQUIRE(::chmod((dir / "cases/locked").c_str(), 0755) == 0);  // so that the directory can be removed
  CAPTURE(result.out);
  CHECK(result.status == 2);
  CHECK(result.out.find("locked: io_error: is a directory that cannot be read (permission denied)") != std::string::npos);
  CHECK(result.out.find("2 files: 1 passed, 0 failed, 1 rejected") != std::string::npos);
}

TEST_CASE("a closed standard output ends the run quietly") {
  // As in `normcheck check cases | head -n 1` once head has exited: every write fails with EPIPE.
  const process_result result = check({NORMCHECK_CASES_DIR}, output_to::closed_pipe);
  CAPTURE(result.err);
  CHECK_FALSE(result.timed_out);
  CHECK(result.signal == 0);
  CHECK(result.status == 2);
  CHECK(result.err.empty());
}
