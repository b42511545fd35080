// Replays every input the fuzz targets ever broke on (tests/hardening/regressions/<target>/), and the
// seeds of the recipe and scenario targets, through the same code the fuzzers run: a regression aborts
// this test program.

#include "fuzz_targets.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The files of tests/hardening/regressions/<target>/, sorted (none while the target never broke).
std::vector<std::filesystem::path> inputs_of(const std::string& target) {
  std::vector<std::filesystem::path> inputs;
  const std::filesystem::path folder = std::string(NORMCHECK_REGRESSIONS_DIR) + "/" + target;
  if (!std::filesystem::exists(folder)) return inputs;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
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

TEST_CASE("the recipe seeds and regressions pass through fuzz_recipe's properties") {
  std::vector<std::filesystem::path> inputs = inputs_of("recipe");
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(NORMCHECK_SOURCE_DIR) + "/fuzz/corpus/recipe"))
    inputs.push_back(entry.path());
  std::size_t parsed = 0;
  for (const std::filesystem::path& input : inputs) {
    CAPTURE(input.string());
    parsed += normcheck::fuzz::recipe_one_input(read_bytes(input));
  }
  CHECK(parsed >= 10);  // the seeds reach evaluation and the prover, not only the parser
}

TEST_CASE("the scenario cases and regressions pass through fuzz_scenario's properties") {
  std::vector<std::filesystem::path> inputs = inputs_of("scenario");
  for (const auto& entry : std::filesystem::directory_iterator(std::string(NORMCHECK_SOURCE_DIR) + "/cases/simulate"))
    inputs.push_back(entry.path());
  std::size_t simulated = 0;
  for (const std::filesystem::path& input : inputs) {
    CAPTURE(input.string());
    simulated += normcheck::fuzz::scenario_one_input(read_bytes(input));
  }
  CHECK(simulated >= 10);  // the cases reach the simulation, not only the reader
}
