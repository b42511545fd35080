// normcheck suggest: a small partition on which every known mistake is far outside the dtype's bound, or,
// with --counts, the targets for the valid-token counts a real step has.

#include "commands.hpp"

#include "normcheck/gate/suggest.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/recipes/prove.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct suggest_options {
  std::uint64_t world_size = 2;
  std::uint64_t microbatches = 1;
  std::string type = "float32";
  std::string objective = "token_mean";
  std::string counts;
  std::string mesh;
  bool mesh_given = false;
  bool json = false;
  std::string output;
};

// The line on standard error that states the objective's normalization as a recipe `prove` decides.
void describe_normalization(objective_kind objective) {
  const bool sequences = counts_sequences(objective);
  std::cerr << "normalization: every " << (sequences ? "sequence" : "microbatch") << " multiplies its loss sum by "
            << objective_scale(objective, reducer_kind::mean) << " under DDP's mean reducer ("
            << objective_scale(objective, reducer_kind::sum) << " under a summing one); normcheck prove --scale \""
            << objective_scale(objective, reducer_kind::mean) << "\" --objective " << objective_name(objective)
            << " decides it" << (objective == objective_kind::sequence_mean
                                     ? "; a sequence without a valid token has no mean, so code guards that division"
                                     : "")
            << "\n";
}

// The closing lines on standard error: how far apart the closest pair is, and what cannot be separated.
void describe_separation(const suggestion& s, bool enough) {
  std::cerr << "separation: the closest pair (" << s.closest_pair << ") is " << approximate(s.separation)
            << " times the larger bound apart; " << (enough ? "at least" : "LESS than") << " the required "
            << required_separation << "\n";
  for (const std::string& name : s.inseparable)
    std::cerr << "inseparable: " << name << " equals the objective on these counts whatever the targets; the gate "
              << "can only conclude inconclusive on it (make the counts unequal to tell them apart)\n";
  for (const std::string& pair : s.ambiguous)
    std::cerr << "ambiguous: " << pair << " are equal on these counts whatever the targets; a diagnosis names both\n";
}

std::string suggestion_json(const suggestion& s, const document_options& document) {
  std::string out;
  json_writer json(out);
  json.begin_object(json_layout::lines).key("partition");
  write_document(json, s.tokens, document);
  json.member("separation", s.separation)
      .member("closest_pair", s.closest_pair)
      .member("inseparable", s.inseparable)
      .member("ambiguous", s.ambiguous)
      .member("required", std::uint64_t{required_separation})
      .end_object();
  return out + "\n";
}

