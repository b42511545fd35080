#include "grouped_oracle.hpp"

#include <algorithm>

namespace normcheck::properties::oracle {

namespace {

bool weighted(const grouped_update& update) { return update.objective == objective_kind::weighted_token_mean; }

rational group_mass(const grouped_update& update, const group_tokens& g) {
  if (!weighted(update)) return rational(g.valid_tokens());
  rational total;
  for (std::size_t i = 0; i < g.positions.size(); ++i)
    if (g.positions[i]) total += *g.weights[i];
  return total;
}

// The units one group holds under `units`: its tokens, its weight, or 1 for a sequence with a valid token.
rational group_units(const grouped_update& update, const microbatch_tokens& m, const group_tokens& g,
                     objective_kind units) {
  switch (units) {
    case objective_kind::token_mean:
    case objective_kind::constant: return rational(g.valid_tokens());
    case objective_kind::weighted_token_mean: return group_mass(update, g);
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean: return rational(m.sequences && g.valid_tokens() > 0 ? 1 : 0);
  }
  return rational(0);
}

rational microbatch_units(const grouped_update& update, const microbatch_tokens& m, objective_kind units) {
  rational total;
  for (const group_tokens& g : m.groups) total += group_units(update, m, g, units);
  return total;
}

rational rank_units(const grouped_update& update, const grouped_rank& rank, objective_kind units) {
  rational total;
  for (const microbatch_tokens& m : rank) total += microbatch_units(update, m, units);
  return total;
}

// What the objective itself multiplies a token's loss by: 1/nₛ under the sequence mean.
rational token_factor(const group_tokens& g, objective_kind units) {
  if (units != objective_kind::sequence_mean || g.valid_tokens() == 0) return rational(1);
  rational a = rational(1) / g.valid_tokens();
  return a;
}

std::uint64_t microbatch_tokens_of(const microbatch_tokens& m) {
  std::uint64_t n = 0;
  for (const group_tokens& g : m.groups) n += g.valid_tokens();
  return n;
}

std::uint64_t sequences_of(const microbatch_tokens& m) {
  std::uint64_t b = 0;
  if (m.sequences)
    for (const group_tokens& g : m.groups) b += g.valid_tokens() > 0 ? 1 : 0;
  return b;
}

// The same number of microbatches on every rank, or 0.
std::size_t common_accumulation(const grouped_update& update) {
  const std::size_t g = update.ranks.front().size();
  for (const grouped_rank& rank : update.ranks)
    if (rank.size() != g) return 0;
  return g;
}

}  // namespace

std::uint64_t valid_tokens(const grouped_update& update) {
  std::uint64_t n = 0;
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank) n += microbatch_tokens_of(m);
  return n;
}

rational mass(const grouped_update& update) {
  rational total;
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank)
      for (const group_tokens& g : m.groups) total += group_mass(update, g);
  return total;
}

std::uint64_t sequences(const grouped_update& update) {
  std::uint64_t b = 0;
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank) b += sequences_of(m);
  return b;
}

std::uint64_t padding(const grouped_update& update) {
  std::uint64_t p = 0;
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank)
      for (const group_tokens& g : m.groups) p += g.padding();
  return p;
}

bool countable(const grouped_update& update, objective_kind objective) {
  switch (objective) {
    case objective_kind::token_mean: return true;
    case objective_kind::weighted_token_mean: return weighted(update);
    case objective_kind::constant: return update.objective == objective_kind::constant && update.normalizer > 0;
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean:
      for (const grouped_rank& rank : update.ranks)
        for (const microbatch_tokens& m : rank)
          if (!m.sequences && microbatch_tokens_of(m) > 0) return false;
      return sequences(update) > 0;
  }
  return false;
}

rational total_units(const grouped_update& update, objective_kind objective) {
  switch (objective) {
    case objective_kind::token_mean: return rational(valid_tokens(update));
    case objective_kind::weighted_token_mean: return mass(update);
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean: return rational(sequences(update));
    case objective_kind::constant: return update.normalizer;
  }
  return rational(0);
}

std::optional<table> objective_table(const grouped_update& update) {
  if (valid_tokens(update) == 0) return std::nullopt;
  if (!countable(update, update.objective) || total_units(update, update.objective) == 0) return std::nullopt;
  return normalization_table(update, "global_mean", update.objective);
}

rational gradient_of(const grouped_update& update, const table& weights) {
  const std::vector<rational> sums = derivative_sums(update);
  rational total;
  for (std::size_t g = 0; g < sums.size(); ++g) total += weights[g] * sums[g];
  return total;
}

std::optional<rational> objective_gradient(const grouped_update& update) {
  const std::optional<table> weights = objective_table(update);
  if (!weights) return std::nullopt;
  return gradient_of(update, *weights);
}

std::vector<rational> derivative_sums(const grouped_update& update) {
  std::vector<rational> sums;
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank)
      for (const group_tokens& g : m.groups) {
        rational sum;
        for (std::size_t i = 0; i < g.positions.size(); ++i)
          if (const token& y = g.positions[i]) {
            rational term = update.theta - *y;
            if (weighted(update)) term *= *g.weights[i];
            sum += term;
          }
        sums.push_back(std::move(sum));
      }
  return sums;
}

const std::vector<std::string_view>& report_names() {
  static const std::vector<std::string_view> names{"global_mean", "local_mean", "local_sum",
                                                   "scaled_sum",  "global_share", "microbatch_mean"};
  return names;
}

