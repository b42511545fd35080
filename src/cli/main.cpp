// The normcheck executable: registers the subcommands, runs the chosen one, and maps outcomes and
// errors to exit statuses in this one place.

#include "commands.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/version.hpp"

#include <csignal>
#include <iostream>
#include <sys/stat.h>

namespace {

/// The exit status of each outcome: 0 holds, 1 a check failed, 2 input rejected or misuse.
int exit_status(normcheck::cli::outcome result) {
  switch (result) {
    case normcheck::cli::outcome::holds: return 0;
    case normcheck::cli::outcome::check_failed: return 1;
    case normcheck::cli::outcome::rejected: return 2;
  }
  return 2;
}

/// Whether the report reached standard output. SIGPIPE is ignored, so a reader that went away
/// (`normcheck check cases | head -n 1`) shows up here as a failed write, and ends the run quietly.
bool report_delivered() {
  std::cout.flush();
  if (std::cout) return true;
  struct stat info {};
  const bool pipe = ::fstat(1, &info) == 0 && S_ISFIFO(info.st_mode);
  if (!pipe) std::cerr << "normcheck: the report could not be written to standard output\n";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using normcheck::cli::outcome;
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"normcheck: exact verification of loss normalization in data-parallel training"};
  app.set_version_flag("--version", std::string("normcheck ") + normcheck::version);
  app.require_subcommand(1);

  normcheck::cli::action run;
  normcheck::cli::add_check_command(app, run);
  normcheck::cli::add_reference_command(app, run);
  normcheck::cli::add_simulate_command(app, run);
  normcheck::cli::add_collectives_command(app, run);
  normcheck::cli::add_demo_command(app, run);
  normcheck::cli::add_lab_command(app, run);
  normcheck::cli::add_suggest_command(app, run);
  normcheck::cli::add_prove_command(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_status(outcome::holds) : exit_status(outcome::rejected);
  }
  try {
    const int status = exit_status(run ? run() : outcome::rejected);
    return report_delivered() ? status : exit_status(outcome::rejected);
  } catch (const normcheck::error& e) {
    std::cerr << "normcheck: " << normcheck::describe(e) << "\n";
    return exit_status(outcome::rejected);
  } catch (const std::exception& e) {
    std::cerr << "normcheck: internal error: " << e.what() << "\n";
    return exit_status(outcome::rejected);
  }
}
