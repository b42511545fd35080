// The normcheck executable: registers the subcommands, runs the chosen one, and maps outcomes and
// errors to exit statuses in this one place.

#include "commands.hpp"
#include "exit_status.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/version.hpp"

#include <algorithm>
#include <csignal>
#include <iostream>
#include <string_view>
#include <sys/stat.h>
#include <vector>

namespace {

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

// Edits (insertions, deletions, substitutions, swaps of neighbours) between two words.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1, 0));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The misuse of naming a subcommand that does not exist, with the closest one when one is near.
normcheck::error unknown_subcommand(const CLI::App& app, std::string_view typed) {
  std::string closest;
  std::size_t best = 3;  // at most two edits away, or a prefix
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    const std::string& name = sub->get_name();
    names += (names.empty() ? "" : ", ") + name;
    const std::size_t distance = name.rfind(typed, 0) == 0 ? 1 : edit_distance(typed, name);
    if (distance < best) {
      best = distance;
      closest = name;
    }
  }
  return normcheck::error(normcheck::error_code::usage_error,
                          "unknown subcommand '" + std::string(typed) + "'" +
                              (closest.empty() ? "" : ": did you mean '" + closest + "'?") + " (the subcommands: " +
                              names + "; normcheck help NAME describes one)");
}

// `normcheck help [NAME]`, and a first word that names no subcommand. True when it handled the command line.
bool before_parsing(const CLI::App& app, int argc, char** argv, int& status) {
  if (argc < 2 || argv[1][0] == '-') return false;
  const std::string_view first = argv[1];
  const bool help = first == "help";
  const std::string_view named = help ? (argc > 2 ? std::string_view(argv[2]) : std::string_view()) : first;
  const CLI::App* sub = nullptr;
  for (const CLI::App* each : app.get_subcommands({}))
    if (each->get_name() == named) sub = each;
  if (help && named.empty()) {
    std::cout << app.help();
  } else if (sub && help) {
    std::cout << sub->help();
  } else if (sub) {
    return false;
  } else {
    std::cerr << "normcheck: " << normcheck::describe(unknown_subcommand(app, named)) << "\n";
    status = exit_status(normcheck::cli::outcome::rejected);
    return true;
  }
  status = exit_status(normcheck::cli::outcome::holds);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using normcheck::cli::outcome;
  using normcheck::cli::exit_status;
  std::signal(SIGPIPE, SIG_IGN);
  normcheck::install_signal_handlers();  // the process is ours: mapped inputs and interrupted writes are handled
  CLI::App app{"normcheck: exact verification of loss normalization in data-parallel training", "normcheck"};
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
  normcheck::cli::add_names_command(app, run);

  if (int status = 0; before_parsing(app, argc, argv, status)) return status;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_status(outcome::holds) : exit_status(outcome::rejected);
  }
  return normcheck::cli::run_mapped(
      [&] {
        const int status = exit_status(run ? run() : outcome::rejected);
        return report_delivered() ? status : exit_status(outcome::rejected);
      },
      std::cerr);
}
