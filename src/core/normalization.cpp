#include "normcheck/core/normalization.hpp"

#include "normcheck/core/counts.hpp"
#include "normcheck/core/exact_sum.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace normcheck {

namespace {

std::optional<rational> reciprocal(const rational& value) {
  if (value == 0) return std::nullopt;
  rational r = 1 / value;
  return r;
}

// The factor that makes a local coefficient correct for the reducer: W under mean (it divides by W), 1 under sum.
rational reducer_compensation(const objective_units& units) {
  return units.update().reducer == reducer_kind::mean ? rational(units.world_size()) : rational(1);
}

// The rows of the update, where the document declares them: its sequences that hold a valid token. A microbatch
// that holds a valid token but declares no sequences may hold any number of rows (a flat token array says
// nothing of its batch's shape): the rows are then unknown.
std::optional<std::uint64_t> rows(const partition& update) {
  std::uint64_t total = 0;
  for (const rank_stats& rank : update.ranks)
    for (const microbatch_stats& m : rank.microbatches) {
      if (!m.sequences && m.valid_tokens > 0) return std::nullopt;
      if (m.sequences) total = add_counts(total, m.sequence_count());
    }
  return total;
}

bool token_units(const objective_units& units) {
  const objective_kind objective = units.objective();
  return objective == objective_kind::token_mean || objective == objective_kind::constant;
}

// The report's six.

std::optional<rational> objective_weight(const objective_units& units, const group_ref&) {
  return reciprocal(units.total());
}

std::optional<rational> per_rank(const objective_units& units, const group_ref& at) {
  return reciprocal(units.of_rank(at.rank));
}

std::optional<rational> unnormalized(const objective_units&, const group_ref&) { return rational(1); }

std::optional<rational> compensated(const objective_units& units, const group_ref&) {
  if (units.total() == 0) return std::nullopt;
  rational c = rational(units.world_size()) / units.total();
  return c;
}

std::optional<rational> per_microbatch(const objective_units& units, const group_ref& at) {
  const rational count = units.of_microbatch(at.rank, at.microbatch);
  if (count == 0) return std::nullopt;
  rational c = 1 / (count * units.update().ranks[at.rank].microbatches.size());
  return c;
}

// The diagnosed ones.

std::optional<rational> per_microbatch_summed(const objective_units& units, const group_ref& at) {
  return reciprocal(units.of_microbatch(at.rank, at.microbatch));
}

std::optional<rational> per_microbatch_empty_counted(const objective_units& units, const group_ref& at) {
  // The code skips an empty microbatch's 0/0 but still counts it in Gᵣ; a rank without an empty one gets
  // microbatch_mean's weights. Where no rank has one, this is microbatch_mean itself.
  const partition& update = units.update();
  const bool some_empty = std::any_of(update.ranks.begin(), update.ranks.end(), [](const rank_stats& r) {
    return std::any_of(r.microbatches.begin(), r.microbatches.end(),
                       [](const microbatch_stats& m) { return m.valid_tokens == 0; });
  });
  if (!some_empty) return std::nullopt;
  const rank_stats& rank = update.ranks[at.rank];
  const rational count = units.of_microbatch(at.rank, at.microbatch);
  if (count == 0) return rational(0);
  rational c = 1 / (count * rank.microbatches.size());
  return c;
}

std::optional<rational> positions_counted(const objective_units& units, const group_ref&) {
  const partition& update = units.update();
  if (units.objective() != objective_kind::token_mean || update.padding() == 0) return std::nullopt;
  rational c = reducer_compensation(units) / rational(update.positions());
  return c;
}

std::optional<rational> labels_before_shift(const objective_units& units, const group_ref&) {
  const partition& update = units.update();
  // One label more per row: defined only where the document declares its rows (its sequences).
  const std::optional<std::uint64_t> declared = rows(update);
  if (units.objective() != objective_kind::token_mean || !declared) return std::nullopt;
  // N + rows can pass max_count (every row holds a token): added as rationals.
  rational c = reducer_compensation(units) / (rational(update.valid_tokens()) + *declared);
  return c;
}

std::optional<rational> per_microbatch_global(const objective_units& units, const group_ref& at) {
  const partition& update = units.update();
  const std::size_t g = update.ranks.front().microbatches.size();
  if (g < 2) return std::nullopt;  // the objective itself
  // Defined only where every rank accumulates G microbatches (checked before any is read: `at` may lie in
  // a microbatch another rank does not have).
  for (const rank_stats& rank : update.ranks)
    if (rank.microbatches.size() != g) return std::nullopt;
  tree_sum count;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) count.add(units.of_microbatch(r, at.microbatch));
  const rational total = count.value();
  if (total == 0) return std::nullopt;
  rational c = reducer_compensation(units) / (total * g);
  return c;
}

