// normcheck prove: decides whether a normalization recipe yields the objective's gradient for every partition.

#include "commands.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/recipes/prove.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct prove_options {
  std::string scale;
  std::string reducer = "mean";
  std::string objective = "token_mean";
  std::string counterexample;
};

std::string shown(const std::optional<rational>& value) {
  return value ? to_string(*value) + " (≈ " + approximate(*value) + ")" : std::string("undefined");
}

outcome run_prove(const prove_options& options) {
  recipe r;
  try {
    r.scale = recipe_expression::parse(options.scale);
  } catch (const error& e) {
    location where = e.where().value_or(location{});
    where.file = "--scale";
    throw error(e.code(), e.message(), where);
  }
  if (options.reducer != "mean" && options.reducer != "sum")
    throw error(error_code::usage_error, "--reducer must be mean or sum, not \"" + options.reducer + "\"");
  r.reducer = options.reducer == "mean" ? reducer_kind::mean : reducer_kind::sum;
  const std::optional<objective_kind> named = objective_from_name(options.objective);
  if (!named)
    throw error(error_code::usage_error,
                "--objective must be " + objective_alternatives() + ", not \"" + printable(options.objective) + "\"");
  const objective_kind objective = *named;

  const proof_result result = prove_recipe(r, objective);
  std::cout << "recipe \"" << r.scale.text() << "\" under the " << reducer_name(r.reducer) << " reducer, objective "
            << options.objective << ": " << verdict_name(result.verdict) << "\n";
  std::cout << "  covered: " << result.coverage << "\n";
  if (!result.counterexample) {
    if (result.verdict == proof_verdict::checked)
      std::cout << "  no counterexample found, but this is not a proof for all counts\n";
    return outcome::holds;
  }
  const recipe_counterexample& example = *result.counterexample;
  const bool in_sequence = example.where.sequences && example.where.sequences->declared;
  std::cout << "  smallest counterexample: " << describe(example.where)
            << (in_sequence ? " (rank 0, microbatch 0, its first sequence)\n" : " (rank 0, microbatch 0)\n");
  if (result.verdict == proof_verdict::divides_by_zero) {
    std::cout << "  the scale divides by " << example.zero_divisor << ", which is 0 there\n";
    if (example.where.sequences && example.where.sequences->group_tokens == 0 && example.scale == std::nullopt &&
        r.scale.uses(count_variable::n_s))
      std::cout << "  a group without valid tokens (an empty sequence, a fully masked response) has no mean: code "
                   "that divides by its count must guard that division\n";
  } else {
    std::cout << "  the scale there is c = " << shown(example.scale) << ", but the objective needs c/"
              << (r.reducer == reducer_kind::mean ? "W" : "1") << " = " << objective_weight(objective) << "\n";
  }
  std::cout << "  on this partition the recipe's gradient is " << shown(example.recipe_gradient)
            << " and the objective's is " << shown(example.objective) << "\n";
  if (result.division_risk)
    std::cout << "  it also divides by " << result.division_risk->zero_divisor << ", which is 0 at "
              << describe(result.division_risk->where) << "\n";
  if (!options.counterexample.empty()) {
    write_file_atomically(options.counterexample, example.document);
    std::cout << "  counterexample written to " << options.counterexample << " (normcheck check fails it)\n";
  } else {
    std::cout << "  as a partition file (normcheck check fails it):\n" << example.document;
  }
  return outcome::check_failed;
}

}  // namespace

void add_prove_command(CLI::App& app, action& run) {
  auto options = std::make_shared<prove_options>();
  CLI::App* prove = app.add_subcommand(
      "prove", "Decide whether a normalization recipe gives the objective's gradient on every partition");
  prove
      ->add_option(
          "--scale", options->scale,
          "The scale each group (a sequence, or a microbatch without sequences) multiplies its loss sum by, e.g. "
          "\"W / N\" (counts: W, N, n_r, n_m, G; weighted: M, m_r, m_m; sequences: B, b_r, b_m, n_s; "
          "constant: C)")
      ->required();
  prove->add_option("--reducer", options->reducer, "mean (DDP's default) or sum")->capture_default_str();
  prove->add_option("--objective", options->objective,
                    "token_mean, weighted_token_mean, sequence_mean, sequence_sum_mean or constant")
      ->capture_default_str();
  prove->add_option("--counterexample", options->counterexample, "Write the counterexample partition file here")
      ->check(output_path());
  prove->callback([&run, options] { run = [options] { return run_prove(*options); }; });
}

}  // namespace normcheck::cli
