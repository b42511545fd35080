#include "normcheck/teaching/demo.hpp"

#include "demo_support.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/utf8.hpp"

namespace normcheck {

using namespace demo_support;

const std::vector<demo_info>& demo_catalog() {
  static const std::vector<demo_info> catalog{
      {"derivation", "why each rank backpropagates W·Sᵣ/N: local means, per-rank versus per-token weights, "
                     "the equal-count control, an empty rank, an update without tokens", true},
      {"accumulation", "the same story one level down: a denominator per microbatch versus the update's N", false},
      {"reducers", "the mean and the sum reducer: what W compensation does under each, and the factor of each "
                   "mistake", false},
      {"disguise", "a gradient off by k versus the learning rate times k: equal under plain SGD, parted by weight "
                   "decay and clipping", true},
  };
  return catalog;
}

std::optional<demo_info> find_demo(std::string_view name) {
  for (const demo_info& info : demo_catalog())
    if (info.name == name) return info;
  return std::nullopt;
}

demo_input example_input(const token_layout& tokens, const rational& theta, reducer_kind reducer,
                         std::string origin) {
  demo_input input;
  input.update = make_accumulated_partition(tokens, theta, reducer);
  input.origin = std::move(origin);
  input.tokens = tokens;
  return input;
}

demo_input builtin_input(std::string_view demo_name) {
  const token_layout one_and_three{{{token{0}}}, {{token{2}, token{2}, token{2}}}};
  if (demo_name == "accumulation") {
    const token_layout accumulated{{{token{0}}, {token{2}, token{2}, token{2}}},
                                   {{token{2}, token{2}}, {token{2}, token{2}}}};
    return example_input(accumulated, 0, reducer_kind::mean);
  }
  // Three ranks keep W, N and N/W apart, so every factor names one count.
  const token_layout three_ranks{{{token{0}}}, {{token{2}, token{2}, token{2}}}, {{token{2}, token{2}}}};
  if (demo_name == "disguise") return example_input(three_ranks, 0, reducer_kind::sum);
  if (demo_name == "reducers") return example_input(three_ranks, 0, reducer_kind::mean);
  return example_input(one_and_three, 0, reducer_kind::mean);
}

demo_output run_demo(std::string_view name, const std::optional<demo_input>& input, bool want_figure) {
  const std::optional<demo_info> info = find_demo(name);
  std::vector<std::string> names;
  std::vector<std::string> with_figures;
  for (const demo_info& each : demo_catalog()) {
    names.emplace_back(each.name);
    if (each.has_figure) with_figures.emplace_back(each.name);
  }
  if (!info)
    throw error(error_code::usage_error, "unknown demo '" + printable(name) + "': expected one of " +
                                             list_text(names));
  if (want_figure && !info->has_figure)
    throw error(error_code::usage_error, "the demo '" + printable(name) + "' has no figure: --svg works with " +
                                             list_text(with_figures));
  const demo_input chosen = input ? *input : builtin_input(name);
  demo_output out;
  if (name == "derivation") {
    const derivation_facts facts = compute_derivation(chosen);
    out.document = derivation_document(facts);
    if (want_figure) out.figure = derivation_figure(facts);
  } else if (name == "accumulation") {
    out.document = accumulation_document(compute_accumulation(chosen));
  } else if (name == "reducers") {
    out.document = reducers_document(chosen);
  } else {
    const disguise_facts facts = compute_disguise(chosen, default_disguise_parameters());
    out.document = disguise_document(facts);
    if (want_figure) out.figure = disguise_figure(facts);
  }
  return out;
}

}  // namespace normcheck