std::optional<rational> sequence_share(const objective_units& units, const group_ref& at) {
  if (!token_units(units)) return std::nullopt;
  const rank_stats& rank = units.update().ranks[at.rank];
  const microbatch_stats& microbatch = rank.microbatches[at.microbatch];
  const std::uint64_t rank_sequences = rank.sequence_count();
  if (rank_sequences == 0 || microbatch.valid_tokens == 0) return std::nullopt;
  rational c =
      rational(microbatch.sequence_count()) / (rational(rank_sequences) * units.of_microbatch(at.rank, at.microbatch));
  return c;
}

std::optional<rational> running_count(const objective_units& units, const group_ref& at) {
  const rank_stats& rank = units.update().ranks[at.rank];
  if (rank.microbatches.size() < 2) return std::nullopt;
  tree_sum count;
  for (std::size_t m = 0; m <= at.microbatch; ++m) count.add(units.of_microbatch(at.rank, m));
  return reciprocal(count.value());
}

std::optional<rational> per_sequence_positions(const objective_units& units, const group_ref& at) {
  const microbatch_stats& microbatch = units.update().ranks[at.rank].microbatches[at.microbatch];
  if (!token_units(units) || !microbatch.sequences) return std::nullopt;
  const group_stats& sequence = (*microbatch.sequences)[at.group];
  const std::uint64_t length = add_counts(sequence.valid_tokens, sequence.padding);
  if (length == 0) return rational(0);
  rational c = rational(1) / length;
  return c;
}

// The mesh's: where slices of the same sequences lie on the ranks of sequence dimensions, the count must be
// reduced over every data and sequence dimension, once per token.

bool sliced(const objective_units& units) { return units.update().mesh_extent(mesh_role::sequence) > 1; }

std::optional<rational> quotient(const rational& numerator, const std::optional<rational>& count) {
  if (!count || *count == 0) return std::nullopt;
  rational c = numerator / *count;
  return c;
}

std::optional<rational> over_data_dims_only(const objective_units& units, const group_ref& at) {
  if (!sliced(units) || units.update().mesh_extent(mesh_role::data) < 2) return std::nullopt;
  if (counts_sequences(units.objective())) return std::nullopt;  // sequences_over_data_dims
  return quotient(reducer_compensation(units), units.over_data_dims(at.rank));
}

std::optional<rational> over_sequence_dims_only(const objective_units& units, const group_ref& at) {
  if (!sliced(units) || units.update().mesh_extent(mesh_role::data) < 2) return std::nullopt;
  return quotient(rational(units.update().mesh_extent(mesh_role::sequence)), units.over_sequence_dims(at.rank));
}

std::optional<rational> replicas_counted(const objective_units& units, const group_ref&) {
  const std::uint64_t replicas = units.update().mesh_extent(mesh_role::replica);
  if (replicas < 2) return std::nullopt;
  return quotient(reducer_compensation(units), units.total() * replicas);
}

std::optional<rational> before_sequence_sharding(const objective_units& units, const group_ref&) {
  if (!sliced(units) || counts_sequences(units.objective())) return std::nullopt;  // sequences_counted_per_slice
  return quotient(reducer_compensation(units), units.total() * units.update().mesh_extent(mesh_role::sequence));
}

// Under the sequence objectives, where slices of one sequence lie on the ranks of sequence dimensions: B counts
// each sequence once, and under sequence_mean a slice's tokens divide by its whole sequence's count nₛ.

bool joined_sequences(const objective_units& units) {
  return sliced(units) && counts_sequences(units.objective()) && units.update().has_slices();
}

std::optional<rational> slice_length_counted(const objective_units& units, const group_ref& at) {
  if (!joined_sequences(units) || units.objective() != objective_kind::sequence_mean) return std::nullopt;
  // The coefficient is written before the objective's token factor 1/nₛ: nₛ/nₖ makes it 1/nₖ, the slice's own.
  const std::uint64_t slice = units.update().ranks[at.rank].microbatches[at.microbatch].group(at.group).valid_tokens;
  std::optional<rational> c = quotient(reducer_compensation(units), units.total());
  if (c && slice > 0) *c *= rational(units.sequence_tokens(at)) / slice;
  return c;
}

std::optional<rational> sequences_over_data_dims_only(const objective_units& units, const group_ref& at) {
  if (!joined_sequences(units) || units.update().mesh_extent(mesh_role::data) < 2) return std::nullopt;
  return quotient(reducer_compensation(units), units.over_data_dims(at.rank));
}

std::optional<rational> sequences_per_slice(const objective_units& units, const group_ref&) {
  if (!joined_sequences(units)) return std::nullopt;
  return quotient(reducer_compensation(units), units.total() * units.update().mesh_extent(mesh_role::sequence));
}

