#pragma once
/// \file teaching/demo.hpp
/// The teaching demos: the catalog, and running one by name on its built-in example or a user's update.
/// Each demo first computes its facts with the library, then writes them into a document and, for
/// some, a figure. No number in a demo is typed into its prose.

#include "normcheck/teaching/accumulation.hpp"
#include "normcheck/teaching/demo_input.hpp"
#include "normcheck/teaching/derivation.hpp"
#include "normcheck/teaching/disguise.hpp"
#include "normcheck/teaching/document.hpp"
#include "normcheck/teaching/reducers.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// One entry of the demo list.
struct demo_info {
  std::string_view name;
  std::string_view summary;
  bool has_figure = false;  ///< whether `--svg FILE` draws a figure for it
};

/// Every demo, in the order `normcheck demo` lists them.
const std::vector<demo_info>& demo_catalog();
/// The demo called `name`, if there is one.
std::optional<demo_info> find_demo(std::string_view name);

/// A demo's output: its document and, when asked and available, its figure.
struct demo_output {
  demo_document document;
  std::optional<std::string> figure;
};

/// Runs the demo `name` on `input` (its built-in example when nullopt). Throws `error(usage_error)` for
/// an unknown name, or when a figure is asked of a demo that has none.
demo_output run_demo(std::string_view name, const std::optional<demo_input>& input, bool want_figure);

}  // namespace normcheck
