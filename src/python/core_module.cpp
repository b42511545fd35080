// normcheck._core: the library checking documents inside the Python process (nanobind).
//
// A front end like the command line, and as thin: each function hands text or paths to check/ and
// returns the same normcheck-report/1 JSON that `normcheck check --json` prints, which the package's
// Verdict already reads, so the two routes cannot drift apart; `names_json` is `normcheck names --json`.
// The GIL is released while checking.

#include "normcheck/check/check.hpp"
#include "normcheck/check/json_report.hpp"
#include "normcheck/check/names_report.hpp"
#include "normcheck/version.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

normcheck::check_options options_for(bool require_gate) {
  normcheck::check_options options;
  options.require_gate = require_gate;
  return options;
}

// What `normcheck check --json [--require-gate] PATHS...` prints (directories walked as it walks them,
// the reports it wrote into them left out), and the reports left out.
nb::tuple check_paths_json(const std::vector<std::string>& paths, bool require_gate, unsigned jobs) {
  std::string json;
  std::vector<std::string> skipped;
  {
    nb::gil_scoped_release unlocked;
    std::vector<std::filesystem::path> reports_found;
    const std::vector<std::filesystem::path> inputs =
        normcheck::collect_inputs(std::vector<std::filesystem::path>(paths.begin(), paths.end()), &reports_found);
    for (const std::filesystem::path& report : reports_found) skipped.push_back(report.string());
    json = normcheck::json_report(
        normcheck::check_paths(inputs, options_for(require_gate), jobs, [](const normcheck::file_report&) {}));
  }
  return nb::make_tuple(json, skipped);
}

// The same report for one document given as text, named `source` in it.
std::string check_text_json(const std::string& text, const std::string& source, bool require_gate) {
  nb::gil_scoped_release unlocked;
  return normcheck::json_report({normcheck::check_text(text, source, options_for(require_gate))});
}

}  // namespace

NB_MODULE(_core, module) {
  module.doc() = "The normcheck library in this process: checks documents, returns normcheck-report/1 JSON.";
  module.attr("version") = normcheck::version;
  module.def("check_paths_json", &check_paths_json, nb::arg("paths"), nb::arg("require_gate"), nb::arg("jobs"),
             "check --json over files and folders: (the report's JSON text, reports of earlier runs left out)");
  module.def("check_text_json", &check_text_json, nb::arg("text"), nb::arg("source"), nb::arg("require_gate"),
             "check --json over one document given as text, named source in the report");
  module.def("names_json", &normcheck::names_json,
             "names --json: every name normcheck reads and gives, by kind (normcheck-names/1)");
}