// Each entry: name, formula, denominator, scope, whether it is the objective's own weights, coefficient; then,
// for a diagnosis, what was computed, why it is wrong (under a summing reducer where that differs) and what
// to do.
constexpr std::array<normalization, 6> report_table{{
    {.name = "global_mean",
     .formula = "ΣSᵣ/{D}",
     .denominator = "{D}",
     .level = scope::update,
     .objective_itself = true,
     .coefficient = objective_weight},
    {.name = "local_mean",
     .formula = "Sᵣ/{Dr}",
     .denominator = "{Dr}",
     .level = scope::rank,
     .coefficient = per_rank,
     .computed = "each rank backpropagated its local mean Sᵣ/nᵣ",
     .why_wrong = "the ranks are then weighted equally whatever their valid-token counts, so a token on a rank with "
                  "few tokens weighs more than one on a rank with many"},
    {.name = "local_sum",
     .formula = "Sᵣ",
     .denominator = "none",
     .level = scope::update,
     .coefficient = unnormalized,
     .computed = "each rank backpropagated its loss sum Sᵣ without dividing by a token count",
     .why_wrong = "DDP's mean then yields ΣSᵣ/W: the token count N never enters, so the scale is N/W times the "
                  "objective's",
     .why_wrong_summed = "the summing reducer then yields ΣSᵣ: N times the objective's gradient"},
    {.name = "scaled_sum",
     .formula = "W·Sᵣ/{D}",
     .denominator = "{D}",
     .level = scope::update,
     .coefficient = compensated,
     .computed = "each rank backpropagated W·Sᵣ/N, the compensation for a reducer that divides by W",
     .why_wrong = "this reducer sums without dividing, so the world-size factor is applied once too often: W times "
                  "the objective's gradient"},
    {.name = "global_share",
     .formula = "Sᵣ/{D}",
     .denominator = "{D}",
     .level = scope::update,
     .coefficient = objective_weight,
     .computed = "each rank backpropagated Sᵣ/N without the world-size factor",
     .why_wrong = "DDP's mean reducer divides the sum by W once more, so the result is the objective's gradient "
                  "divided by W"},
    {.name = "microbatch_mean",
     .formula = "(1/Gᵣ)·Σₘ Sᵣₘ/{Drm}",
     .denominator = "{Drm}",
     .level = scope::microbatch,
     .coefficient = per_microbatch,
     .computed = "each microbatch backpropagated its own mean (per-microbatch denominator) and the accumulation "
                 "divided by the number of microbatches",
     .why_wrong = "every microbatch then weighs the same whatever its count",
     .remedy = "the denominator must be the valid tokens of the whole update, not of each microbatch"},
}};

