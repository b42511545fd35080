// Replays every input the fuzz targets ever broke on (tests/hardening/regressions/<target>/), through
// the same code the fuzzers run: a regression aborts this test program.

#include "fuzz_targets.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<std::filesystem::path> inputs_of(const std::string& target) {
  std::vector<std::filesystem::path> inputs;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(NORMCHECK_REGRESSIONS_DIR) + "/" + target))
    if (entry.is_regular_file()) inputs.push_back(entry.path());
  std::sort(inputs.begin(), inputs.end());
  return inputs;
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("the reader regressions found by fuzz_reader stay fixed") {
  const std::vector<std::filesystem::path> inputs = inputs_of("reader");
  REQUIRE_FALSE(inputs.empty());
  for (const std::filesystem::path& input : inputs) {
    CAPTURE(input.string());
    normcheck::fuzz::reader_one_input(read_bytes(input));
  }
}

TEST_CASE("the literal regressions found by fuzz_literal stay fixed") {
  const std::vector<std::filesystem::path> inputs = inputs_of("literal");
  REQUIRE_FALSE(inputs.empty());
  for (const std::filesystem::path& input : inputs) {
    CAPTURE(input.string());
    normcheck::fuzz::literal_one_input(read_bytes(input));
  }
}
