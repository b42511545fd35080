#pragma once
// A small deterministic generator (64-bit LCG) for the library's searches, so that `suggest` and
// `prove` give the same answer on every machine. Not part of the public API.

#include <cstdint>

namespace normcheck::detail {

/// Uniform-enough draws in [0, bound) from a fixed seed.
class deterministic_random {
public:
  explicit deterministic_random(std::uint64_t seed) : state_(seed) {}

  /// The next draw in [0, bound); `bound` must be positive.
  std::uint64_t below(std::uint64_t bound) {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return (state_ >> 33) % bound;
  }

private:
  std::uint64_t state_;
};

}  // namespace normcheck::detail
