#pragma once
// The subcommands of the normcheck executable. Each file src/cli/<name>_command.cpp registers one
// subcommand; main.cpp registers them all and turns their outcome into the exit status.

#include "exit_status.hpp"

#include "normcheck/io/json_reader.hpp"

#include <CLI/CLI.hpp>

#include <functional>

namespace normcheck::cli {

/// The chosen command's work, set by its parse callback and run once parsing succeeded.
using action = std::function<outcome()>;

/// Registers --max-depth, --max-file-size, --max-digits and --max-exponent on a command that reads documents.
void add_reader_limits(CLI::App& command, reader_limits& limits);

/// Refuses an empty path for an option that names an output file.
const CLI::Validator& output_path();

/// `--mesh NAME:ROLE,...` (prove, suggest): its text into `text`, and `given` set even when it is empty, which
/// recipe_names::parse_mesh then refuses rather than reading as no mesh.
CLI::Option* add_mesh_option(CLI::App& command, std::string& text, bool& given, const std::string& description);

void add_check_command(CLI::App& app, action& run);
void add_reference_command(CLI::App& app, action& run);
void add_simulate_command(CLI::App& app, action& run);
void add_collectives_command(CLI::App& app, action& run);
void add_demo_command(CLI::App& app, action& run);
void add_lab_command(CLI::App& app, action& run);
void add_suggest_command(CLI::App& app, action& run);
void add_prove_command(CLI::App& app, action& run);
void add_names_command(CLI::App& app, action& run);

}  // namespace normcheck::cli
