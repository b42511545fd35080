// normcheck reference: the nine reference checks of the derivation and the seven of the declared objectives.

#include "commands.hpp"

#include "normcheck/teaching/reference.hpp"

#include <iostream>

namespace normcheck::cli {

namespace {

outcome run_reference() {
  std::size_t passed = 0;
  std::size_t failed = 0;
  std::vector<reference_check> checks = run_reference_checks();
  for (reference_check& check : run_objective_checks()) checks.push_back(std::move(check));
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const reference_check& check = checks[i];
    ++(check.passed ? passed : failed);
    std::cout << (check.passed ? "PASS " : "FAIL ") << i + 1 << ". " << check.claim << "\n       " << check.shows
              << "\n";
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? outcome::holds : outcome::check_failed;
}

}  // namespace

void add_reference_command(CLI::App& app, action& run) {
  CLI::App* reference =
      app.add_subcommand("reference", "Run the reference checks of the derivation and of the declared objectives");
  reference->callback([&run] { run = run_reference; });
}

}  // namespace normcheck::cli
