#pragma once
/// \file check/check.hpp
/// Checking partition files: the gradients of each update, whether each equals the objective, and
/// whether the file's claims (`expect`, `expect_error`) hold.

#include "normcheck/core/errors.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// The verdict on one file.
enum class file_status {
  pass,   ///< every claim holds (including an expected rejection)
  fail,   ///< the file was read but a claim does not hold
  error,  ///< the file was rejected (and did not expect to be)
};

/// "pass", "fail" or "error".
std::string_view status_name(file_status status) noexcept;

/// One `expect` entry and what the library computed for it.
struct expectation_result {
  strategy name;
  std::optional<rational> expected;
  std::optional<rational> actual;
  bool held = false;
};

/// Everything `check` found out about one file.
struct file_report {
  std::string file;
  std::string kind = "partition";              ///< what the file is: "partition", or another checked format
  file_status status = file_status::error;
  std::optional<partition_file> document;      ///< the document, when it was read
  gradient_set gradients;                      ///< valid when `document` is set
  std::vector<expectation_result> expectations;
  std::optional<error> rejection;              ///< why the file was rejected, expected or not
  std::optional<error_code> expected_error;    ///< the file's `expect_error`, if found
  std::vector<std::string> failures;           ///< each claim that does not hold, in words
  std::vector<std::string> details;            ///< report lines of other kinds of file (no partition)
  std::optional<gate_result> gate;             ///< the gate's judgement of `observed`, when the file has one
  std::optional<recipe_value> recipe_result;   ///< the recipe's gradient on this partition, when the file has one
};

/// The `format` a document declares, if it declares one as a string among its top-level members.
/// Never throws. Fast when `format` is the first member.
std::optional<std::string> declared_format(std::string_view text, const reader_limits& limits = {});

/// Checks a document given as text, naming it `source`.
file_report check_text(std::string_view text, std::string source, const reader_limits& limits = {});
/// Checks the file at `path`; an unreadable path is an error report, never an exception.
file_report check_path(const std::filesystem::path& path, const reader_limits& limits = {});

/// The files a command line names: files as given, directories walked recursively for `*.json`,
/// sorted. A path that does not exist, and a subdirectory the walk cannot enter, is kept so that its
/// check reports it (io_error): nothing is skipped silently.
std::vector<std::filesystem::path> collect_inputs(const std::vector<std::filesystem::path>& paths);

/// Whether a gradient equals the objective (`global_mean`); false when undefined.
bool equals_objective(const gradient_set& gradients, strategy s);

}  // namespace normcheck
