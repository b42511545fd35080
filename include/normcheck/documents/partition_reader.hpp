#pragma once
/// \file documents/partition_reader.hpp
/// Reading normcheck/1 partition files into a `partition_file`, streaming token values into
/// per-microbatch sums (no token is stored). The reader reads the update itself (format, ranks and
/// their weights, world_size, reducer, theta, objective, the auxiliary terms, description, expect,
/// expect_error); every
/// other key belongs to a registered section (documents/section.hpp).

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/documents/field_reader.hpp"
#include "normcheck/documents/section.hpp"

#include <memory>
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

/// A partition file as read: the update, what the file claims about it, and its sections.
struct partition_file {
  partition update;
  std::vector<auxiliary_term> terms;                 ///< `terms`: the auxiliary loss terms, in file order
  std::optional<std::uint64_t> declared_world_size;  ///< `world_size`, when given
  std::string description;
  std::vector<expectation> expect;
  std::optional<error_code> expect_error;
  std::vector<std::shared_ptr<section>> sections;  ///< one per registered handler, in registry order

  /// The section of type `Section`, if one was registered.
  template <typename Section>
  Section* find_section() const {
    for (const std::shared_ptr<section>& s : sections)
      if (auto* found = dynamic_cast<Section*>(s.get())) return found;
    return nullptr;
  }
};

/// Reads a normcheck/1 document with the handlers of `sections`. Throws `error` with the code and location
/// of the first problem; a document without valid tokens is `no_valid_tokens`, a stale `world_size`
/// `world_size_mismatch`, a key no handler reads `schema_error`. With `jobs` > 1 the large token arrays of
/// a large document are read on that many threads; the result, and any error with its position, are those
/// of `jobs` = 1 (whatever the workers do not read as plain numbers and nulls is read again on one thread).
partition_file read_partition(std::string_view text, std::string source, const reader_limits& limits = {},
                              const section_registry& sections = {}, unsigned jobs = 1);

}  // namespace normcheck
