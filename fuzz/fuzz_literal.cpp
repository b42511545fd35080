// libFuzzer target: one literal through every exact path against a slow reference (see fuzz_targets.hpp).

#include "fuzz_targets.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  normcheck::fuzz::literal_one_input(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