constexpr std::array<normalization, 15> diagnosed_table{{
    {.name = "sum_of_microbatch_means",
     .formula = "Σₘ Sᵣₘ/{Drm}",
     .denominator = "{Drm}",
     .level = scope::microbatch,
     .coefficient = per_microbatch_summed,
     .computed = "each microbatch backpropagated its own mean and the accumulation did not divide by the number of "
                 "microbatches: Σₘ Sᵣₘ/nᵣₘ",
     .why_wrong = "every microbatch then weighs the same whatever its count, and the window G times too much",
     .remedy = "the denominator must be the update's, not each microbatch's"},
    {.name = "empty_microbatches_counted",
     .formula = "(1/Gᵣ)·Σₘ Sᵣₘ/{Drm}, empty microbatches counted in Gᵣ",
     .denominator = "{Drm}",
     .level = scope::microbatch,
     .coefficient = per_microbatch_empty_counted,
     .computed = "each microbatch backpropagated its own mean, skipping those without valid tokens, and the "
                 "accumulation divided by every microbatch, the empty ones included",
     .why_wrong = "microbatches then weigh the same whatever their counts, and an empty microbatch still takes its "
                  "share of the division"},
    {.name = "count_padding",
     .formula = "W·Sᵣ/(N + P)",
     .denominator = "N + P",
     .level = scope::update,
     .coefficient = positions_counted,
     .computed = "the loss sum divided by the update's positions, padding included, instead of its valid tokens",
     .why_wrong = "padding positions (null in the file: padding, ignored labels) hold no token, so they must not "
                  "count"},
    {.name = "count_before_shift",
     .formula = "W·Sᵣ/(N + rows)",
     .denominator = "N + rows",
     .level = scope::update,
     .coefficient = labels_before_shift,
     .computed = "the loss sum divided by the labels counted before the shift for next-token prediction: N plus one "
                 "per row (the rows are the declared sequences that hold a valid token)",
     .why_wrong = "the first label of each row is never predicted",
     .remedy = "count the labels the loss sees, after the shift"},
    {.name = "microbatch_global_count",
     .formula = "(1/G)·Σₘ W·Sᵣₘ/Σᵣ{Drm}",
     .denominator = "Σᵣ{Drm}",
     .level = scope::microbatch,
     .coefficient = per_microbatch_global,
     .computed = "each microbatch divided by its own count over all ranks (a per-microbatch global count) and the "
                 "accumulation by G",
     .why_wrong = "every microbatch then weighs the same whatever its count",
     .remedy = "count the valid tokens of the whole window, over all ranks and all accumulated microbatches"},
    {.name = "sequence_share",
     .formula = "Σₘ (Sᵣₘ/{Drm})·(bᵣₘ/bᵣ)",
     .denominator = "{Drm}·bᵣ/bᵣₘ",
     .level = scope::microbatch,
     .coefficient = sequence_share,
     .computed = "each microbatch's token mean weighted by its share of the rank's sequences: Σₘ (Sᵣₘ/nᵣₘ)·(bᵣₘ/bᵣ)",
     .why_wrong = "a token's weight then depends on how many tokens and sequences its microbatch holds"},
    {.name = "prefix_count",
     .formula = "Σₘ Sᵣₘ/({Dr}₀ + … + {Drm})",
     .denominator = "a running count",
     .level = scope::microbatch,
     .coefficient = running_count,
     .computed = "each microbatch divided by a running count (the tokens seen so far in the window)",
     .why_wrong = "earlier microbatches then weigh more than later ones",
     .remedy = "divide every microbatch by the count of the whole window"},
    {.name = "sequence_positions",
     .formula = "Σₛ Sₛ/(nₛ + pₛ)",
     .denominator = "positions of each sequence",
     .level = scope::group,
     .coefficient = per_sequence_positions,
     .computed = "each sequence's loss sum divided by its padded length (its positions, padding included)",
     .why_wrong = "a token's weight then depends on the padding of its row"},
    {.name = "count_over_data_dims",
     .formula = "W·Sᵣ/({Dr} summed over {data})",
     .denominator = "{Dr} summed over {data}",
     .level = scope::rank,
     .coefficient = over_data_dims_only,
     .computed = "each rank divided its loss sum by the count reduced over {data} only, not over {mesh}: the ranks "
                 "of one {sequence} group hold slices of the same sequences, and each count left out the other "
                 "slices' tokens",
     .why_wrong = "each count is about 1/{CP} of the update's, so the gradient is about {CP} times the objective's, "
                  "and a token's weight depends on how its sequences were split over {sequence}",
     .remedy = "reduce the count over every data and sequence dimension ({mesh})"},
    {.name = "count_over_sequence_dims",
     .formula = "{CP}·Sᵣ/({Dr} summed over {sequence})",
     .denominator = "{Dr} summed over {sequence}",
     .level = scope::rank,
     .coefficient = over_sequence_dims_only,
     .computed = "each rank divided its loss sum by the count of its {sequence} group (reduced over {sequence}, not "
                 "over {mesh}) and scaled it by {CP} for the mean over {sequence}",
     .why_wrong = "every {data} coordinate's sequences then weigh the same whatever their valid-token counts: a mean "
                  "of the {data} groups' means",
     .remedy = "reduce the count over {mesh}"},
    {.name = "count_before_sequence_sharding",
     .formula = "W·Sᵣ/({CP}·{D})",
     .denominator = "{CP}·{D}",
     .level = scope::update,
     .coefficient = before_sequence_sharding,
     .computed = "every rank counted the valid tokens of its whole sequences, before they were split over "
                 "{sequence}, and the counts were summed over {mesh}: each token counted {CP} times",
     .why_wrong = "the denominator is {CP} times the update's, so the gradient is the objective's divided by {CP}, "
                  "as it would be with the loss averaged over {sequence} once too often",
     .remedy = "count the tokens each rank holds after the split, or sum the whole sequences' counts over {data} "
               "only"},
    {.name = "slice_length",
     .formula = "W·Σₖ Sₖ/({D}·nₖ), nₖ each slice's tokens",
     .denominator = "{D}·nₖ",
     .level = scope::group,
     .coefficient = slice_length_counted,
     .computed = "each {sequence} rank divided its slice by the slice's length, not the whole sequence's: each "
                 "slice's token mean took the place of its sequence's",
     .why_wrong = "a token then weighs 1/(B·nₖ) by the valid tokens nₖ of the slice that holds it, not 1/(B·nₛ) "
                  "by its whole sequence's: a sequence split over {sequence} weighs once per slice, a token on a "
                  "short slice more than one on a long slice",
     .remedy = "divide each slice by its whole sequence's valid tokens, the slices' counts summed over {sequence}"},
    {.name = "sequences_over_data_dims",
     .formula = "W·Sᵣ/({Dr} summed over {data})",
     .denominator = "{Dr} summed over {data}",
     .level = scope::rank,
     .coefficient = sequences_over_data_dims_only,
     .computed = "each rank divided its loss sum by the sequences counted over {data} only, each {sequence} rank "
                 "counting the sequences its own slices hold a valid token of: a sequence whose valid tokens all "
                 "lie on another {sequence} rank was left out of that rank's count",
     .why_wrong = "the count then differs between the {sequence} ranks and falls short of B where a sequence's "
                  "tokens lie on fewer than {CP} of them, so a token's weight depends on how its sequence was split",
     .remedy = "count each sequence once, wherever its valid tokens lie: reduce the per-sequence counts over "
               "{sequence} first (or count the rows before the split), then sum over {data}"},
    {.name = "sequences_counted_per_slice",
     .formula = "W·Sᵣ/({CP}·{D})",
     .denominator = "{CP}·{D}",
     .level = scope::update,
     .coefficient = sequences_per_slice,
     .computed = "the sequence count was summed over {mesh}: every {sequence} rank holds a slice of each of its "
                 "sequences (its row of the batch), so each sequence was counted {CP} times",
     .why_wrong = "the denominator is {CP}·B, so the gradient is the objective's divided by {CP}",
     .remedy = "sum the sequence count over {data} only, or count each sequence on one {sequence} rank"},
    {.name = "count_with_replicas",
     .formula = "W·Sᵣ/({TP}·{D})",
     .denominator = "{TP}·{D}",
     .level = scope::update,
     .coefficient = replicas_counted,
     .computed = "the count was reduced over every rank of the mesh, {replica} included: the ranks of {replica} "
                 "hold the same tokens, so each token was counted {TP} times",
     .why_wrong = "the denominator is {TP} times the update's, so the gradient is the objective's divided by {TP}",
     .remedy = "reduce the count over {mesh} only, the ranks that hold distinct tokens (or divide it by {TP})"},
}};

}  // namespace

