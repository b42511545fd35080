#include "normcheck/gate/suggest.hpp"

#include "normcheck/gate/bound.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/gate/weights.hpp"

#include "core/deterministic_random.hpp"

#include "normcheck/core/counts.hpp"
#include "normcheck/core/errors.hpp"
#include "normcheck/documents/field_reader.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>

namespace normcheck {

namespace {

struct named_value {
  std::string name;
  rational value;
  std::optional<rational> bound;
};

// The candidates a suggestion separates: the objective, every known mistake with a value, and which of them
// are wrong strategies (compared with each other too).
struct candidate_set {
  named_value objective;
  std::vector<named_value> mistakes;
  std::vector<bool> is_strategy;
};

// Whether the objective counts sequences or divides by a declared constant: a suggestion then has sequences, and
// code written for another objective is among the mistakes it separates.
bool declared_objective(objective_kind objective) {
  return counts_sequences(objective) || objective == objective_kind::constant;
}

// The computations the per-group gate knows beyond the scalar gate's mistakes (code written for another
// objective, the diagnosed normalizations), each as the value its weights give the update and its bound: the
// error factor times Σ_g |c_g|·(m_g·|θ| + Σw·|y|). The weights depend on the counts, not on the targets: a
// search over targets on fixed counts passes them once computed (`table`).
void add_table_candidates(const partition& update, dtype type, candidate_set& set,
                          const std::vector<weight_candidate>* table) {
  const std::optional<rational> factor = error_factor(update, type, std::nullopt);
  std::vector<weight_candidate> computed;
  if (!table) computed = weight_candidates(update);
  for (const weight_candidate& c : table ? *table : computed) {
    const bool named = std::any_of(set.mistakes.begin(), set.mistakes.end(),
                                   [&](const named_value& m) { return m.name == c.name; });
    if (named) continue;
    tree_sum value;
    tree_sum magnitude;
    std::size_t g = 0;
    for (const rank_stats& rank : update.ranks)
      for (const microbatch_stats& microbatch : rank.microbatches)
        for (std::size_t i = 0; i < microbatch.group_count(); ++i, ++g) {
          const group_stats& group = microbatch.group(i);
          const rational& w = c.weights[g];
          if (w == 0) continue;
          value.add(w * (update.theta * group.mass() - group.weighted_target_sum()));
          magnitude.add(abs(w) * (abs(update.theta) * group.mass() + group.weighted_target_abs_sum()));
        }
    std::optional<rational> bound;
    if (factor) bound = *factor * magnitude.value();
    set.mistakes.push_back({c.name, value.value(), std::move(bound)});
    set.is_strategy.push_back(false);
  }
}

candidate_set candidates_of(const partition& update, dtype type,
                            const std::vector<weight_candidate>* table = nullptr) {
  candidate_set set{{"the objective", *gradient(update, strategy::global_mean), objective_bound(update, type)}, {}, {}};
  for (const explanation& e : known_mistakes(update, type)) {
    const rational* value = std::get_if<rational>(&e.value);
    if (!value) continue;  // a mean over nothing is NaN, not a value to separate
    set.mistakes.push_back({e.name, *value, e.bound});
    set.is_strategy.push_back(strategy_from_name(e.name).has_value());
  }
  add_table_candidates(update, type, set, table);
  return set;
}

// |a − b| / max(bound_a, bound_b): 0 unless both bounds exist and the values differ.
rational bounds_apart(const named_value& a, const named_value& b) {
  if (!a.bound || !b.bound) return 0;
  const rational& larger = *a.bound > *b.bound ? *a.bound : *b.bound;
  rational distance = abs(a.value - b.value);
  if (larger == 0) return distance == 0 ? rational(0) : rational(integer(1) << 62);
  rational ratio = distance / larger;
  return ratio;
}

// The smallest separation over the pairs the gate must tell apart, skipping those the suggestion lists as
// inseparable or ambiguous (no choice of targets can separate them).
void measure(suggestion& s, const candidate_set& set) {
  bool first = true;
  auto compare = [&](const named_value& a, const named_value& b, bool structural) {
    if (structural) return;
    const std::string pair = a.name + " and " + b.name;
    const rational ratio = bounds_apart(a, b);
    if (first || ratio < s.separation) {
      s.separation = ratio;
      s.closest_pair = pair;
      first = false;
    }
  };
  auto listed = [](const std::vector<std::string>& list, const std::string& entry) {
    return std::find(list.begin(), list.end(), entry) != list.end();
  };
  for (const named_value& mistake : set.mistakes) compare(set.objective, mistake, listed(s.inseparable, mistake.name));
  for (std::size_t i = 0; i < set.mistakes.size(); ++i)
    for (std::size_t j = i + 1; j < set.mistakes.size(); ++j)
      if (set.is_strategy[i] && set.is_strategy[j])
        compare(set.mistakes[i], set.mistakes[j],
                listed(s.ambiguous, set.mistakes[i].name + " and " + set.mistakes[j].name));
  if (first) {  // nothing left to separate
    s.separation = rational(integer(1) << 62);
    s.closest_pair = "none";
  }
}

void measure(suggestion& s, const partition& update) { measure(s, candidates_of(update, s.type)); }

void measure(suggestion& s) {
  const partition update = to_partition(s.tokens);
  if (update.objective == objective_kind::weighted_token_mean && update.mass() == rational(update.valid_tokens())) {
    // With M = N, dividing by the count is the objective itself: nothing could tell them apart.
    s.separation = 0;
    s.closest_pair = "the objective and count_denominator";
    return;
  }
  measure(s, update);
}

// The partition of these counts at θ = 0 in which every token of microbatch (r, m) holds values[r][m]: only
// sums, so that candidates are compared without building tokens.
partition with_values(const update_counts& counts, const std::vector<std::vector<rational>>& values) {
  partition update;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    rank_stats& rank = update.ranks.emplace_back();
    for (std::size_t m = 0; m < counts[r].size(); ++m) {
      microbatch_stats& microbatch = rank.microbatches.emplace_back();
      microbatch.valid_tokens = counts[r][m];
      rational sum = values[r][m] * counts[r][m];
      rational magnitude = abs(sum);
      microbatch.set_sums({std::move(sum), std::move(magnitude), {}});
    }
  }
  return update;
}

// What a strategy delivers for one unit sum (microbatch (r, m)'s targets summing to 1, every other sum 0) at
// θ = 0, from the strategies' definitions (core/gradients.hpp): −1/N for the objective, −c·(1/W under the
// mean reducer) with c the scale the strategy puts on the microbatch. Nothing where the strategy is
// undefined on these counts. `structural_coincidences` checks these against `gradient` before use.
std::optional<rational> unit_value(strategy s, const update_counts& counts, std::size_t r, std::size_t m,
                                   std::uint64_t valid_tokens, const std::vector<std::uint64_t>& rank_tokens,
                                   reducer_kind reducer) {
  const rational world_size(counts.size());
  rational scale;
  switch (s) {
    case strategy::global_mean: return rational(-1) / valid_tokens;
    case strategy::local_mean:
      if (rank_tokens[r] == 0) return std::nullopt;
      scale = rational(1) / rank_tokens[r];
      break;
    case strategy::local_sum: scale = 1; break;
    case strategy::scaled_sum: scale = world_size / valid_tokens; break;
    case strategy::global_share: scale = rational(1) / valid_tokens; break;
    case strategy::microbatch_mean:
      if (counts[r][m] == 0) return std::nullopt;
      scale = rational(1) / (rational(counts[r][m]) * counts[r].size());
      break;
  }
  if (reducer == reducer_kind::mean) scale /= world_size;
  rational value = -scale;
  return value;
}

// Which mistakes coincide with the objective, and which wrong strategies with each other, for every choice
// of targets. At θ = 0 every value is linear in the microbatches' target sums, so two candidates coincide
// everywhere exactly when they agree on each unit sum (one microbatch's sum 1, every other 0). A strategy's
// value on each unit sum follows from its definition (`unit_value`), in one pass over the microbatches;
// the other mistakes are the objective times a factor other than 1, never equal to it (N > 0), which
// `suggest_for_counts` confirms on the targets it tries. Linear in the microbatches.
void structural_coincidences(const update_counts& counts, suggestion& s) {
  std::uint64_t valid_tokens = 0;
  std::vector<std::uint64_t> rank_tokens;
  for (const std::vector<std::uint64_t>& rank : counts) {
    std::uint64_t total = 0;
    for (std::uint64_t n : rank) total = add_counts(total, n);
    rank_tokens.push_back(total);
    valid_tokens = add_counts(valid_tokens, total);
  }
  std::vector<std::vector<rational>> zeros;
  for (const std::vector<std::uint64_t>& rank : counts) zeros.emplace_back(rank.size(), rational(0));
  const partition shape = with_values(counts, zeros);
  // The strategies among the candidates, in the candidates' order.
  std::vector<strategy> strategies;
  for (const named_value& mistake : candidates_of(shape, dtype::exact).mistakes)
    if (const std::optional<strategy> named = strategy_from_name(mistake.name)) strategies.push_back(*named);
  std::vector<std::vector<rational>> profiles(strategies.size());  // per strategy, its value on each unit sum
  std::vector<rational> objective;
  for (std::size_t r = 0; r < counts.size(); ++r)
    for (std::size_t m = 0; m < counts[r].size(); ++m) {
      if (counts[r][m] == 0) continue;  // its sum is 0 whatever the targets
      objective.push_back(*unit_value(strategy::global_mean, counts, r, m, valid_tokens, rank_tokens, shape.reducer));
      for (std::size_t i = 0; i < strategies.size(); ++i) {
        const std::optional<rational> value =
            unit_value(strategies[i], counts, r, m, valid_tokens, rank_tokens, shape.reducer);
        if (!value)
          throw std::logic_error("suggest: " + std::string(strategy_name(strategies[i])) +
                                 " is a candidate but undefined on a unit sum of these counts");
        profiles[i].push_back(*value);
      }
    }
  // The profiles must give what `gradient` computes: on targets that make every unit sum distinct, each
  // strategy's value is the sum of its profile weighted by the sums.
  std::vector<std::vector<rational>> targets;
  std::vector<rational> sums;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    std::vector<rational>& row = targets.emplace_back();
    for (std::size_t m = 0; m < counts[r].size(); ++m) {
      row.emplace_back(static_cast<long>(1 + 3 * r + 7 * m));
      if (counts[r][m] != 0) sums.push_back(row.back() * counts[r][m]);
    }
  }
  const partition probe = with_values(counts, targets);
  auto agrees = [&](strategy named, const std::vector<rational>& profile) {
    std::vector<rational> terms;
    for (std::size_t u = 0; u < profile.size(); ++u) terms.push_back(profile[u] * sums[u]);
    const std::optional<rational> value = gradient(probe, named);
    return value && *value == sum_of(terms);
  };
  if (!agrees(strategy::global_mean, objective))
    throw std::logic_error("suggest: the objective's values on unit sums disagree with its gradient");
  for (std::size_t i = 0; i < strategies.size(); ++i)
    if (!agrees(strategies[i], profiles[i]))
      throw std::logic_error("suggest: the values of " + std::string(strategy_name(strategies[i])) +
                             " on unit sums disagree with its gradient");
  for (std::size_t i = 0; i < strategies.size(); ++i)
    if (profiles[i] == objective) s.inseparable.emplace_back(strategy_name(strategies[i]));
  for (std::size_t i = 0; i < strategies.size(); ++i)
    for (std::size_t j = i + 1; j < strategies.size(); ++j)
      if (profiles[i] == profiles[j])
        s.ambiguous.push_back(std::string(strategy_name(strategies[i])) + " and " +
                              std::string(strategy_name(strategies[j])));
}

