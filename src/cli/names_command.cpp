// normcheck names: every name normcheck reads or gives (objectives, reducers, dtypes, verdicts, and what the
// gate's diagnoses are made of), listed by the core.

#include "commands.hpp"

#include "normcheck/check/names_report.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

void add_names_command(CLI::App& app, action& run) {
  auto json = std::make_shared<bool>(false);
  CLI::App* names = app.add_subcommand(
      "names", "List the names normcheck reads and gives: objectives, reducers, dtypes, verdicts, diagnoses");
  names->add_flag("--json", *json, "Print one JSON document (normcheck-names/1) instead of the lists");
  names->callback([&run, json] {
    run = [json] {
      std::cout << (*json ? names_json() : names_text());
      return outcome::holds;
    };
  });
}

}  // namespace normcheck::cli