objective_units::objective_units(const partition& update, objective_kind objective)
    : update_(&update), objective_(objective) {
  switch (objective) {
    case objective_kind::token_mean: total_ = rational(update.valid_tokens()); break;
    case objective_kind::weighted_token_mean: total_ = update.mass(); break;
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean:
      if (update.has_slices()) join_ = std::make_shared<const sequence_join>(update);
      total_ = rational(join_ ? join_->sequences() : update.sequence_count());
      break;
    case objective_kind::constant:
      total_ = update.normalizer;
      break;
  }
  if (update.mesh_extent(mesh_role::sequence) < 2) return;
  // The counts reduced over one role's dimensions: one total per coordinate along the other role's.
  std::vector<tree_sum> by_sequence(update.mesh_extent(mesh_role::sequence));
  std::vector<tree_sum> by_data(update.mesh_extent(mesh_role::data));
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rational count = of_rank(r);
    by_sequence[update.mesh_index(r, mesh_role::sequence)].add(count);
    by_data[update.mesh_index(r, mesh_role::data)].add(count);
  }
  for (tree_sum& total : by_sequence) over_data_.push_back(total.value());
  for (tree_sum& total : by_data) over_sequence_.push_back(total.value());
}

const weighted_totals& objective_units::rank_moments(std::size_t r, bool absolute) const {
  std::vector<std::optional<weighted_totals>>& kept = rank_moments_[absolute ? 1 : 0];
  if (kept.empty()) kept.resize(update_->ranks.size());
  std::optional<weighted_totals>& moments = kept[r];
  if (!moments) {
    const rank_stats& rank = update_->ranks[r];
    moments = weighted_totals{rank.mass(), absolute ? rank.weighted_target_abs_sum() : rank.weighted_target_sum()};
  }
  return *moments;
}

std::optional<rational> objective_units::over_data_dims(std::size_t r) const {
  if (over_data_.empty()) return std::nullopt;
  return over_data_[update_->mesh_index(r, mesh_role::sequence)];
}

std::optional<rational> objective_units::over_sequence_dims(std::size_t r) const {
  if (over_sequence_.empty()) return std::nullopt;
  return over_sequence_[update_->mesh_index(r, mesh_role::data)];
}

bool objective_units::applies(const partition& update, objective_kind objective) {
  switch (objective) {
    case objective_kind::token_mean: return true;
    case objective_kind::weighted_token_mean: return update.objective == objective_kind::weighted_token_mean;
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean:
      for (const rank_stats& rank : update.ranks)
        for (const microbatch_stats& m : rank.microbatches)
          if (m.valid_tokens > 0 && !m.sequences) return false;
      return update.sequence_count() > 0;
    case objective_kind::constant: return update.normalizer > 0;
  }
  return false;
}

