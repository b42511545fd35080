#include "normcheck/core/normalization.hpp"

#include "normcheck/core/counts.hpp"
#include "normcheck/core/exact_sum.hpp"

#include <algorithm>
#include <array>

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

// The rows of the update: its sequences that hold a valid token, a microbatch without sequences counting as
// one row when it holds one.
std::uint64_t rows(const partition& update) {
  std::uint64_t total = 0;
  for (const rank_stats& rank : update.ranks)
    for (const microbatch_stats& m : rank.microbatches)
      total = add_counts(total, m.sequences ? m.sequence_count() : (m.valid_tokens > 0 ? 1 : 0));
  return total;
}

bool token_units(const objective_units& units) {
  const objective_kind objective = units.objective();
  return objective == objective_kind::token_mean || objective == objective_kind::constant;
}

// The report's six.

std::optional<rational> objective_weight(const objective_units& units, const group_ref&) { return reciprocal(units.total()); }

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
  if (units.objective() != objective_kind::token_mean) return std::nullopt;
  // N + rows can pass max_count (every row holds a token): added as rationals.
  rational c = reducer_compensation(units) / (rational(update.valid_tokens()) + rows(update));
  return c;
}

std::optional<rational> per_microbatch_global(const objective_units& units, const group_ref& at) {
  const partition& update = units.update();
  const std::size_t g = update.ranks.front().microbatches.size();
  if (g < 2) return std::nullopt;  // the objective itself
  tree_sum count;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    if (update.ranks[r].microbatches.size() != g) return std::nullopt;
    count.add(units.of_microbatch(r, at.microbatch));
  }
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
  rational c = rational(microbatch.sequence_count()) / (rational(rank_sequences) * units.of_microbatch(at.rank, at.microbatch));
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

constexpr std::array<normalization, 6> report_table{{
    {"global_mean", "ΣSᵣ/{D}", "{D}", scope::update, true, objective_weight},
    {"local_mean", "Sᵣ/{Dr}", "{Dr}", scope::rank, false, per_rank},
    {"local_sum", "Sᵣ", "none", scope::update, false, unnormalized},
    {"scaled_sum", "W·Sᵣ/{D}", "{D}", scope::update, false, compensated},
    {"global_share", "Sᵣ/{D}", "{D}", scope::update, false, objective_weight},
    {"microbatch_mean", "(1/Gᵣ)·Σₘ Sᵣₘ/{Drm}", "{Drm}", scope::microbatch, false, per_microbatch},
}};

constexpr std::array<normalization, 8> diagnosed_table{{
    {"sum_of_microbatch_means", "Σₘ Sᵣₘ/{Drm}", "{Drm}", scope::microbatch, false, per_microbatch_summed},
    {"empty_microbatches_counted", "(1/Gᵣ)·Σₘ Sᵣₘ/{Drm}, empty microbatches counted in Gᵣ", "{Drm}", scope::microbatch,
     false, per_microbatch_empty_counted},
    {"count_padding", "W·Sᵣ/(N + P)", "N + P", scope::update, false, positions_counted},
    {"count_before_shift", "W·Sᵣ/(N + rows)", "N + rows", scope::update, false, labels_before_shift},
    {"microbatch_global_count", "(1/G)·Σₘ W·Sᵣₘ/Σᵣ{Drm}", "Σᵣ{Drm}", scope::microbatch, false, per_microbatch_global},
    {"sequence_share", "Σₘ (Sᵣₘ/{Drm})·(bᵣₘ/bᵣ)", "{Drm}·bᵣ/bᵣₘ", scope::microbatch, false, sequence_share},
    {"prefix_count", "Σₘ Sᵣₘ/({Dr}₀ + … + {Drm})", "a running count", scope::microbatch, false, running_count},
    {"sequence_positions", "Σₛ Sₛ/(nₛ + pₛ)", "positions of each sequence", scope::group, false, per_sequence_positions},
}};

}  // namespace

