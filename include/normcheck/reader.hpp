#pragma once
/// \file reader.hpp
/// Reading normcheck/1 partition files into a `partition_file`, streaming token values into
/// per-microbatch sums (no token is stored).

#include "normcheck/errors.hpp"
#include "normcheck/gradients.hpp"
#include "normcheck/json_reader.hpp"
#include "normcheck/partition.hpp"

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

/// A partition file as read: the update and what the file claims about it.
struct partition_file {
  partition update;
  std::optional<std::uint64_t> declared_world_size;  ///< `world_size`, when given
  std::string description;
  std::vector<expectation> expect;
  std::optional<error_code> expect_error;
};

/// Reads a normcheck/1 document. Throws `error` with the code and location of the first problem;
/// a document without valid tokens is `no_valid_tokens`, a stale `world_size` `world_size_mismatch`.
partition_file read_partition(std::string_view text, std::string source, const reader_limits& limits = {});

/// The `expect_error` of a document that was rejected, if it names one among the top-level members
/// that precede any syntax error. Never throws.
std::optional<error_code> find_expected_error(std::string_view text, const reader_limits& limits = {});

/// Reads a whole regular file, within the size limit; throws `error(io_error)` or `error(limit_exceeded)`.
std::string load_file(const std::filesystem::path& path, const reader_limits& limits = {});

}  // namespace normcheck