rational objective_units::of_rank(std::size_t r) const {
  const rank_stats& rank = update_->ranks[r];
  switch (objective_) {
    case objective_kind::weighted_token_mean: return rank.mass();
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean:
      return rational(join_ ? join_->rank_sequences(r) : rank.sequence_count());
    case objective_kind::token_mean:
    case objective_kind::constant: break;
  }
  return rational(rank.valid_tokens());
}

rational objective_units::of_microbatch(std::size_t r, std::size_t m) const {
  const microbatch_stats& microbatch = update_->ranks[r].microbatches[m];
  switch (objective_) {
    case objective_kind::weighted_token_mean: return microbatch.mass();
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean:
      return rational(join_ ? join_->microbatch_sequences(r, m) : microbatch.sequence_count());
    case objective_kind::token_mean:
    case objective_kind::constant: break;
  }
  return rational(microbatch.valid_tokens);
}

rational objective_units::token_factor(const group_ref& where) const {
  if (objective_ != objective_kind::sequence_mean) return rational(1);
  const group_stats& group = update_->ranks[where.rank].microbatches[where.microbatch].group(where.group);
  if (group.valid_tokens == 0) return rational(0);
  rational a = rational(1) / sequence_tokens(where);
  return a;
}

std::uint64_t objective_units::sequence_tokens(const group_ref& where) const {
  if (join_) return join_->sequence_tokens(where.rank, where.microbatch, where.group);
  return update_->ranks[where.rank].microbatches[where.microbatch].group(where.group).valid_tokens;
}

std::string_view objective_units::symbol(std::size_t level_index) const noexcept {
  static constexpr std::array<std::array<std::string_view, 3>, 4> symbols{{
      {"N", "nᵣ", "nᵣₘ"}, {"M", "mᵣ", "mᵣₘ"}, {"B", "bᵣ", "bᵣₘ"}, {"C", "nᵣ", "nᵣₘ"}}};
  std::size_t row = 0;
  switch (objective_) {
    case objective_kind::token_mean: row = 0; break;
    case objective_kind::weighted_token_mean: row = 1; break;
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean: row = 2; break;
    case objective_kind::constant: row = 3; break;
  }
  return symbols[row][std::min<std::size_t>(level_index, 2)];
}

std::span<const normalization> report_normalizations() noexcept { return report_table; }

std::span<const normalization> diagnosed_normalizations() noexcept { return diagnosed_table; }

const normalization* find_normalization(std::string_view name) noexcept {
  for (const normalization& n : report_table)
    if (n.name == name) return &n;
  for (const normalization& n : diagnosed_table)
    if (n.name == name) return &n;
  return nullptr;
}

std::string why_wrong(const normalization& n, reducer_kind reducer) {
  std::string why(reducer == reducer_kind::sum && !n.why_wrong_summed.empty() ? n.why_wrong_summed : n.why_wrong);
  if (!n.remedy.empty()) why += ": " + std::string(n.remedy);
  return why;
}

namespace {

// `text` with each {slot} it names replaced by the slot's value; any other brace is copied as it is.
template <std::size_t size>
std::string substituted(std::string_view text,
                        const std::array<std::pair<std::string_view, std::string>, size>& slots) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t brace = std::min(text.find('{', i), text.size());
    out.append(text.substr(i, brace - i));
    if (brace == text.size()) break;
    const std::string_view rest = text.substr(brace);
    const auto slot =
        std::find_if(slots.begin(), slots.end(), [&](const auto& s) { return rest.starts_with(s.first); });
    if (slot == slots.end()) {
      out += '{';
      i = brace + 1;
      continue;
    }
    out += slot->second;
    i = brace + slot->first.size();
  }
  return out;
}

}  // namespace

std::string mesh_spelled(std::string_view text, const partition& update) {
  // Most words name no slot; the gate spells every candidate's words, so those return before the names are made.
  if (text.find('{') == std::string_view::npos) return std::string(text);
  const std::string data = update.mesh_names(mesh_role::data);
  const std::string sequence = update.mesh_names(mesh_role::sequence);
  const std::string replica = update.mesh_names(mesh_role::replica);
  const std::array<std::pair<std::string_view, std::string>, 6> slots{{
      {"{data}", data.empty() ? "the data dimensions" : data},
      {"{sequence}", sequence.empty() ? "the sequence dimensions" : sequence},
      {"{mesh}", data.empty() || sequence.empty() ? data + sequence : data + " × " + sequence},
      {"{CP}", std::to_string(update.mesh_extent(mesh_role::sequence))},
      {"{replica}", replica.empty() ? "the replica dimensions" : replica},
      {"{TP}", std::to_string(update.mesh_extent(mesh_role::replica))},
  }};
  return substituted(text, slots);
}

