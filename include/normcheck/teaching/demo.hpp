#pragma once
/// \file teaching/demo.hpp
/// The teaching demos: the derivation of the W·Sᵣ/N compensation, gradient accumulation, the two
/// reducers, and why a learning rate cannot disguise a scale error. Each demo first computes its
/// facts with the library, then writes them into a document (text or Markdown) and, for some, a figure.
/// No number in a demo is typed into its prose.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/teaching/trajectory.hpp"

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace normcheck {

/// A paragraph of prose.
struct demo_paragraph {
  std::string text;
};
/// Lines shown as they are: algebra evaluated on the example.
struct demo_display {
  std::vector<std::string> lines;
};
/// A table: a header row and rows of the same width.
struct demo_table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
/// One block of a section.
using demo_block = std::variant<demo_paragraph, demo_display, demo_table>;

/// A titled part of a demo.
struct demo_section {
  std::string heading;
  std::vector<demo_block> blocks;
};

/// What a demo prints.
struct demo_document {
  std::string title;
  std::vector<demo_section> sections;
};

/// Writes a document as plain text: paragraphs wrapped to 100 columns, tables aligned.
void render_text(std::ostream& out, const demo_document& document);
/// Writes a document as Markdown (headings, paragraphs, fenced algebra, pipe tables) for notes and slides.
void render_markdown(std::ostream& out, const demo_document& document);

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

/// Token values per rank and per microbatch, as the built-in examples are written.
using token_layout = std::vector<std::vector<std::vector<token>>>;

/// The update a demo runs on: a built-in example, or the partition of a user's file.
struct demo_input {
  partition update;
  std::string origin;                  ///< "the built-in example" or the file's name and description
  std::optional<token_layout> tokens;  ///< the token values, known for built-in examples
};

/// A built-in example from its tokens (one entry per microbatch).
demo_input example_input(const token_layout& tokens, const rational& theta, reducer_kind reducer,
                         std::string origin = "the built-in example");
/// The built-in example of a demo: [[0],[2,2,2]] at θ = 0 for derivation and reducers (mean reducer), the
/// same under the sum reducer for disguise, and two ranks of two microbatches each for accumulation.
demo_input builtin_input(std::string_view demo_name);

/// How much of the gradient one rank, or one token of it, carries under a strategy.
struct rank_weight {
  std::uint64_t valid_tokens = 0;
  std::optional<rational> rank_share_local_means;   ///< the rank's share in the averaged local means
  rational rank_share_objective;                    ///< nᵣ/N
  std::optional<rational> token_weight_local_means; ///< 1/(W·nᵣ); undefined without tokens
  std::optional<rational> token_weight_objective;   ///< 1/N; undefined without tokens
};

/// The weight of every rank and token, measured by the library's gradient on probe updates with the
/// same counts (one token, or one rank's tokens, with derivative 1 and every other derivative 0).
std::vector<rank_weight> measure_rank_weights(const partition& update);

/// The numbers of the derivation demo.
struct derivation_facts {
  demo_input input;                       ///< the update, under the mean reducer
  rational objective;                     ///< ΣSᵣ/N
  std::optional<rational> local_means;    ///< (1/W)Σ Sᵣ/nᵣ
  rational compensated;                   ///< the delivered gradient of W·Sᵣ/N
  std::vector<rational> algebra;          ///< each line of the compensation algebra, evaluated
  std::vector<rank_weight> weights;
  demo_input control;                     ///< the tokens dealt equally
  std::optional<rational> control_local_means;
  rational control_objective;
  rational control_compensated;
  demo_input with_empty_rank;             ///< the update with one more rank that holds no token
  std::optional<rational> empty_local_means;
  rational empty_objective;
  rational empty_compensated;
  std::optional<error_code> all_empty_rejection;  ///< what the library says when no rank holds a token
  std::string all_empty_message;
};

/// Computes the derivation demo on `input` (its reducer is taken to be the mean).
derivation_facts compute_derivation(const demo_input& input);

/// The weight of one token in one microbatch under each accumulation.
struct microbatch_weight {
  std::size_t rank = 0;
  std::size_t microbatch = 0;
  std::uint64_t valid_tokens = 0;
  std::optional<rational> per_microbatch_mean;   ///< microbatch_mean: 1/(W·Gᵣ·nᵣₘ)
  std::optional<rational> per_microbatch_count;  ///< global count per microbatch: 1/(G·Nₘ)
  std::optional<rational> update_count;          ///< the update's N: 1/N
};

/// The numbers of the accumulation demo.
struct accumulation_facts {
  demo_input input;
  rational objective;
  std::optional<rational> microbatch_means;          ///< microbatch_mean
  std::optional<rational> rank_means;                ///< local_mean over the whole update
  std::optional<rational> microbatch_global_counts;  ///< (1/G)Σₘ ΣᵣSᵣₘ/Nₘ; needs the same G on every rank
  std::vector<rational> slice_objectives;            ///< ΣᵣSᵣₘ/Nₘ per microbatch index m
  rational update_count;                             ///< scaled_sum with the update's N
  std::vector<microbatch_weight> weights;
  demo_input control;                                ///< equal microbatch counts
  std::optional<rational> control_microbatch_means;
  rational control_objective;
  demo_input with_empty_microbatch;                  ///< rank 0 gets one more microbatch, without tokens
  std::optional<rational> empty_microbatch_means;
  rational empty_objective;
  rational empty_update_count;
};

/// Computes the accumulation demo on `input` (mean reducer).
accumulation_facts compute_accumulation(const demo_input& input);

/// How a strategy's gradient relates to the objective's.
struct strategy_relation {
  strategy name;
  std::optional<rational> delivered;  ///< at the update's θ
  bool equals_objective = false;
  std::optional<rational> factor;     ///< the fixed ratio to the objective, when there is one
  std::optional<rational> ratio_at_first, ratio_at_second;  ///< the ratios at two θ, when they differ
  rational first_theta, second_theta;
};

/// The numbers of the reducers demo, for one reducer.
struct reducer_facts {
  reducer_kind reducer;
  rational objective;
  std::vector<strategy_relation> relations;  ///< every strategy except global_mean
};

/// Relates every strategy to the objective under `update.reducer`, at θ and at a second θ.
reducer_facts compute_reducer(const partition& update);

/// The disguise demo's settings (read from literals through the one door).
struct disguise_parameters {
  rational learning_rate;  ///< η of the mistaken run; the disguised run uses k·η
  rational weight_decay;   ///< λ
  rational momentum;       ///< μ
  std::size_t steps = 8;
};

/// η = 0.1, λ = 0.1, μ = 0.9, 8 steps.
disguise_parameters default_disguise_parameters();

/// One optimizer, run twice: the scaled gradient with η, and the correct gradient with k·η.
struct disguise_run {
  std::string feature;
  optimizer_settings mistaken;
  optimizer_settings disguised;
  std::vector<rational> mistaken_path;
  std::vector<rational> disguised_path;
  std::optional<parting> parts;
};

/// The numbers of the disguise demo.
struct disguise_facts {
  demo_input input;
  strategy mistake;          ///< the local scalar whose gradient is off by k under the update's reducer
  rational factor;           ///< k, computed as the mistaken gradient over the objective's
  rational optimum;          ///< where the objective's gradient vanishes (the target mean)
  rational start;            ///< x₀: the update's θ
  rational clip_threshold;   ///< |∇L(x₀)|: the largest gradient the correct run sees
  disguise_parameters parameters;
  std::vector<disguise_run> runs;  ///< plain SGD first, then each feature
};

/// The mistake the disguise demo uses under a reducer: scaled_sum (off by W) under sum, local_sum (off by N/W) under mean.
strategy disguise_mistake(reducer_kind reducer);

/// Computes the disguise demo: k from the library, then both runs for every optimizer feature.
disguise_facts compute_disguise(const demo_input& input, const disguise_parameters& parameters);

/// The derivation demo's document.
demo_document derivation_document(const derivation_facts& facts);
/// The accumulation demo's document.
demo_document accumulation_document(const accumulation_facts& facts);
/// The reducers demo's document: both reducers applied to the ranks of `input`.
demo_document reducers_document(const demo_input& input);
/// The disguise demo's document.
demo_document disguise_document(const disguise_facts& facts);

/// An SVG figure: each rank's share and one token's weight, averaged local means versus the objective, as bars.
std::string derivation_figure(const derivation_facts& facts);
/// An SVG figure: the two runs of every optimizer as lines, with the step where they part marked.
std::string disguise_figure(const disguise_facts& facts);

/// A demo's output: its document and, when asked and available, its figure.
struct demo_output {
  demo_document document;
  std::optional<std::string> figure;
};

/// Runs the demo `name` on `input` (its built-in example when nullopt). Throws `error(usage_error)` for
/// an unknown name, or when a figure is asked of a demo that has none.
demo_output run_demo(std::string_view name, const std::optional<demo_input>& input, bool want_figure);

}  // namespace normcheck
