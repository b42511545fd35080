// Options several subcommands share, registered in one place so that they read and check the same way.

#include "commands.hpp"

namespace normcheck::cli {

void add_reader_limits(CLI::App& command, reader_limits& limits) {
  command.add_option("--max-depth", limits.max_depth, "Deepest JSON nesting accepted")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  command.add_option("--max-file-size", limits.max_file_size, "Largest file accepted, in bytes")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 50));
  command.add_option("--max-digits", limits.numbers.max_digits, "Most digits in one literal")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000000));
  command.add_option("--max-exponent", limits.numbers.max_exponent, "Largest |exponent| of a literal as written")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000000));
  command.add_option("--max-microbatches", limits.max_microbatches, "Most microbatches of one update, all ranks")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  command.add_option("--max-exact-digits", limits.max_exact_digits, "Most digits of the exact values a document keeps")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 50));
  command.add_option("--max-fraction-digits", limits.max_fraction_digits,
                     "Most digits of a document's distinct fraction denominators")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 50));
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

CLI::Option* add_mesh_option(CLI::App& command, std::string& text, bool& given, const std::string& description) {
  return command.add_option_function<std::string>(
      "--mesh",
      [&text, &given](const std::string& value) {
        text = value;
        given = true;
      },
      description);
}

}  // namespace normcheck::cli