std::string spelled(std::string_view text, const objective_units& units) {
  if (text.find('{') == std::string_view::npos) return std::string(text);  // most words name no symbol
  const std::array<std::pair<std::string_view, std::string>, 3> symbols{{
      {"{Drm}", std::string(units.symbol(2))},
      {"{Dr}", std::string(units.symbol(1))},
      {"{D}", std::string(units.symbol(0))},
  }};
  return substituted(mesh_spelled(text, units.update()), symbols);
}

namespace {

// The reducer's factor on a local coefficient: 1/W under mean, 1 under sum; 1 for the objective's own weights;
// each times the loss's weight in the update's objective (1 but for an auxiliary term).
rational reduction(const objective_units& units, const normalization& n) {
  const rational& weight = units.update().loss_weight;
  if (n.objective_itself || units.update().reducer == reducer_kind::sum) return weight;
  rational f = weight / units.world_size();
  return f;
}

}  // namespace

std::optional<rational> local_coefficient(const objective_units& units, const normalization& n,
                                          const group_ref& where) {
  const std::optional<rational> c = n.coefficient(units, where);
  if (!c) return std::nullopt;
  rational coefficient = *c * units.token_factor(where) * units.update().loss_weight;
  return coefficient;
}

std::optional<rational> delivered_unit_weight(const objective_units& units, const normalization& n,
                                              const group_ref& where) {
  std::optional<rational> c = n.coefficient(units, where);
  if (!c) return std::nullopt;
  *c *= reduction(units, n);
  return c;
}

std::optional<std::vector<rational>> delivered_weights(const objective_units& units, const normalization& n) {
  const rational reduced = reduction(units, n);
  std::vector<rational> weights;
  const partition& update = units.update();
  std::optional<rational> unit;  // the coefficient of the current unit of n's scope
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      const microbatch_stats& microbatch = rank.microbatches[m];
      for (std::size_t g = 0; g < microbatch.group_count(); ++g) {
        const group_ref at{r, m, g};
        const bool fresh = n.level == scope::group || (n.level == scope::microbatch && g == 0) ||
                           (n.level == scope::rank && m == 0 && g == 0) ||
                           (n.level == scope::update && r == 0 && m == 0 && g == 0);
        if (fresh) {
          unit = n.coefficient(units, at);
          if (!unit) return std::nullopt;
          rational delivered = *unit * reduced;
          unit = std::move(delivered);
        }
        rational weight = *unit * units.token_factor(at);
        weights.push_back(std::move(weight));
      }
    }
  }
  return weights;
}

