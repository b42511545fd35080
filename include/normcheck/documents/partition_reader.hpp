#pragma once
/// \file documents/partition_reader.hpp
/// Reading normcheck/1 partition files into a `partition_file`, streaming token values into
/// per-microbatch sums (no token is stored).

#include "normcheck/core/errors.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/field_reader.hpp"
#include "normcheck/gate/observed.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/recipes/recipe.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The format name every partition file declares.
inline constexpr std::string_view format_name = "normcheck/1";

/// One `expect` entry: the gradient a file claims for a strategy (nullopt: claimed undefined).
struct expectation {
  strategy name;
  std::optional<rational> value;
};

/// What a file expects the gate to conclude: the verdict and the names of the explanations it gives
/// (the diagnosis of a failure, or the mistakes that could hide in an inconclusive verdict).
struct gate_expectation {
  gate_verdict verdict = gate_verdict::pass;
  std::vector<std::string> explanations;
};

/// A partition file as read: the update and what the file claims about it.
struct partition_file {
  partition update;
  std::optional<std::uint64_t> declared_world_size;  ///< `world_size`, when given
  std::string description;
  std::vector<expectation> expect;
  std::optional<error_code> expect_error;
  std::optional<observed_result> observed;        ///< what training code produced, if dumped
  std::optional<gate_expectation> expect_gate;   ///< the gate's expected conclusion, if stated
  std::optional<recipe> normalization;            ///< `recipe`: the scale and reducer the code applies, if given
  std::optional<std::optional<rational>> expect_recipe;  ///< `expect.recipe`: the recipe's claimed gradient (null: undefined)
};

/// Reads a normcheck/1 document. Throws `error` with the code and location of the first problem;
/// a document without valid tokens is `no_valid_tokens`, a stale `world_size` `world_size_mismatch`.
partition_file read_partition(std::string_view text, std::string source, const reader_limits& limits = {});

/// The `expect_error` of a document that was rejected, if it names one among the top-level members
/// that precede any syntax error. Never throws.
std::optional<error_code> find_expected_error(std::string_view text, const reader_limits& limits = {});

}  // namespace normcheck
