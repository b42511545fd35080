// normcheck check: checks partition files and prints a text or JSON report.

#include "commands.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/check/json_report.hpp"
#include "normcheck/check/junit_report.hpp"
#include "normcheck/check/text_report.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct check_command_options {
  std::vector<std::string> paths;
  bool json = false;
  bool verbose = false;
  std::string junit;
  std::string output;
  check_options checking;
  unsigned jobs = available_cores();
};

outcome run_check(const check_command_options& options) {
  std::vector<std::filesystem::path> reports_found;
  const std::vector<std::filesystem::path> inputs =
      collect_inputs(std::vector<std::filesystem::path>(options.paths.begin(), options.paths.end()), &reports_found);
  for (const std::filesystem::path& report : reports_found)
    std::cerr << "normcheck: skipped " << escaped_name(report.string())
              << ": a report normcheck wrote (format normcheck-report/…), not a document to check\n";
  // A gate that checked nothing must not pass.
  if (inputs.empty())
    throw error(error_code::usage_error,
                reports_found.empty() ? std::string("nothing to check: the directories given hold no *.json file")
                                      : "nothing to check: the directories given hold no *.json file but " +
                                            std::to_string(reports_found.size()) + " report(s) normcheck wrote");
  refuse_output_over_inputs("--output", options.output, inputs);
  refuse_output_over_inputs("--junit", options.junit, inputs);
  const std::vector<file_report> reports =
      check_paths(inputs, options.checking, options.jobs, [&](const file_report& report) {
        if (options.json) return;
        // Many files: a pass is one line and what failed is shown whole, so the failures are what one reads.
        if (inputs.size() > 1 && !options.verbose && report.status == file_status::pass)
          print_text_line(std::cout, report);
        else print_text(std::cout, report);
      });
  const run_summary summary = summarize(reports);
  if (options.json) std::cout << json_report(reports);
  else print_summary(std::cout, summary);
  std::cout.flush();  // what is on standard output comes first when a report goes there too (/dev/stdout)
  if (!options.junit.empty()) write_file_atomically(options.junit, junit_report(reports));
  if (!options.output.empty()) write_file_atomically(options.output, json_report(reports));
  if (summary.errors > 0) return outcome::rejected;
  if (summary.failed > 0) return outcome::check_failed;
  return outcome::holds;
}

}  // namespace

void add_check_command(CLI::App& app, action& run) {
  auto options = std::make_shared<check_command_options>();
  CLI::App* check =
      app.add_subcommand("check", "Check normcheck/1 partition files (a directory: its *.json, recursively, sorted)");
  check->add_option("paths", options->paths, "Partition files or directories")->required();
  check->add_flag("--json", options->json, "Print one JSON document instead of the text report");
  check->add_flag("--verbose,-v", options->verbose,
                  "Print every file's whole report (otherwise, with more than one file, a passing file is one line)");
  check->add_option("--junit", options->junit, "Also write a JUnit XML report to this file (one test case per file)")
      ->check(output_path());
  check->add_flag("--require-gate", options->checking.require_gate,
                  "Fail every file that carries no observed result for the gate (a CI gate that judges nothing fails)");
  add_reader_limits(*check, options->checking.limits);
  check->add_option("--jobs,-j", options->jobs,
                    "Files checked at once (default: the cores available); reports keep their order")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1024u));
  check
      ->add_option(
          "--output", options->output,
          "Also write the --json report to this file (a temporary file renamed into place: never half-written)")
      ->check(output_path());
  check->callback([&run, options] { run = [options] { return run_check(*options); }; });
}

}  // namespace normcheck::cli