std::optional<weighted_totals> totals(const objective_units& units, const normalization& n, bool absolute) {
  // Σ_g c_g·(mass_g, value_g) with c_g = k(unit)·a(g)·reduction: the token factor a is summed into each
  // microbatch's moments (it is 1 except under sequence_mean), and k multiplies once per unit of its scope.
  // A unit whose coefficient is undefined (it divides by its own count, 0) makes a gradient undefined; in
  // a bound (`absolute`) it holds no mass and adds nothing.
  const partition& update = units.update();
  const bool factored = units.objective() == objective_kind::sequence_mean;
  auto magnitude = [&](const std::optional<rational>& c) -> std::optional<rational> {
    if (!c) return std::nullopt;
    if (!absolute) return c;
    return abs(*c);
  };
  // `at` is the group's place (read under sequence_mean only, for its sequence's token factor).
  auto moments_of = [&](const group_stats& g, const group_ref& at, tree_sum& mass, tree_sum& value,
                        const rational* scale) {
    const rational& v = absolute ? g.weighted_target_abs_sum() : g.weighted_target_sum();
    if (!factored && !scale) {
      mass.add(g.mass());
      value.add(v);
      return;
    }
    rational c = factored ? units.token_factor(at) : rational(1);
    if (scale) c *= *scale;
    if (c == 0) return;
    mass.add(c * g.mass());
    value.add(c * v);
  };
  tree_sum update_mass;
  tree_sum update_value;
  std::optional<rational> update_unit;
  if (n.level == scope::update) {
    update_unit = magnitude(n.coefficient(units, {}));
    if (!update_unit) return std::nullopt;
  }
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    std::optional<rational> rank_unit;
    if (n.level == scope::rank) {
      rank_unit = magnitude(n.coefficient(units, {r, 0, 0}));
      if (!rank_unit && absolute) continue;
      if (!rank_unit) return std::nullopt;
    }
    rational mass;
    rational value;
    if (!factored && (n.level == scope::update || n.level == scope::rank)) {
      // Unscaled within the rank: the sums every such normalization shares.
      const weighted_totals& moments = units.rank_moments(r, absolute);
      mass = moments.mass;
      value = moments.value;
    } else {
      tree_sum rank_mass;
      tree_sum rank_value;
      for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
        const microbatch_stats& microbatch = rank.microbatches[m];
        std::optional<rational> microbatch_unit;
        if (n.level == scope::microbatch) {
          microbatch_unit = magnitude(n.coefficient(units, {r, m, 0}));
          if (!microbatch_unit && absolute) continue;
          if (!microbatch_unit) return std::nullopt;
          if (*microbatch_unit == 0) continue;
        }
        if (n.level == scope::group) {
          for (std::size_t g = 0; g < microbatch.group_count(); ++g) {
            const std::optional<rational> c = magnitude(n.coefficient(units, {r, m, g}));
            if (!c && absolute) continue;
            if (!c) return std::nullopt;
            moments_of(microbatch.group(g), {r, m, g}, rank_mass, rank_value, &*c);
          }
        } else if (factored) {
          for (std::size_t g = 0; g < microbatch.group_count(); ++g)
            moments_of(microbatch.group(g), {r, m, g}, rank_mass, rank_value,
                       microbatch_unit ? &*microbatch_unit : nullptr);
        } else if (microbatch.valid_tokens > 0) {
          moments_of(microbatch, {r, m, 0}, rank_mass, rank_value, microbatch_unit ? &*microbatch_unit : nullptr);
        }
      }
      mass = rank_mass.value();
      value = rank_value.value();
    }
    if (rank_unit) {
      mass *= *rank_unit;
      value *= *rank_unit;
    }
    update_mass.add(std::move(mass));
    update_value.add(std::move(value));
  }
  weighted_totals result{update_mass.value(), update_value.value()};
  rational factor = reduction(units, n);
  if (absolute) factor = abs(factor);  // a negative loss weight: the magnitudes stay magnitudes
  if (update_unit) factor *= *update_unit;
  if (factor != 1) {
    result.mass *= factor;
    result.value *= factor;
  }
  return result;
}

rational objective_loss_sum(const objective_units& units, std::size_t rank) {
  const rank_stats& stats = units.update().ranks[rank];
  if (units.objective() != objective_kind::sequence_mean) return loss_gradient_sum(stats, units.update().theta);
  tree_sum total;
  for (std::size_t m = 0; m < stats.microbatches.size(); ++m)
    for (std::size_t g = 0; g < stats.microbatches[m].group_count(); ++g) {
      const group_stats& group = stats.microbatches[m].group(g);
      if (group.valid_tokens == 0) continue;
      total.add(loss_gradient_sum(group, units.update().theta) * units.token_factor({rank, m, g}));
    }
  return total.value();
}

namespace {

// Whether every group of two losses (on the same ranks, microbatches aligned) holds as many valid tokens.
bool same_group_counts(const partition& a, const partition& b) {
  for (std::size_t r = 0; r < a.ranks.size() && r < b.ranks.size(); ++r) {
    if (a.ranks[r].microbatches.size() != b.ranks[r].microbatches.size()) return false;
    for (std::size_t m = 0; m < a.ranks[r].microbatches.size(); ++m) {
      const microbatch_stats& x = a.ranks[r].microbatches[m];
      const microbatch_stats& y = b.ranks[r].microbatches[m];
      if (x.group_count() != y.group_count()) return false;
      for (std::size_t g = 0; g < x.group_count(); ++g)
        if (x.group(g).valid_tokens != y.group(g).valid_tokens) return false;
    }
  }
  return a.ranks.size() == b.ranks.size();
}

}  // namespace

void link_losses(partition& main, std::span<auxiliary_term> terms) {
  std::vector<partition*> losses{&main};
  for (auxiliary_term& term : terms) losses.push_back(&term.update);
  std::vector<rational> counts;
  for (const partition* loss : losses) counts.push_back(objective_units(*loss, loss->objective).total());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    losses[i]->siblings.clear();
    for (std::size_t j = 0; j < losses.size(); ++j) {
      if (i == j) continue;
      const bool same = losses[i]->objective == losses[j]->objective && counts[i] == counts[j] &&
                        same_group_counts(*losses[i], *losses[j]);
      losses[i]->siblings.push_back({losses[j]->loss_name, counts[j], same});
    }
  }
}

std::optional<rational> synchronized_gradient(const objective_units& units, const normalization& n) {
  const std::optional<weighted_totals> t = totals(units, n, false);
  if (!t) return std::nullopt;
  rational g = units.update().theta * t->mass;
  g -= t->value;
  return g;
}

}  // namespace normcheck
