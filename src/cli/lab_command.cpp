// normcheck lab: the optimization lab, at a prompt (a terminal), from a script on standard input, or in one shot.

#include "commands.hpp"

#include "normcheck/teaching/lab.hpp"

#include <iostream>
#include <memory>
#include <string>

#include <unistd.h>

namespace normcheck::cli {

namespace {

struct lab_options {
  std::string learning_rate;
  std::string position;
  std::uint64_t steps = 1;
};

void print(const std::vector<std::string>& lines, std::ostream& out) {
  for (const std::string& line : lines) out << line << "\n";
}

// Prints a reply; a refused or malformed command goes to standard error, with its line in a script.
bool report(const lab_reply& reply, std::uint64_t line_number, bool interactive) {
  const bool failed = reply.status == lab_status::refused || reply.status == lab_status::malformed;
  if (!failed) {
    print(reply.lines, std::cout);
    return false;
  }
  std::cout.flush();
  for (const std::string& line : reply.lines)
    std::cerr << (interactive ? "" : "line " + std::to_string(line_number) + ": ") << line << "\n";
  return true;
}

outcome run_one_shot(const lab_options& options) {
  lab_session session;
  std::cout << lab_limits() << "\n";
  const bool bad_rate = report(session.set_learning_rate(options.learning_rate), 0, true);
  const bool bad_start = report(session.set_position(options.position), 0, true);
  if (bad_rate || bad_start) return outcome::rejected;
  if (report(session.step(options.steps), 0, true)) return outcome::rejected;
  return outcome::holds;
}

outcome run_session() {
  const bool interactive = ::isatty(STDIN_FILENO) != 0;
  lab_session session;
  print(lab_banner(), std::cout);
  std::vector<std::uint64_t> failed_lines;
  std::string line;
  std::uint64_t line_number = 0;
  while (true) {
    if (interactive) std::cout << "lab> " << std::flush;
    if (!std::getline(std::cin, line)) {
      if (interactive) std::cout << "\n";
      break;
    }
    ++line_number;
    const lab_reply reply = session.execute(line);
    if (report(reply, line_number, interactive)) failed_lines.push_back(line_number);
    if (reply.status == lab_status::quit) break;
  }
  std::cout.flush();
  if (interactive || failed_lines.empty()) return outcome::holds;
  std::string lines;
  for (std::uint64_t n : failed_lines) lines += (lines.empty() ? "" : ", ") + std::to_string(n);
  std::cerr << "normcheck lab: " << failed_lines.size() << (failed_lines.size() == 1 ? " line was" : " lines were")
            << " refused or malformed (line" << (failed_lines.size() == 1 ? " " : "s ") << lines << ")\n";
  return outcome::rejected;
}

}  // namespace

void add_lab_command(CLI::App& app, action& run) {
  auto options = std::make_shared<lab_options>();
  CLI::App* lab = app.add_subcommand(
      "lab", "The optimization lab: exact gradient descent on x²/2, at a prompt, from a script on standard input, "
             "or in one shot with --lr and --x");
  CLI::Option* lr = lab->add_option("--lr", options->learning_rate, "One shot: the step size, an exact number > 0");
  CLI::Option* x = lab->add_option("--x", options->position, "One shot: the start x0, an exact number");
  CLI::Option* steps = lab->add_option("--steps", options->steps, "One shot: how many steps to take")
                           ->capture_default_str()
                           ->check(CLI::Range(std::uint64_t{1}, lab_max_steps));
  lr->needs(x);
  x->needs(lr);
  steps->needs(lr);
  lab->callback([&run, options, lr] {
    const bool one_shot = lr->count() > 0;
    run = [options, one_shot] { return one_shot ? run_one_shot(*options) : run_session(); };
  });
}

}  // namespace normcheck::cli
