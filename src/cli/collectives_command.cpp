// normcheck collectives: checks that every rank of a traced run issued the same collective calls.

#include "commands.hpp"

#include "normcheck/collectives/trace_report.hpp"
#include "normcheck/documents/kind.hpp"
#include "normcheck/io/files.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct collectives_options {
  std::vector<std::string> paths;
  std::size_t world_size = 0;
  bool json = false;
  reader_limits limits;
};

outcome run_collectives(const collectives_options& options) {
  collective_trace trace;
  for (const std::string& path : options.paths) {
    const std::string source = path == "-" ? std::string(standard_input_name) : path;
    const std::string text = load_file(path, options.limits);
    require_kind(text, document_kind::trace, "collectives", source, options.limits);
    trace.add_text(text, source, options.limits);
  }
  const std::optional<std::size_t> world_size =
      options.world_size > 0 ? std::optional<std::size_t>(options.world_size) : std::nullopt;
  const trace_verdict verdict = check_trace(trace, world_size);
  if (options.json) print_trace_verdict_json(std::cout, trace, verdict);
  else print_trace_verdict(std::cout, trace, verdict);
  return verdict.first_problem ? outcome::check_failed : outcome::holds;
}

}  // namespace

void add_collectives_command(CLI::App& app, action& run) {
  auto options = std::make_shared<collectives_options>();
  CLI::App* collectives = app.add_subcommand(
      "collectives", "Check JSON-lines traces of collective calls: every rank must issue the same sequence");
  collectives
      ->add_option("traces", options->paths,
                   "Trace files: one per rank, or one with every rank's lines (- for standard input)")
      ->required();
  collectives->add_option("--world-size", options->world_size,
                          "W, when some rank may have left no line (default: the largest rank + 1)")
      ->check(CLI::Range(1, 1 << 20));
  collectives->add_flag("--json", options->json, "Print one JSON document instead of the text report");
  add_reader_limits(*collectives, options->limits);
  collectives->callback([&run, options] { run = [options] { return run_collectives(*options); }; });
}

}  // namespace normcheck::cli