const std::vector<std::string_view>& diagnosed_names() {
  static const std::vector<std::string_view> names{
      "sum_of_microbatch_means", "empty_microbatches_counted", "count_padding", "count_before_shift",
      "microbatch_global_count", "sequence_share",             "prefix_count",  "sequence_positions"};
  return names;
}

std::optional<table> normalization_table(const grouped_update& update, std::string_view name, objective_kind units) {
  if (!countable(update, units)) return std::nullopt;
  const rational w{update.world_size()};
  const rational reduced = update.reducer == reducer_kind::mean ? rational(1 / w) : rational(1);
  const rational total = total_units(update, units);
  const bool token_units = units == objective_kind::token_mean || units == objective_kind::constant;
  const std::size_t common = common_accumulation(update);

  // Conditions on the whole update, under which the name is a mistake of its own here.
  if (name == "empty_microbatches_counted") {
    bool some_empty = false;
    for (const grouped_rank& rank : update.ranks)
      for (const microbatch_tokens& m : rank) some_empty = some_empty || microbatch_tokens_of(m) == 0;
    if (!some_empty) return std::nullopt;
  }
  if ((name == "count_padding" || name == "count_before_shift") && units != objective_kind::token_mean)
    return std::nullopt;
  if (name == "count_padding" && padding(update) == 0) return std::nullopt;
  if (name == "microbatch_global_count" && common < 2) return std::nullopt;
  if ((name == "sequence_share" || name == "sequence_positions") && !token_units) return std::nullopt;
  if (name == "prefix_count")
    for (const grouped_rank& rank : update.ranks)
      if (rank.size() < 2) return std::nullopt;
  if (name == "sequence_positions")
    for (const grouped_rank& rank : update.ranks)
      for (const microbatch_tokens& m : rank)
        if (!m.sequences) return std::nullopt;

  std::uint64_t rows = 0;  // declared sequences that hold a valid token
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank) {
      // A microbatch with a valid token and no sequences hides how many rows it holds: one per row is undefined.
      if (name == "count_before_shift" && !m.sequences && microbatch_tokens_of(m) > 0) return std::nullopt;
      for (const group_tokens& g : m.groups) rows += g.valid_tokens() > 0 ? 1 : 0;
    }

  table weights;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const grouped_rank& rank = update.ranks[r];
    const rational of_rank = rank_units(update, rank, units);
    const rational gr{rank.size()};
    rational prefix;
    std::uint64_t rank_sequences = 0;
    for (const microbatch_tokens& m : rank) rank_sequences += sequences_of(m);
    for (std::size_t mi = 0; mi < rank.size(); ++mi) {
      const microbatch_tokens& m = rank[mi];
      const rational of_microbatch = microbatch_units(update, m, units);
      prefix += of_microbatch;
      rational across;  // microbatch mi's units over every rank
      if (common >= 2)
        for (const grouped_rank& other : update.ranks) across += microbatch_units(update, other[mi], units);
      for (const group_tokens& g : m.groups) {
        const rational a = token_factor(g, units);
        rational c;
        if (name == "global_mean") {
          if (total == 0) return std::nullopt;
          c = a / total;
          weights.push_back(std::move(c));
          continue;  // the objective's own weights: not combined by the reducer
        }
        if (name == "local_mean") {
          if (of_rank == 0) return std::nullopt;
          c = a / of_rank;
        } else if (name == "local_sum") {
          c = a;
        } else if (name == "scaled_sum") {
          if (total == 0) return std::nullopt;
          c = a * w / total;
        } else if (name == "global_share") {
          if (total == 0) return std::nullopt;
          c = a / total;
        } else if (name == "microbatch_mean") {
          if (of_microbatch == 0) return std::nullopt;
          c = a / (gr * of_microbatch);
        } else if (name == "sum_of_microbatch_means") {
          if (of_microbatch == 0) return std::nullopt;
          c = a / of_microbatch;
        } else if (name == "empty_microbatches_counted") {
          c = of_microbatch == 0 ? rational(0) : rational(a / (gr * of_microbatch));
        } else if (name == "count_padding") {
          // W·Sᵣ/(N + P) under the mean reducer (Sᵣ/(N + P) under the sum): every token weighs 1/(N + P).
          c = rational(1) / (valid_tokens(update) + padding(update));
          c /= reduced;
        } else if (name == "count_before_shift") {
          c = rational(1) / (valid_tokens(update) + rows);
          c /= reduced;
        } else if (name == "microbatch_global_count") {
          if (across == 0) return std::nullopt;
          c = a / (rational(common) * across);
          c /= reduced;
        } else if (name == "sequence_share") {
          const std::uint64_t n = microbatch_tokens_of(m);
          if (rank_sequences == 0 || n == 0) return std::nullopt;
          c = rational(sequences_of(m)) / (rational(rank_sequences) * n);
        } else if (name == "prefix_count") {
          if (prefix == 0) return std::nullopt;
          c = a / prefix;
        } else if (name == "sequence_positions") {
          const std::uint64_t length = g.positions.size();
          c = length == 0 ? rational(0) : rational(rational(1) / length);
        } else {
          return std::nullopt;
        }
        c *= reduced;
        weights.push_back(std::move(c));
      }
    }
  }
  return weights;
}

}  // namespace normcheck::properties::oracle
