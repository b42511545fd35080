#pragma once
/// \file documents/kind.hpp
/// What a document is, found without reading it whole: its declared `format`, the kind that follows from
/// it, and the `expect_error` of a document that could not be read.

#include "normcheck/core/errors.hpp"
#include "normcheck/io/json_reader.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace normcheck {

/// The kinds of input normcheck reads.
enum class document_kind {
  partition,  ///< normcheck/1: one update (`normcheck check`)
  scenario,   ///< normcheck-scenario/1: replicas over several steps (`normcheck simulate`, `check`)
  trace,      ///< JSON lines of collective calls (`normcheck collectives`)
  unknown,    ///< none of these
};

/// "partition", "scenario", "trace" or "unknown".
std::string_view document_kind_name(document_kind kind) noexcept;
/// What a person calls it: "a normcheck/1 partition file", "a collective-call trace (JSON lines)", …
std::string_view kind_description(document_kind kind) noexcept;
/// The command that reads it: "check", "simulate", "collectives" ("" for unknown).
std::string_view kind_command(document_kind kind) noexcept;

/// The `format` a document declares, if it declares one as a string among its top-level members.
/// Never throws. Fast when `format` is the first member.
std::optional<std::string> declared_format(std::string_view text, const reader_limits& limits = {});

/// The kind of `text`: by its declared format, or a trace when its first line is a JSON object with "op"
/// and "rank" members. Never throws.
document_kind identify(std::string_view text, const reader_limits& limits = {});

/// The error for a document of `kind` given to a command that does not read it: "is a collective-call trace
/// (JSON lines): `normcheck collectives` takes it, not `normcheck check`" (usage_error, located at the file).
error wrong_kind(document_kind kind, std::string_view command, const std::string& source);

/// Throws `wrong_kind` unless `text` is of kind `wanted` or of no kind normcheck knows (whose reader then
/// says what is wrong with it).
void require_kind(std::string_view text, document_kind wanted, std::string_view command, const std::string& source,
                  const reader_limits& limits = {});

/// The `expect_error` of a document that was rejected, if it names one among the top-level members
/// that precede any syntax error. Never throws.
std::optional<error_code> find_expected_error(std::string_view text, const reader_limits& limits = {});

}  // namespace normcheck