// Whether a mistake that is not a strategy equals the objective on every unit sum: the exact test, one
// evaluation of every candidate per microbatch, for the rare candidate that agreed with the objective on
// every target tried.
bool equals_objective_everywhere(const update_counts& counts, const std::string& name,
                                 const std::vector<weight_candidate>& table) {
  std::vector<std::vector<rational>> values;
  for (const std::vector<std::uint64_t>& rank : counts) values.emplace_back(rank.size(), rational(0));
  for (std::size_t r = 0; r < counts.size(); ++r)
    for (std::size_t m = 0; m < counts[r].size(); ++m) {
      if (counts[r][m] == 0) continue;
      values[r][m] = rational(1) / counts[r][m];
      const candidate_set set = candidates_of(with_values(counts, values), dtype::exact, &table);
      values[r][m] = 0;
      const auto found = std::find_if(set.mistakes.begin(), set.mistakes.end(),
                                      [&](const named_value& mistake) { return mistake.name == name; });
      if (found == set.mistakes.end() || found->value != set.objective.value) return false;
    }
  return true;
}

}  // namespace

namespace {

// A token target exact in every dtype, bfloat16 included: a small integer from −4 to 6.
rational small_target(detail::deterministic_random& random) {
  return rational(static_cast<long>(random.below(11)) - 4);
}

// The candidate of `attempts` that `build` fills in (tokens, from `random`) with the widest separation, the
// first of equals: both searches below differ only in what a candidate holds.
template <typename Build>
suggestion best_of(int attempts, std::uint64_t seed, dtype type, Build build) {
  detail::deterministic_random random(seed);
  std::optional<suggestion> best;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    suggestion candidate;
    candidate.type = type;
    build(candidate, random);
    measure(candidate);
    if (!best || candidate.separation > best->separation) best = std::move(candidate);
  }
  return std::move(*best);
}