outcome run_suggest(const suggest_options& options) {
  const std::optional<dtype> type = dtype_from_name(options.type);
  if (!type)
    throw error(error_code::usage_error,
                "unknown dtype \"" + options.type + "\": expected " + dtype_alternatives());
  const std::optional<objective_kind> objective = objective_from_name(options.objective);
  if (!objective)
    throw error(error_code::usage_error,
                "--objective must be " + objective_alternatives() + ", not \"" + options.objective + "\"");
  suggestion s;
  document_options document;
  document.declare_world_size = true;
  if (!options.counts.empty()) {
    if (*objective != objective_kind::token_mean)
      throw error(error_code::usage_error,
                  "--counts chooses targets for the token mean; a weighted step's weights and a sequence objective's "
                  "sequences come from its data");
    refuse_output_over_inputs("--output", options.output, {options.counts});
    const std::string source = options.counts == "-" ? std::string(standard_input_name) : options.counts;
    const update_counts counts = read_counts(load_file(options.counts), source);
    s = suggest_for_counts(counts, *type);
    document.description = "Suggested by normcheck suggest --counts for the valid-token counts of " + source + ", " +
                           std::string(dtype_name(*type)) + ": the closest pair (" + s.closest_pair + ") is " +
                           approximate(s.separation) + " bounds apart.";
  } else if (options.mesh_given) {
    // Every dimension of size 2: the smallest mesh on which each of its mistakes differs from the objective.
    std::vector<mesh_dim> mesh = recipe_names::parse_mesh(options.mesh);
    std::uint64_t world_size = 1;
    std::string shape;
    for (mesh_dim& dim : mesh) {
      dim.size = 2;
      if (dim.role != mesh_role::replica) world_size *= dim.size;
      shape += (shape.empty() ? "" : " × ") + dim.name + " 2 (" + std::string(mesh_role_name(dim.role)) + ")";
    }
    s = suggest_partition(world_size, options.microbatches, *type, *objective, mesh);
    document.declare_world_size = false;  // a mesh lists every rank, replicas included
    document.description = "Suggested by normcheck suggest for the mesh " + shape +
                           ", W = " + std::to_string(world_size) + ", " + std::to_string(options.microbatches) +
                           " microbatch(es) per rank, " + std::string(dtype_name(*type)) + ": the closest pair (" +
                           s.closest_pair + ") is " + approximate(s.separation) + " bounds apart.";
  } else {
    s = suggest_partition(options.world_size, options.microbatches, *type, *objective);
    document.description = "Suggested by normcheck suggest for W = " + std::to_string(options.world_size) + ", " +
                           std::to_string(options.microbatches) + " microbatch(es) per rank, " +
                           (counts_sequences(*objective) || *objective == objective_kind::constant
                                ? "objective " + std::string(objective_name(*objective)) + ", "
                                : std::string()) +
                           std::string(dtype_name(*type)) + ": the closest pair (" + s.closest_pair + ") is " +
                           approximate(s.separation) + " bounds apart.";
  }
  const partition update = to_partition(s.tokens);
  document.expect.push_back({strategy::global_mean, gradient(update, strategy::global_mean)});
  const bool enough = s.separation >= required_separation && s.inseparable.empty();
  const std::string text = options.json ? suggestion_json(s, document) : write_document(s.tokens, document);
  if (options.output.empty()) std::cout << text;
  else write_file_atomically(options.output, text);
  describe_separation(s, s.separation >= required_separation);
  describe_normalization(*objective);
  if (!enough && s.inseparable.empty())
    std::cerr << "no partition of this shape separates every mistake: some mistakes compute values too close to "
                 "the objective or to each other for the dtype's bound\n";
  return enough ? outcome::holds : outcome::check_failed;
}

}  // namespace

void add_suggest_command(CLI::App& app, action& run) {
  auto options = std::make_shared<suggest_options>();
  CLI::App* suggest = app.add_subcommand(
      "suggest", "Print a small normcheck/1 partition on which every known mistake is separated from the objective");
  CLI::Option* world_size = suggest->add_option("--world-size,-W", options->world_size, "Ranks in the reduction")
                                ->capture_default_str()
                                ->check(CLI::Range(1, 64));
  CLI::Option* microbatches = suggest->add_option("--microbatches,-G", options->microbatches, "Microbatches per rank")
                                  ->capture_default_str()
                                  ->check(CLI::Range(1, 16));
  suggest
      ->add_option("--counts", options->counts,
                   "Choose targets for these valid-token counts instead: a file {\"counts\": [[n00, n01], [n10]]} "
                   "(ranks, then microbatches; - for standard input)")
      ->excludes(world_size)
      ->excludes(microbatches);
  CLI::Option* counts = suggest->get_option("--counts");
  add_mesh_option(
      *suggest, options->mesh, options->mesh_given,
      "Lay the partition out on a device mesh, each dimension of size 2, e.g. dp:data,cp:sequence,tp:replica "
      "(name:role, as prove --mesh): its mistakes (a count over the wrong dimensions, or the replicas) are "
      "separated too")
      ->excludes(world_size)
      ->excludes(counts);
  suggest->add_option("--dtype", options->type, "float64, float32, bfloat16, float16 or exact")->capture_default_str();
  suggest
      ->add_option("--objective", options->objective,
                   "token_mean, weighted_token_mean (tokens get weights), sequence_mean, sequence_sum_mean or "
                   "constant (microbatches hold sequences)")
      ->capture_default_str();
  suggest->add_flag("--json", options->json,
                    "Print {\"partition\": ..., \"separation\", \"closest_pair\", \"inseparable\", \"ambiguous\", "
                    "\"required\"} instead of the partition alone");
  suggest->add_option("--output,-o", options->output, "Write to this file instead of standard output")
      ->check(output_path());
  suggest->callback([&run, options] { run = [options] { return run_suggest(*options); }; });
}

}  // namespace normcheck::cli
