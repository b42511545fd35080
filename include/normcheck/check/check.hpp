#pragma once
/// \file check/check.hpp
/// Checking documents: each file is identified by its kind and judged by that kind's checker; a
/// partition file's gradients are computed, compared with its claims (`expect`, `expect_error`), and
/// handed to its sections (the gate, recipes). The one place where a rejection meets an expected error.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/kind.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <filesystem>
#include <functional>
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
  document_kind kind = document_kind::partition;
  file_status status = file_status::error;
  std::optional<partition_file> document;  ///< a partition file, when it was read (its sections hold their verdicts)
  gradient_set gradients;                      ///< valid when `document` is set
  std::vector<expectation_result> expectations;
  std::optional<error> rejection;              ///< why the file was rejected, expected or not
  std::optional<error_code> expected_error;    ///< the file's `expect_error`, if found
  std::vector<std::string> failures;           ///< each claim that does not hold, in words
  std::vector<std::string> details;            ///< report lines of other kinds of document (no partition)
};

/// Counts of verdicts over a run.
struct run_summary {
  std::size_t passed = 0;
  std::size_t failed = 0;
  std::size_t errors = 0;
};

/// Counts the verdicts of `reports`.
run_summary summarize(const std::vector<file_report>& reports);

/// How a run checks its files.
struct check_options {
  reader_limits limits;
  bool require_gate = false;  ///< a file without an `observed` result for the gate fails (`--require-gate`)
  unsigned jobs = 1;          ///< threads that may read one large document (see read_partition)
};

/// The sections of a normcheck/1 document that `check` reads, judges and reports, in report order:
/// recipes (`recipe`, `expect.recipe`), then the gate (`observed`, `expect_gate`).
const section_registry& standard_sections();

/// Checks a document given as text, naming it `source`.
file_report check_text(std::string_view text, std::string source, const check_options& options = {});
/// Checks the file at `path`; an unreadable path is an error report, never an exception.
file_report check_path(const std::filesystem::path& path, const check_options& options = {});

/// Checks `inputs` with up to `jobs` threads, one file per thread at a time (one file alone: its large
/// token arrays on `jobs` threads), and hands each report to `each` in the order of `inputs`, as soon as it
/// and every report before it are done: what a run prints and returns does not depend on `jobs` (1: one
/// file after another in the calling thread).
std::vector<file_report> check_paths(const std::vector<std::filesystem::path>& inputs, const check_options& options,
                                     unsigned jobs, const std::function<void(const file_report&)>& each);

/// The cores this process may run on (its CPU affinity), at least 1: the default of `--jobs`.
unsigned available_cores();

/// Records a rejection in `report`: it passes when the document expected exactly this error and is not cut
/// off (a cut-off document never meets an expectation), and is an error otherwise. `text` is the document,
/// searched for its `expect_error` ("" when it could not be read at all).
void judge_rejection(file_report& report, const error& e, std::string_view text, const reader_limits& limits);

/// What every report normcheck writes declares as its format, followed by its version ("normcheck-report/1").
inline constexpr std::string_view report_format_family = "normcheck-report/";

/// Whether the file at `path` is a report normcheck wrote (its format is `normcheck-report/…`). Reads its
/// first 4 KiB; false for anything it cannot read.
bool is_report_document(const std::filesystem::path& path);

/// The files a command line names: files as given, directories walked recursively for `*.json`,
/// sorted. A path that does not exist, and a subdirectory the walk cannot enter, is kept so that its
/// check reports it (io_error): nothing is skipped silently. When `skipped_reports` is given, the reports
/// of earlier runs found in the directories (`--json` or `--output` written into the folder) are left out
/// and listed there instead, for the caller to say so; a report named as a file is kept.
std::vector<std::filesystem::path> collect_inputs(const std::vector<std::filesystem::path>& paths,
                                                  std::vector<std::filesystem::path>* skipped_reports = nullptr);

/// Whether a gradient equals the objective (`global_mean`); false when undefined.
bool equals_objective(const gradient_set& gradients, strategy s);

}  // namespace normcheck