// A suggestion for an objective that counts sequences or divides by a constant: every microbatch holds one to
// three sequences of one to four tokens, and the constant objective's normalizer is Dr. GRPO's B·L_max, the
// update's sequences times the longest one.
suggestion suggest_with_sequences(std::uint64_t world_size, std::uint64_t microbatches, dtype type,
                                  objective_kind objective) {
  constexpr std::uint64_t most_sequences = 3;  // per microbatch
  constexpr std::uint64_t most_tokens = 4;     // per sequence
  return best_of(200, 0xBF58476D1CE4E5B9ull, type, [&](suggestion& candidate, detail::deterministic_random& random) {
    candidate.tokens.objective = objective;
    std::uint64_t sequences = 0;
    std::uint64_t longest = 0;
    for (std::uint64_t r = 0; r < world_size; ++r) {
      std::vector<std::vector<token>>& rank = candidate.tokens.ranks.emplace_back();
      std::vector<std::vector<std::size_t>>& lengths = candidate.tokens.sequences.emplace_back();
      for (std::uint64_t m = 0; m < microbatches; ++m) {
        std::vector<token>& tokens = rank.emplace_back();
        std::vector<std::size_t>& microbatch_lengths = lengths.emplace_back();
        const std::uint64_t count = 1 + random.below(most_sequences);
        for (std::uint64_t s = 0; s < count; ++s) {
          const std::uint64_t length = 1 + random.below(most_tokens);
          for (std::uint64_t i = 0; i < length; ++i) tokens.emplace_back(small_target(random));
          microbatch_lengths.push_back(static_cast<std::size_t>(length));
          ++sequences;
          longest = std::max(longest, length);
        }
      }
    }
    if (objective == objective_kind::constant) candidate.tokens.normalizer = rational(sequences * longest);
  });
}

}  // namespace

