#pragma once
/// \file teaching/demo_input.hpp
/// The update a demo runs on: a built-in example with its tokens, or the partition of a user's file.

#include "normcheck/core/partition.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// Token values per rank and per microbatch, as the built-in examples are written.
using token_layout = std::vector<std::vector<std::vector<token>>>;

/// The update a demo runs on: a built-in example, or the partition of a user's file.
struct demo_input {
  partition update;
  std::string origin;                  ///< "the built-in example" or the file's name and description
  std::optional<token_layout> tokens;  ///< the token values, known for built-in examples
};

/// A built-in example from its tokens (one entry per microbatch).
demo_input example_input(const token_layout& tokens, const rational& theta, reducer_kind reducer,
                         std::string origin = "the built-in example");
/// The built-in example of a demo: [[0],[2,2,2]] at θ = 0 for derivation and reducers (mean reducer), the
/// same under the sum reducer for disguise, and two ranks of two microbatches each for accumulation.
demo_input builtin_input(std::string_view demo_name);

}  // namespace normcheck
