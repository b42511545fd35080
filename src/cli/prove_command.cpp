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
  std::string mesh;
  bool mesh_given = false;  // an empty --mesh is refused, not read as none
  std::string term;
};

std::string shown(const std::optional<rational>& value) {
  return value ? to_string(*value) + " (≈ " + approximate(*value) + ")" : std::string("undefined");
}

// The names the recipe may use: --mesh's and --term's beside every update's.
recipe_names names_of(const prove_options& options) {
  std::vector<mesh_dim> mesh;
  if (options.mesh_given) mesh = recipe_names::parse_mesh(options.mesh);
  try {
    return recipe_names(std::move(mesh), options.term);
  } catch (const error& e) {
    location where;
    where.file = options.term.empty() ? "--mesh" : "--term";
    throw error(e.code(), e.message(), where);
  }
}

outcome run_prove(const prove_options& options) {
  const recipe_names names = names_of(options);
  recipe r;
  try {
    r.scale = recipe_expression::parse(options.scale, names);
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
  std::string on_the_mesh;
  for (const mesh_dim& dim : names.mesh())
    on_the_mesh += (on_the_mesh.empty() ? ", on the mesh " : " × ") + dim.name + " (" +
                   std::string(mesh_role_name(dim.role)) + ")";
  std::cout << "recipe \"" << r.scale.text() << "\"" << (names.term().empty() ? "" : " for the term " + names.term())
            << " under the " << reducer_name(r.reducer) << " reducer, objective " << options.objective << on_the_mesh
            << ": " << verdict_name(result.verdict) << "\n";
  std::cout << "  covered: " << result.coverage << "\n";
  if (!result.counterexample) {
    if (result.verdict == proof_verdict::checked)
      std::cout << "  no counterexample found, but this is not a proof for all counts\n";
    return outcome::holds;
  }
  const recipe_counterexample& example = *result.counterexample;
  const bool in_sequence = example.where.sequences && example.where.sequences->declared;
  const std::string place = std::string(names.mesh().empty() ? "rank 0" : "rank 0, every coordinate 0") +
                            ", microbatch 0" + (in_sequence ? ", its first sequence" : "") +
                            (names.term().empty() ? "" : ", of the term " + names.term());
  std::cout << "  smallest counterexample: " << describe(example.where, names) << " (" << place << ")\n";
  if (result.verdict == proof_verdict::divides_by_zero) {
    std::cout << "  the scale divides by " << example.zero_divisor << ", which is 0 there\n";
    if (example.where.sequences && example.where.sequences->group_tokens == 0 && example.scale == std::nullopt &&
        r.scale.uses(count_variable::n_s))
      std::cout << "  a group without valid tokens (an empty sequence, a fully masked response) has no mean: code "
                   "that divides by its count must guard that division\n";
  } else {
    std::cout << "  the scale there is c = " << shown(example.scale) << ", but the objective needs c/"
              << (r.reducer == reducer_kind::mean ? "W" : "1") << " = " << objective_weight(objective, names) << "\n";
  }
  std::cout << "  on this partition the recipe's gradient is " << shown(example.recipe_gradient)
            << " and the objective's is " << shown(example.objective) << "\n";
  if (result.division_risk)
    std::cout << "  it also divides by " << result.division_risk->zero_divisor << ", which is 0 at "
              << describe(result.division_risk->where, names) << "\n";
  const std::string fails = example.check_fails ? "normcheck check fails it"
                                                : "its counts; a term's undefined scale has no measurement to check";
  if (!options.counterexample.empty()) {
    write_file_atomically(options.counterexample, example.document);
    std::cout << "  counterexample written to " << options.counterexample << " (" << fails << ")\n";
  } else {
    std::cout << "  as a partition file (" << fails << "):\n" << example.document;
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
  add_mesh_option(*prove, options->mesh, options->mesh_given,
                  "Lay every partition out on a device mesh, e.g. dp:data,cp:sequence,tp:replica (name:role, one "
                  "dimension of each role): the recipe may then read the sizes DP, CP, TP and the counts reduced "
                  "over one role's dimension, N_dp and N_cp");
  prove->add_option("--term", options->term,
                    "Decide the scale of an auxiliary term, e.g. mtp: the term's counts are N_mtp, n_r_mtp, n_m_mtp "
                    "and the main loss's N, n_r, n_m");
  prove->callback([&run, options] { run = [options] { return run_prove(*options); }; });
}

}  // namespace normcheck::cli