suggestion suggest_partition(std::uint64_t world_size, std::uint64_t microbatches, dtype type, objective_kind objective,
                             const std::vector<mesh_dim>& mesh) {
  if (!mesh.empty() && objective != objective_kind::token_mean)
    throw error(error_code::usage_error, "suggest lays a partition out on a mesh under the token mean only");
  if (declared_objective(objective)) return suggest_with_sequences(world_size, microbatches, type, objective);
  // Weights exact in every dtype, bfloat16 included; none is 0, so every token counts in the mass.
  const std::array<rational, 6> weights{fraction(1, 4), fraction(1, 2), fraction(3, 4),
                                        rational(1),    fraction(3, 2), rational(2)};
  const bool weighted = objective == objective_kind::weighted_token_mean;
  constexpr std::uint64_t most_tokens = 4;  // per microbatch
  return best_of(400, 0x9E3779B97F4A7C15ull, type, [&](suggestion& candidate, detail::deterministic_random& random) {
    candidate.tokens.mesh = mesh;  // the mesh's mistakes are then among the candidates (core/normalization)
    for (std::uint64_t r = 0; r < world_size; ++r) {
      std::vector<std::vector<token>> rank;
      std::vector<std::vector<token>> rank_weights;
      for (std::uint64_t m = 0; m < microbatches; ++m) {
        std::vector<token> tokens;
        std::vector<token> token_weights;
        const std::uint64_t count = 1 + random.below(most_tokens);
        for (std::uint64_t i = 0; i < count; ++i) {
          tokens.emplace_back(small_target(random));
          if (weighted) token_weights.emplace_back(weights[random.below(weights.size())]);
        }
        rank.push_back(std::move(tokens));
        rank_weights.push_back(std::move(token_weights));
      }
      candidate.tokens.ranks.push_back(std::move(rank));
      if (weighted) candidate.tokens.weights.push_back(std::move(rank_weights));
    }
  });
}

