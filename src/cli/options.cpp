// Options several subcommands share, registered in one place so that they read and check the same way.

#include "commands.hpp"

namespace normcheck::cli {

void add_reader_limits(CLI::App& command, reader_limits& limits) {
  command.add_option("--max-depth", limits.max_depth, "Deepest JSON nesting accepted")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  command.add_option("--max-file-size", limits.max_file_size, "Largest file accepted, in bytes")->capture_default_str();
  command.add_option("--max-digits", limits.numbers.max_digits, "Most digits in one literal")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  command.add_option("--max-exponent", limits.numbers.max_exponent, "Largest |exponent| of a literal as written")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000000));
}

const CLI::Validator& output_path() {
  static const CLI::Validator validator(
      [](std::string& path) {
        return path.empty() ? std::string("an output path must not be empty (a report is never silently dropped)")
                            : std::string();
      },
      "PATH");
  return validator;
}

}  // namespace normcheck::cli
