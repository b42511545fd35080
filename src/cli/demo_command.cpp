// normcheck demo: lists the teaching demos, or runs one as text or Markdown, optionally drawing its figure.

#include "commands.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/documents/kind.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/teaching/demo.hpp"
#include "normcheck/teaching/page.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct demo_options {
  std::string name;
  bool markdown = false;
  std::string partition_file;
  std::string svg_file;
  std::string html_file;
};

void list_demos(bool markdown) {
  if (markdown) {
    std::cout << "# normcheck demos\n\nRun one with `normcheck demo NAME`.\n\n";
    for (const demo_info& info : demo_catalog())
      std::cout << "- `" << info.name << "`: " << info.summary << (info.has_figure ? " (figure: `--svg FILE`)" : "")
                << "\n";
    return;
  }
  std::cout << "demos (run one with: normcheck demo NAME [--markdown] [--partition FILE] [--svg FILE]; all of them "
               "and the lab as one page: normcheck demo --html FILE):\n";
  std::size_t width = 0;
  for (const demo_info& info : demo_catalog()) width = std::max(width, info.name.size());
  for (const demo_info& info : demo_catalog())
    std::cout << "  " << info.name << std::string(width - info.name.size() + 2, ' ') << info.summary
              << (info.has_figure ? " (figure: --svg FILE)" : "") << "\n";
}

outcome run_demo_command(const demo_options& options) {
  if (!options.html_file.empty() && (!options.name.empty() || options.markdown || !options.svg_file.empty()))
    throw error(error_code::usage_error, "--html writes every demo and the lab as one page: it takes no NAME, "
                                         "--markdown or --svg (--partition FILE builds it on your partition)");
  if (options.name.empty() && options.html_file.empty()) {
    if (!options.partition_file.empty() || !options.svg_file.empty())
      throw error(error_code::usage_error, "--partition and --svg need a demo: normcheck demo NAME ...");
    list_demos(options.markdown);
    return outcome::holds;
  }
  std::optional<demo_input> input;
  if (!options.partition_file.empty()) {
    const std::string text = load_file(options.partition_file);
    require_kind(text, document_kind::partition, "demo --partition", options.partition_file);
    partition_file file = read_partition(text, options.partition_file, {}, standard_sections());
    if (counts_sequences(file.update.objective) || file.update.objective == objective_kind::constant)
      throw error(error_code::usage_error,
                  "the demos teach the token mean, but " + escaped_name(options.partition_file) + " declares \"" +
                      std::string(objective_name(file.update.objective)) +
                      "\": normcheck reference checks that objective, and normcheck check judges the file");
    demo_input from_file;
    from_file.update = std::move(file.update);
    from_file.origin = escaped_name(options.partition_file) +
                       (file.description.empty() ? "" : " (" + printable(file.description) + ")");
    input = std::move(from_file);
  }
  if (!options.html_file.empty()) {
    const std::string page = teaching_page(input);
    write_file_atomically(options.html_file, page);
    std::cout << "Page written to " << options.html_file << " (" << page.size()
              << " bytes): every demo and the lab, self-contained; open it in a browser, no network needed.\n";
    return outcome::holds;
  }
  const demo_output output = run_demo(options.name, input, !options.svg_file.empty());
  if (output.figure) write_file_atomically(options.svg_file, *output.figure);
  if (options.markdown) {
    render_markdown(std::cout, output.document);
    if (output.figure) std::cout << "\n![" << output.document.title << "](" << options.svg_file << ")\n";
  } else {
    render_text(std::cout, output.document);
    if (output.figure) std::cout << "\nFigure written to " << options.svg_file << "\n";
  }
  return outcome::holds;
}

}  // namespace

void add_demo_command(CLI::App& app, action& run) {
  auto options = std::make_shared<demo_options>();
  CLI::App* demo = app.add_subcommand("demo", "Teaching demos, every number computed exactly (no NAME: list them)");
  demo->add_option("name", options->name, "The demo to run: derivation, accumulation, reducers or disguise");
  demo->add_flag("--markdown", options->markdown, "Write Markdown for notes and slides instead of plain text");
  demo->add_option("--partition", options->partition_file, "Run the demo on this normcheck/1 partition file");
  demo->add_option("--svg", options->svg_file, "Also draw the demo's figure into this SVG file")->check(output_path());
  demo->add_option("--html", options->html_file,
                   "Write every demo, its figures and the lab as one self-contained HTML page to this file")
      ->check(output_path());
  demo->callback([&run, options] { run = [options] { return run_demo_command(*options); }; });
}

}  // namespace normcheck::cli
