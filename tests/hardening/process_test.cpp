// Hostile input through the real executable: the bombs (time and peak memory of the process), paths
// that are not partition files, and a standard output that is a closed pipe.

#include "process.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

using hardening::check;
using hardening::good_case;
using hardening::output_to;
using hardening::peak_bound_kib;
using hardening::process_result;

std::string prefix = R"({"format": "normcheck/1", "ranks": [{"targets": [)";

// Writes make() to `path` from a forked process and returns its size. The test process never holds the
// content: a child's peak resident set starts at its parent's (the pages count until exec), so the
// parent stays as small as it can.
std::size_t write_apart(const std::string& path, const std::function<std::string()>& make) {
  const pid_t writer = ::fork();
  if (writer == 0) {
    hardening::write_text(path, make());
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(writer, &status, 0);
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return static_cast<std::size_t>(info.st_size);
}

// Writes make() apart, runs `check` on it and prints what it cost; `size` receives the file's size.
process_result check_written(const char* kind, const std::string& name, const std::function<std::string()>& make,
                             std::size_t& size) {
  hardening::temporary_directory dir;
  const std::string path = dir / (name + ".json");
  size = write_apart(path, make);
  const process_result result = check({path});
  std::printf("%-6s %-34s %9zu bytes: exit %d in %.3f s, peak %ld KiB\n", kind, name.c_str(), size, result.status,
              result.seconds, result.peak_kib);
  return result;
}

// Runs one bomb and checks the verdict, the message and the memory bound.
void defuse(const std::string& name, const std::function<std::string()>& make, const std::string& code,
            const std::string& names) {
  std::size_t size = 0;
  const process_result result = check_written("bomb", name, make, size);
  CAPTURE(name);
  CAPTURE(result.out);
  CHECK_FALSE(result.timed_out);
  CHECK(result.status == 2);
  CHECK(result.out.find(code) != std::string::npos);
  CHECK(result.out.find(names) != std::string::npos);
  CHECK(result.peak_kib < peak_bound_kib);
}

// Runs a document within every limit that is nevertheless costly for its size, and checks that it is
// judged within the input's size + 64 MiB (the normal build) and the time limit.
void afford(const std::string& name, const std::function<std::string()>& make) {
  std::size_t size = 0;
  const process_result result = check_written("costly", name, make, size);
  CAPTURE(name);
  CAPTURE(result.out);
  CHECK_FALSE(result.timed_out);
  CHECK(result.status == 0);
  CHECK(result.peak_kib < static_cast<long>(size / 1024) + peak_bound_kib);
}

std::string repeat(const std::string& part, std::size_t times, const std::string& separator = ",") {
  std::string out;
  out.reserve(times * (part.size() + separator.size()));
  for (std::size_t i = 0; i < times; ++i) out += (i ? separator : "") + part;
  return out;
}

// `count` distinct odd integers of `digits` digits, none divisible by 5, as fraction literals "1/q".
std::string distinct_fractions(std::size_t count, std::size_t digits) {
  std::string out;
  std::uint64_t state = 88172645463325252ull;
  for (std::size_t i = 0; i < count; ++i) {
    std::string q;
    for (std::size_t d = 0; d + 1 < digits; ++d) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      q += static_cast<char>('1' + state % 9);
    }
    q += "1379"[i % 4];
    out += (i ? ",\"1/" : "\"1/") + q + "\"";
  }
  return out;
}

// A normcheck/1 document up to its first member after the format.
const std::string opening = R"({"format": "normcheck/1", )";

}  // namespace

TEST_CASE("documents that cost more than their size are limit_exceeded quickly, the rest judged in little memory") {
  // Each microbatch costs memory however short it is written.
  defuse("three_million_empty_microbatches",
         [] { return opening + R"("ranks": [{"microbatches": [)" + repeat("[]", 3000000) + "]}]}"; },
         "limit_exceeded", "--max-microbatches");
  defuse("half_a_million_empty_ranks",
         [] { return opening + R"("ranks": [)" + repeat(R"({"targets":[]})", 500000) + "]}"; },
         "limit_exceeded", "--max-microbatches");
  // A short literal that is a long number, kept once per microbatch.
  defuse("hundred_thousand_tiny_microbatches",
         [] { return opening + R"("ranks": [{"microbatches": [)" + repeat(R"(["1e-10000"])", 100000) + "]}]}"; },
         "limit_exceeded", "--max-exact-digits");
  // Fractions whose denominators share nothing: their sum holds them all.
  defuse("fractions_on_two_thousand_ranks",
         [] {
           std::string ranks;
           const std::string each = distinct_fractions(2000, 1000);
           std::size_t start = 0;
           for (std::size_t r = 0; r < 2000; ++r) {
             const std::size_t end = each.find(',', start);
             ranks += (r ? ",{\"targets\":[" : "{\"targets\":[") + each.substr(start, end - start) + "]}";
             start = end + 1;
           }
           return opening + R"("ranks": [)" + ranks + "]}";
         },
         "limit_exceeded", "--max-fraction-digits");
  defuse("twenty_thousand_fractions", [] { return prefix + distinct_fractions(20000, 100) + "]}]}"; },
         "limit_exceeded", "--max-fraction-digits");

  // Within the limits: the most microbatches, the most kept digits, a tiny θ over many microbatches.
  afford("most_microbatches",
         [] { return opening + R"("ranks": [{"microbatches": [)" + repeat("[1]", 199999) + "]}]}"; });
  afford("most_ranks", [] { return opening + R"("ranks": [)" + repeat(R"({"targets":[1]})", 199999) + "]}"; });
  afford("tiny_microbatches",
         [] { return opening + R"("ranks": [{"microbatches": [)" + repeat(R"(["1e-10000"])", 3000) + "]}]}"; });
  afford("tiny_theta", [] {
    return opening + R"("theta": "1e-10000", "ranks": [{"microbatches": [)" + repeat("[1]", 100000) + "]}]}";
  });
  afford("distinct_fractions", [] { return prefix + distinct_fractions(900, 100) + "]}]}"; });
}

