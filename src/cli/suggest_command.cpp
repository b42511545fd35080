// normcheck suggest: a small partition on which every known mistake is far outside the dtype's bound.

#include "commands.hpp"

#include "normcheck/io/files.hpp"
#include "normcheck/gate/suggest.hpp"

#include <iostream>
#include <memory>

namespace normcheck::cli {

namespace {

struct suggest_options {
  std::uint64_t world_size = 2;
  std::uint64_t microbatches = 1;
  std::string type = "float32";
  std::string objective = "token_mean";
  std::string output;
};

outcome run_suggest(const suggest_options& options) {
  const std::optional<dtype> type = dtype_from_name(options.type);
  if (!type) throw error(error_code::usage_error, "unknown dtype \"" + options.type + "\": expected float64, float32, bfloat16, float16 or exact");
  if (options.objective != "token_mean" && options.objective != "weighted_token_mean")
    throw error(error_code::usage_error,
                "--objective must be token_mean or weighted_token_mean, not \"" + options.objective + "\"");
  const objective_kind objective =
      options.objective == "token_mean" ? objective_kind::token_mean : objective_kind::weighted_token_mean;
  const suggestion s = suggest_partition(options.world_size, options.microbatches, *type, objective);
  const partition update = to_partition(s.tokens);
  const bool enough = s.separation >= required_separation;
  document_options document;
  document.declare_world_size = true;
  document.description = "Suggested by normcheck suggest for W = " + std::to_string(options.world_size) +
                         ", " + std::to_string(options.microbatches) + " microbatch(es) per rank, " +
                         std::string(dtype_name(*type)) + ": the closest pair (" + s.closest_pair + ") is " +
                         approximate(s.separation) + " bounds apart.";
  document.expect.push_back({strategy::global_mean, gradient(update, strategy::global_mean)});
  const std::string text = write_document(s.tokens, document);
  if (options.output.empty()) std::cout << text;
  else write_file_atomically(options.output, text);
  std::cerr << "separation: the closest pair (" << s.closest_pair << ") is " << approximate(s.separation)
            << " times the larger bound apart; " << (enough ? "at least" : "LESS than") << " the required "
            << required_separation << "\n";
  if (!enough)
    std::cerr << "no partition of this shape separates every mistake: with these W and microbatches some "
                 "mistakes compute the same value as the objective or each other\n";
  return enough ? outcome::holds : outcome::check_failed;
}

}  // namespace

void add_suggest_command(CLI::App& app, action& run) {
  auto options = std::make_shared<suggest_options>();
  CLI::App* suggest = app.add_subcommand(
      "suggest", "Print a small normcheck/1 partition on which every known mistake is separated from the objective");
  suggest->add_option("--world-size,-W", options->world_size, "Ranks in the reduction")
      ->capture_default_str()->check(CLI::Range(1, 64));
  suggest->add_option("--microbatches,-G", options->microbatches, "Microbatches per rank")
      ->capture_default_str()->check(CLI::Range(1, 16));
  suggest->add_option("--dtype", options->type, "float64, float32, bfloat16, float16 or exact")->capture_default_str();
  suggest->add_option("--objective", options->objective, "token_mean or weighted_token_mean (tokens get weights)")
      ->capture_default_str();
  suggest->add_option("--output,-o", options->output, "Write the partition to this file instead of stdout");
  suggest->callback([&run, options] { run = [options] { return run_suggest(*options); }; });
}

}  // namespace normcheck::cli
