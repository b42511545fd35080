// normcheck simulate: runs a normcheck-scenario/1 file exactly and prints every step of every rank.

#include "commands.hpp"

#include "normcheck/documents/kind.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/simulation/expectations.hpp"
#include "normcheck/simulation/simulation_report.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct simulate_options {
  std::string path;
  bool json = false;
  reader_limits limits;
};

outcome run_simulate(const simulate_options& options) {
  const std::string source = options.path == "-" ? std::string(standard_input_name) : options.path;
  const std::string text = load_file(options.path, options.limits);
  require_kind(text, document_kind::scenario, "simulate", source, options.limits);
  const scenario s = read_scenario(text, source, options.limits);
  simulation run;
  try {
    run = simulate(s);
  } catch (error& e) {  // the digit-work limit: the whole file is the place
    e.locate(location{source});
    throw;
  }
  std::vector<std::string> failures = unmet_expectations(s, run);
  if (s.expect_error)
    failures.insert(failures.begin(), "expected rejection with " + std::string(code_name(*s.expect_error)) +
                                          ", but the scenario was read without error");
  if (options.json) {
    print_simulation_json(std::cout, source, s, run, failures);
  } else {
    print_simulation(std::cout, source, s, run);
    for (const std::string& failure : failures) std::cout << "DOES NOT HOLD: " << failure << "\n";
    if (failures.empty())
      std::cout << (s.has_expect ? "every expectation holds\n"
                                 : "no expect: the replicas agree and equal the reference, as claimed by default\n");
  }
  return failures.empty() ? outcome::holds : outcome::check_failed;
}

}  // namespace

void add_simulate_command(CLI::App& app, action& run) {
  auto options = std::make_shared<simulate_options>();
  CLI::App* simulate_app = app.add_subcommand(
      "simulate", "Simulate a normcheck-scenario/1 file exactly: every step of every rank, and the reference run");
  simulate_app->add_option("file", options->path, "Scenario file (- for standard input)")->required();
  simulate_app->add_flag("--json", options->json, "Print one JSON document instead of the text report");
  add_reader_limits(*simulate_app, options->limits);
  simulate_app->callback([&run, options] { run = [options] { return run_simulate(*options); }; });
}

}  // namespace normcheck::cli