TEST_CASE("a scenario whose exact values grow every step is limit_exceeded within a second") {
  // A 30-digit rate decayed by a 30-digit factor every step, with momentum: θ's denominator gains the
  // digits of every rate so far, a cost that grows with the cube of the steps (100 steps took 28 s).
  const std::string optimizer =
      R"("optimizer": {"lr": "0.123456789012345678901234567891", "momentum": "0.9",)"
      R"( "lr_decay": {"every": 1, "gamma": "0.987654321098765432109876543211"}})";
  defuse("decay_with_momentum", [&] {
    return R"({"format": "normcheck-scenario/1", "theta": "1/3", "loss_scale": "scaled_sum", )" + optimizer +
           R"(, "steps": [{"ranks": [{"targets": [1, 2]}, {"targets": [3]}], "repeat": 300}]})";
  }, "limit_exceeded", "the work they cost passes the limit");
  // The same on 1024 ranks: each step's record holds every rank's values.
  defuse("decay_on_many_ranks", [&] {
    return R"({"format": "normcheck-scenario/1", "theta": 0, "loss_scale": "scaled_sum", )" + optimizer +
           R"(, "steps": [{"ranks": [)" + repeat(R"({"targets": [1]}, {"targets": [2, 3]})", 512) +
           R"(], "repeat": 60}]})";
  }, "limit_exceeded", "the record of the run passes");
}

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

  hardening::write_text(dir / "m.json", opening + R"("ranks": [{"microbatches": [[1], [], [2]]}, {"targets": [3]}]})");
  CHECK(check({"--max-microbatches", "3", dir / "m.json"}).status == 2);
  CHECK(check({"--max-microbatches", "4", dir / "m.json"}).status == 0);
  hardening::write_text(dir / "x.json", prefix + R"("1e-1000"]}]})");  // two sums of about 1,000 digits
  CHECK(check({"--max-exact-digits", "1500", dir / "x.json"}).status == 2);
  CHECK(check({"--max-exact-digits", "2500", dir / "x.json"}).status == 0);
  hardening::write_text(dir / "f.json", prefix + distinct_fractions(10, 100) + "]}]}");
  CHECK(check({"--max-fraction-digits", "900", dir / "f.json"}).status == 2);
  CHECK(check({"--max-fraction-digits", "1100", dir / "f.json"}).status == 0);
  for (const char* option : {"--max-file-size", "--max-microbatches", "--max-exact-digits", "--max-fraction-digits"}) {
    CAPTURE(option);
    CHECK(check({option, "-1", good_case}).status == 2);  // misuse, never a wrapped-around limit
    CHECK(check({option, "0", good_case}).status == 2);
  }
}

TEST_CASE("repeated fraction denominators, and those of 2s and 5s, count nothing against the fraction limit") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "same.json", prefix + repeat("\"1/" + std::string(99, '3') + "7\"", 5000) + "]}]}");
  hardening::write_text(dir / "decimal.json",
                        prefix + repeat("\"1/" + std::string("1") + std::string(400, '0') + "\"", 50) + "]}]}");
  CHECK(check({"--max-fraction-digits", "150", dir / "same.json"}).status == 0);
  CHECK(check({"--max-fraction-digits", "1", dir / "decimal.json"}).status == 0);
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
    std::filesystem::copy_file(hardening::normcheck_executable, dir / "normcheck");
    std::filesystem::copy_file(good_case, dir / "good.json");
    const std::string command = "setpriv --reuid=65534 --regid=65534 --clear-groups " + (dir / "normcheck") +
                                " check " + locked + " " + (dir / "good.json") + " > " + (dir / "out.txt") +
                                " 2>&1; echo $? > " + (dir / "status.txt");
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
    std::filesystem::copy_file(hardening::normcheck_executable, dir / "normcheck");
    const std::string command = "setpriv --reuid=65534 --regid=65534 --clear-groups " + (dir / "normcheck") +
                                " check " + (dir / "cases") + " > " + (dir / "out.txt") + " 2>&1; echo $? > " +
                                (dir / "status.txt");
    REQUIRE(std::system(command.c_str()) == 0);
    result.out = hardening::slurp(dir / "out.txt");
    result.status = std::stoi(hardening::slurp(dir / "status.txt"));
  } else {
    result = check({dir / "cases"});
  }
  REQUIRE(::chmod((dir / "cases/locked").c_str(), 0755) == 0);  // so that the directory can be removed
  CAPTURE(result.out);
  CHECK(result.status == 2);
  CHECK(result.out.find("locked: io_error: is a directory that cannot be read (permission denied)") !=
        std::string::npos);
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