update_counts read_counts(std::string_view text, std::string source, const reader_limits& limits) {
  field_reader in(text, std::move(source), limits);
  if (in.peek() != json_kind::object) in.fail_type("a counts file", "an object {\"counts\": [[...], ...]}");
  in.begin_object();
  update_counts counts;
  bool saw_counts = false;
  std::uint64_t total = 0;
  std::size_t microbatches = 0;
  std::string_view key;
  while (in.next_member(key)) {
    if (key != "counts") in.fail_unknown_key(key, "(a counts file has counts)");
    saw_counts = true;
    const std::uint64_t offset = in.value_offset();
    if (in.peek() != json_kind::array) in.fail_type("counts", "an array with one array of microbatch counts per rank");
    in.begin_array();
    while (in.next_element()) {
      if (counts.size() == counts_max_ranks)
        in.fail(error_code::limit_exceeded, "counts lists more than " + std::to_string(counts_max_ranks) + " ranks",
                in.value_offset());
      if (in.peek() != json_kind::array)
        in.fail_type("each rank's counts", "an array of valid-token counts, one per microbatch");
      const std::uint64_t rank_offset = in.value_offset();
      std::vector<std::uint64_t>& rank = counts.emplace_back();
      in.begin_array();
      while (in.next_element()) {
        if (rank.size() == counts_max_microbatches)
          in.fail(error_code::limit_exceeded,
                  "a rank lists more than " + std::to_string(counts_max_microbatches) + " microbatches",
                  in.value_offset());
        const std::uint64_t count_offset = in.value_offset();
        if (++microbatches > counts_max_total_microbatches)
          in.fail(error_code::limit_exceeded,
                  "counts lists more than " + std::to_string(counts_max_total_microbatches) +
                      " microbatches over all ranks, the limit of suggest --counts",
                  in.value_offset());
        rank.push_back(in.integer("each microbatch's count", 0, counts_max_tokens, error_code::limit_exceeded));
        total = add_counts(total, rank.back());
        if (total > counts_max_tokens)
          in.fail(error_code::limit_exceeded,
                  "the counts add up to more than " + std::to_string(counts_max_tokens) + " valid tokens",
                  count_offset);
      }
      if (rank.empty())
        in.fail(error_code::schema_error, "a rank has at least one microbatch (a count of 0 if it holds no token)",
                rank_offset);
    }
    if (counts.empty()) in.fail(error_code::schema_error, "counts must list every rank", offset);
  }
  in.finish();
  if (!saw_counts)
    in.fail(error_code::schema_error, "missing key \"counts\": one array of microbatch counts per rank", 0);
  if (total == 0)
    in.fail(error_code::no_valid_tokens, "the counts hold no valid token (N = 0): the update has no objective", 0);
  return counts;
}