objective_units::objective_units(const partition& update, objective_kind objective)
    : update_(&update), objective_(objective) {
  switch (objective) {
    case objective_kind::token_mean: total_ = rational(update.valid_tokens()); break;
    case objective_kind::weighted_token_mean: total_ = update.mass(); break;
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean: total_ = rational(update.sequence_count()); break;
    case objective_kind::constant: total_ = update.normalizer; break;
  }
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
    case objective_kind::sequence_sum_mean: return rational(rank.sequence_count());
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
    case objective_kind::sequence_sum_mean: return rational(microbatch.sequence_count());
    case objective_kind::token_mean:
    case objective_kind::constant: break;
  }
  return rational(microbatch.valid_tokens);
}

rational objective_units::token_factor(const group_stats& group) const {
  if (objective_ != objective_kind::sequence_mean) return rational(1);
  if (group.valid_tokens == 0) return rational(0);
  rational a = rational(1) / group.valid_tokens;
  return a;
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

std::string spelled(std::string_view text, const objective_units& units) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (text.substr(i, 5) == "{Drm}") {
      out += units.symbol(2);
      i += 5;
    } else if (text.substr(i, 4) == "{Dr}") {
      out += units.symbol(1);
      i += 4;
    } else if (text.substr(i, 3) == "{D}") {
      out += units.symbol(0);
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

namespace {

// The reducer's factor on a local coefficient: 1/W under mean, 1 under sum; 1 for the objective's own weights.
rational reduction(const objective_units& units, const normalization& n) {
  if (n.objective_itself || units.update().reducer == reducer_kind::sum) return rational(1);
  rational f = rational(1) / units.world_size();
  return f;
}

}  // namespace

std::optional<rational> local_coefficient(const objective_units& units, const normalization& n, const group_ref& where) {
  const std::optional<rational> c = n.coefficient(units, where);
  if (!c) return std::nullopt;
  const group_stats& group = units.update().ranks[where.rank].microbatches[where.microbatch].group(where.group);
  rational coefficient = *c * units.token_factor(group);
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
        rational weight = *unit * units.token_factor(microbatch.group(g));
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
  auto moments_of = [&](const group_stats& g, tree_sum& mass, tree_sum& value, const rational* scale) {
    const rational& v = absolute ? g.weighted_target_abs_sum() : g.weighted_target_sum();
    if (!factored && !scale) {
      mass.add(g.mass());
      value.add(v);
      return;
    }
    rational c = factored ? units.token_factor(g) : rational(1);
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
          moments_of(microbatch.group(g), rank_mass, rank_value, &*c);
        }
      } else if (factored) {
        for (std::size_t g = 0; g < microbatch.group_count(); ++g)
          moments_of(microbatch.group(g), rank_mass, rank_value, microbatch_unit ? &*microbatch_unit : nullptr);
      } else if (microbatch.valid_tokens > 0) {
        moments_of(microbatch, rank_mass, rank_value, microbatch_unit ? &*microbatch_unit : nullptr);
      }
    }
    rational mass = rank_mass.value();
    rational value = rank_value.value();
    if (rank_unit) {
      mass *= *rank_unit;
      value *= *rank_unit;
    }
    update_mass.add(std::move(mass));
    update_value.add(std::move(value));
  }
  weighted_totals result{update_mass.value(), update_value.value()};
  rational factor = reduction(units, n);
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
  for (const microbatch_stats& m : stats.microbatches)
    for (std::size_t g = 0; g < m.group_count(); ++g) {
      const group_stats& group = m.group(g);
      if (group.valid_tokens == 0) continue;
      total.add(loss_gradient_sum(group, units.update().theta) * units.token_factor(group));
    }
  return total.value();
}

std::optional<rational> synchronized_gradient(const objective_units& units, const normalization& n) {
  const std::optional<weighted_totals> t = totals(units, n, false);
  if (!t) return std::nullopt;
  rational g = units.update().theta * t->mass;
  g -= t->value;
  return g;
}

}  // namespace normcheck
