// libFuzzer target: the scenario reader and the simulation on arbitrary bytes, seeded from cases/simulate/ (see
// fuzz_targets.hpp).

#include "fuzz_targets.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)normcheck::fuzz::scenario_one_input(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