suggestion suggest_for_counts(const update_counts& counts, dtype type) {
  std::size_t microbatches = 0;
  for (const std::vector<std::uint64_t>& rank : counts) microbatches += rank.size();
  if (microbatches > counts_max_total_microbatches)
    throw error(error_code::limit_exceeded,
                "the counts list " + std::to_string(microbatches) + " microbatches in all, more than the " +
                    std::to_string(counts_max_total_microbatches) + " suggest --counts takes");
  // Each try costs a pass over every microbatch: 400 tries up to 256 microbatches, fewer beyond (at least 8),
  // so that the search stays within seconds at the limit.
  const int attempts =
      static_cast<int>(std::clamp<std::size_t>(400 * 256 / std::max<std::size_t>(microbatches, 1), 8, 400));
  constexpr std::uint64_t largest_value = 8;  // |y| ≤ 8: exact in every dtype, bfloat16 included
  detail::deterministic_random random(0xD1B54A32D192ED03ull);
  suggestion best;
  best.type = type;
  structural_coincidences(counts, best);
  std::vector<std::vector<rational>> best_values;
  bool have_best = false;
  std::vector<std::string> told_apart;  // mistakes that are not strategies, seen to differ from the objective
  std::vector<std::vector<rational>> zeros;
  for (const std::vector<std::uint64_t>& rank : counts) zeros.emplace_back(rank.size(), rational(0));
  const std::vector<weight_candidate> table = weight_candidates(with_values(counts, zeros));
  for (int attempt = 0; attempt < attempts; ++attempt) {
    std::vector<std::vector<rational>> values;
    for (const std::vector<std::uint64_t>& rank : counts) {
      std::vector<rational>& row = values.emplace_back();
      for (std::size_t m = 0; m < rank.size(); ++m) {
        const auto magnitude = static_cast<long>(1 + random.below(largest_value));
        row.emplace_back(random.below(2) == 0 ? magnitude : -magnitude);
      }
    }
    const candidate_set set = candidates_of(with_values(counts, values), type, &table);
    for (std::size_t i = 0; i < set.mistakes.size(); ++i)
      if (!set.is_strategy[i] && set.mistakes[i].value != set.objective.value &&
          std::find(told_apart.begin(), told_apart.end(), set.mistakes[i].name) == told_apart.end())
        told_apart.push_back(set.mistakes[i].name);
    suggestion candidate;
    candidate.type = type;
    candidate.inseparable = best.inseparable;
    candidate.ambiguous = best.ambiguous;
    measure(candidate, set);
    if (!have_best || candidate.separation > best.separation) {
      best.separation = candidate.separation;
      best.closest_pair = candidate.closest_pair;
      best_values = std::move(values);
      have_best = true;
    }
  }
  // A mistake that is not a strategy and equalled the objective on every try is decided exactly.
  bool more_inseparable = false;
  for (const named_value& mistake : candidates_of(with_values(counts, best_values), dtype::exact, &table).mistakes)
    if (!strategy_from_name(mistake.name) &&
        std::find(told_apart.begin(), told_apart.end(), mistake.name) == told_apart.end() &&
        equals_objective_everywhere(counts, mistake.name, table)) {
      best.inseparable.push_back(mistake.name);
      more_inseparable = true;
    }
  if (more_inseparable) {
    suggestion remeasured;
    remeasured.type = type;
    remeasured.inseparable = best.inseparable;
    remeasured.ambiguous = best.ambiguous;
    measure(remeasured, with_values(counts, best_values));
    best.separation = remeasured.separation;
    best.closest_pair = remeasured.closest_pair;
  }
  for (std::size_t r = 0; r < counts.size(); ++r) {
    std::vector<std::vector<token>>& rank = best.tokens.ranks.emplace_back();
    for (std::size_t m = 0; m < counts[r].size(); ++m)
      rank.emplace_back(static_cast<std::size_t>(counts[r][m]), token{best_values[r][m]});
  }
  return best;
}

}  // namespace normcheck
