#include "normcheck/core/counts.hpp"

#include "normcheck/core/errors.hpp"

#include <string>

namespace normcheck {

std::uint64_t add_counts(std::uint64_t a, std::uint64_t b) {
  if (a > max_count || b > max_count - a)
    throw error(error_code::limit_exceeded,
                "the update counts more than 2^62 = " + std::to_string(max_count) +
                    " positions (valid tokens and padding, over all ranks), the most normcheck counts exactly");
  return a + b;
}

}  // namespace normcheck
