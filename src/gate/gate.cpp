#include "normcheck/gate/gate.hpp"

#include "normcheck/core/names.hpp"

#include <algorithm>

namespace normcheck {

namespace {

constexpr name_table verdict_names{std::array<std::pair<gate_verdict, std::string_view>, 3>{{
    {gate_verdict::pass, "pass"},
    {gate_verdict::fail, "fail"},
    {gate_verdict::inconclusive, "inconclusive"},
}}};

// The roundings a term meets on its own rank, before the all-reduce: the target's conversion to the dtype
// and θ − y (2), the microbatch sum (n − 1 additions), the scale (up to two operations, as in W/(N·G))
// and its multiplication (3), accumulation over G microbatches (G − 1 additions). Weighted tokens add the
// weight's conversion and the product w·(θ − y) (2 more).
std::uint64_t local_roundings(const partition& update) {
  std::uint64_t longest_microbatch = 0;
  std::uint64_t most_microbatches = 0;
  for (const rank_stats& rank : update.ranks) {
    most_microbatches = std::max<std::uint64_t>(most_microbatches, rank.microbatches.size());
    for (const microbatch_stats& m : rank.microbatches)
      longest_microbatch = std::max(longest_microbatch, m.valid_tokens);
  }
  const std::uint64_t weighting = update.objective == objective_kind::weighted_token_mean ? 2 : 0;
  return longest_microbatch + most_microbatches + 3 + weighting;
}

// K: the most roundings any one term can meet on its way to the synchronized gradient: the local ones and
// the all-reduce's (W − 1 additions and the reducer's division).
std::uint64_t rounding_depth(const partition& update) { return local_roundings(update) + update.world_size(); }

// γ_K = K·u / (1 − K·u), the classic bound on K rounding factors (1 + δ) with |δ| ≤ u.
std::optional<rational> gamma(std::uint64_t k, dtype type) {
  rational ku = unit_roundoff(type) * k;
  if (ku >= 1) return std::nullopt;
  rational g = ku / (1 - ku);
  return g;
}

// The relative error bound of a term's whole path. Reduced in the dtype itself it is γ_K. Reduced in
// another arithmetic (a compressing communication hook), the local roundings are at u and the all-reduce's
// W, with the conversion into the reduction's type and back (2 more), at its u_r: a product of factors
// within γ_a and γ_b of 1 is within γ_a + γ_b + γ_a·γ_b of 1.
std::optional<rational> error_factor(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  if (!reduction_type || *reduction_type == type) return gamma(rounding_depth(update), type);
  const std::optional<rational> local = gamma(local_roundings(update), type);
  const std::optional<rational> reduction = gamma(update.world_size() + 2, *reduction_type);
  if (!local || !reduction) return std::nullopt;
  rational combined = *local + *reduction + *local * *reduction;
  return combined;
}

// The factor a strategy multiplies microbatch m of `rank` by before backward; nullopt where undefined.
// `mass` and `rank_mass` are the update's and the rank's (the counts under the token mean, weight sums
// under the weighted one), computed once by the caller.
std::optional<rational> scale_of(const partition& update, strategy s, const rational& mass, std::size_t microbatches,
                                 const rational& rank_mass, const microbatch_stats& m) {
  switch (s) {
    case strategy::global_mean:
    case strategy::global_share: {
      rational c = 1 / mass;
      return c;
    }
    case strategy::scaled_sum: {
      rational c = rational(update.world_size()) / mass;
      return c;
    }
    case strategy::local_sum: return rational(1);
    case strategy::local_mean: {
      if (rank_mass == 0) return std::nullopt;
      rational c = 1 / rank_mass;
      return c;
    }
    case strategy::microbatch_mean: {
      const rational microbatch_mass = m.mass();
      if (microbatch_mass == 0) return std::nullopt;
      rational c = 1 / (microbatch_mass * microbatches);
      return c;
    }
  }
  return std::nullopt;
}

// The error factor times the sum of every term's magnitude along the strategy's computation.
std::optional<rational> strategy_bound(const partition& update, strategy s, dtype type,
                                       std::optional<dtype> reduction_type) {
  const std::optional<rational> g = error_factor(update, type, reduction_type);
  if (!g) return std::nullopt;
  // Σ |c|·(mₘ·|θ| + Σw·|y|) = |θ|·Σ|c|·mₘ + Σ|c|·Σw·|y|: θ once, each sum added in a balanced tree.
  const rational mass = update.mass();
  tree_sum scaled_masses;
  tree_sum scaled_magnitudes;
  for (const rank_stats& rank : update.ranks) {
    const rational rank_mass = rank.mass();
    for (const microbatch_stats& m : rank.microbatches) {
      const rational microbatch_mass = m.mass();
      if (microbatch_mass == 0) continue;
      const std::optional<rational> c = scale_of(update, s, mass, rank.microbatches.size(), rank_mass, m);
      if (!c) return std::nullopt;
      const rational scale = abs(*c);
      scaled_masses.add(scale * microbatch_mass);
      scaled_magnitudes.add(scale * m.weighted_target_abs_sum());
    }
  }
  rational total = abs(update.theta) * scaled_masses.value();
  total += scaled_magnitudes.value();
  if (update.reducer == reducer_kind::mean && s != strategy::global_mean) total /= update.world_size();
  rational bound = *g * total;
  return bound;
}

struct mistake_text {
  std::string computed;
  std::string why_wrong;
};

std::string correct_instead(reducer_kind reducer, objective_kind objective) {
  const bool weighted = objective == objective_kind::weighted_token_mean;
  const std::string n = weighted ? "M" : "N";
  const std::string what = weighted ? n + " the weight mass of the whole update (Σw over all ranks and microbatches, Sᵣ "
                                          "the weighted loss sum Σwℓ)"
                                    : n + " the valid tokens of the whole update (all ranks, all microbatches)";
  return reducer == reducer_kind::mean
             ? "backpropagate W·Sᵣ/" + n + " on every rank, with " + what +
                   ", so that the reducer's division by W is compensated"
             : "backpropagate Sᵣ/" + n + " on every rank, with " + what +
                   ": this reducer sums without dividing, so no world-size factor belongs in the loss";
}

mistake_text describe_strategy(strategy s, reducer_kind reducer, objective_kind objective) {
  const bool mean = reducer == reducer_kind::mean;
  if (objective == objective_kind::weighted_token_mean && s != strategy::global_mean) {
    // The same mistakes with masses in place of counts.
    mistake_text text = describe_strategy(s, reducer, objective_kind::token_mean);
    text.computed = "each rank backpropagated " + std::string(strategy_formula(s, objective)) +
                    " (Sᵣ the weighted loss sum, M, mᵣ, mᵣₘ weight masses)";
    return text;
  }
  switch (s) {
    case strategy::local_mean:
      return {"each rank backpropagated its local mean Sᵣ/nᵣ",
              "the ranks are then weighted equally whatever their valid-token counts, so a token on a rank "
              "with few tokens weighs more than one on a rank with many"};
    case strategy::local_sum:
      return {"each rank backpropagated its loss sum Sᵣ without dividing by a token count",
              mean ? "DDP's mean then yields ΣSᵣ/W: the token count N never enters, so the scale is N/W times "
                     "the objective's"
                   : "the summing reducer then yields ΣSᵣ: N times the objective's gradient"};
    case strategy::scaled_sum:
      return {"each rank backpropagated W·Sᵣ/N, the compensation for a reducer that divides by W",
              "this reducer sums without dividing, so the world-size factor is applied once too often: W "
              "times the objective's gradient"};
    case strategy::global_share:
      return {"each rank backpropagated Sᵣ/N without the world-size factor",
              "DDP's mean reducer divides the sum by W once more, so the result is the objective's gradient "
              "divided by W"};
    case strategy::microbatch_mean:
      return {"each microbatch backpropagated its own mean (per-microbatch denominator) and the accumulation "
              "divided by the number of microbatches",
              "every microbatch then weighs the same whatever its count: the denominator must be the valid "
              "tokens of the whole update, not of each microbatch"};
    case strategy::global_mean: break;
  }
  return {"", ""};
}

struct factor_mistake {
  std::string name;
  rational factor;
  std::string computed;
  std::string why_wrong;
};

std::vector<factor_mistake> factor_mistakes(const partition& update) {
  const rational world_size{update.world_size()};
  // The objective's denominator: N, or the weight mass M under the weighted objective.
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  const rational total_mass = update.mass();
  const std::string n = weighted ? "M" : "N";
  std::vector<factor_mistake> factors;
  factors.push_back({"objective×W", world_size, "the objective's gradient multiplied by W",
                     "a world-size factor applied where the reducer does not divide by W (a summing reducer or "
                     "hook), or applied twice"});
  factors.push_back({"objective/W", 1 / world_size, "the objective's gradient divided by W",
                     "the reducer's division by W was not compensated, or W was divided out twice"});
  // Accumulation factors apply when every rank accumulates the same number of microbatches G > 1.
  const std::size_t g = update.ranks.front().microbatches.size();
  const bool uniform_g = std::all_of(update.ranks.begin(), update.ranks.end(),
                                     [&](const rank_stats& r) { return r.microbatches.size() == g; });
  if (uniform_g && g > 1) {
    factors.push_back({"objective×G", rational(g), "the objective's gradient multiplied by G, the accumulation steps",
                       "the accumulated microbatch gradients were summed where the update-unit denominator "
                       "already covered them, without the division the code intended"});
    factors.push_back({"objective/G", 1 / rational(g), "the objective's gradient divided by G, the accumulation steps",
                       "the loss was divided by G on top of the update-unit N: accumulation divided twice"});
  }
  factors.push_back({"objective×" + n, total_mass, "the objective's gradient multiplied by " + n,
                     "the loss sum was used where the mean was meant, or the " + std::string(weighted ? "mass" : "count") +
                         " was multiplied instead of divided"});
  factors.push_back({"objective/" + n, 1 / total_mass, "the objective's gradient divided by " + n,
                     std::string(weighted ? "the weight mass" : "the token count") + " was divided out twice"});
  std::uint64_t padding = 0;
  for (const rank_stats& rank : update.ranks) padding += rank.padding();
  if (!weighted && padding > 0) {
    const std::uint64_t positions = update.valid_tokens() + padding;
    factors.push_back({"count_padding", rational(update.valid_tokens()) / rational(positions),
                       "the loss sum divided by the " + std::to_string(positions) +
                           " positions of the update, padding included, instead of its N = " +
                           std::to_string(update.valid_tokens()) + " valid tokens",
                       "the " + std::to_string(padding) + " padding positions (null in the file: padding, ignored "
                           "labels) hold no token, so they must not count: the gradient is scaled by N/(N + P)"});
  }
  if (weighted)
    factors.push_back({"count_denominator", total_mass / rational(update.valid_tokens()),
                       "the weighted loss sum divided by the valid-token count N instead of the weight mass M",
                       "the objective weighs tokens, so its denominator is Σw = M; dividing by N scales the gradient "
                       "by M/N"});
  std::erase_if(factors, [](const factor_mistake& f) { return f.factor == 1; });
  return factors;
}

// Whether a candidate accounts for the observed value: within its bound when both are numbers, the same
// NaN or infinity otherwise.
bool fits(const observed_value& observed, const explanation& e, const std::optional<tolerance>& explicit_tolerance) {
  const rational* number = std::get_if<rational>(&observed);
  const rational* candidate = std::get_if<rational>(&e.value);
  if (!number || !candidate) return observed == e.value;
  rational distance = abs(*number - *candidate);
  if (explicit_tolerance) {
    rational allowed = explicit_tolerance->absolute + explicit_tolerance->relative * abs(*candidate);
    return distance <= allowed;
  }
  return e.bound && distance <= *e.bound;
}

// The microbatches and ranks a mean would divide by zero in: "rank 1, microbatch 0", "rank 2 (all of it)".
std::vector<std::string> empty_places(const partition& update) {
  std::vector<std::string> places;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    if (rank.mass() == 0) {
      places.push_back("rank " + std::to_string(r) + (rank.microbatches.size() > 1 ? " (every microbatch)" : ""));
      continue;
    }
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m)
      if (rank.microbatches[m].mass() == 0)
        places.push_back("rank " + std::to_string(r) + ", microbatch " + std::to_string(m));
  }
  return places;
}

// A mean taken over nothing: 0/0, NaN in floating point, which the all-reduce hands to every rank.
std::optional<explanation> mean_of_empty(const partition& update, const std::string& instead) {
  const std::vector<std::string> places = empty_places(update);
  if (places.empty()) return std::nullopt;
  std::string where;
  for (std::size_t i = 0; i < places.size() && i < 4; ++i) where += (i ? "; " : "") + places[i];
  if (places.size() > 4) where += "; and " + std::to_string(places.size() - 4) + " more";
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  return explanation{"mean_of_empty", non_finite::nan, std::nullopt,
                     "a mean (reduction='mean' or a division by a local count) over a part of the update without " +
                         std::string(weighted ? "weight" : "valid tokens") + ": " + where +
                         "; 0/0 is NaN, and the all-reduce hands it to every rank",
                     "a mean needs at least one valid token; the objective divides the whole update's loss sum by " +
                         std::string(weighted ? "M" : "N") + ", which is not 0, so a part without tokens simply adds 0",
                     instead};
}

std::string positions(std::uint64_t count) {
  return count == 1 ? "the 1 position" : "the " + std::to_string(count) + " positions";
}

std::string count_difference(std::int64_t difference) {
  const std::uint64_t magnitude = static_cast<std::uint64_t>(difference < 0 ? -difference : difference);
  return std::to_string(magnitude) + (difference > 0 ? " more" : " fewer") +
         (magnitude == 1 ? " position than" : " positions than");
}

gate_check check_replicas(const observed_result& observed, std::uint64_t world_size) {
  gate_check check{"replica_agreement", true, ""};
  if (!observed.from_per_rank) {
    check.detail = "one synchronized value given (gradient): agreement between replicas not checked; dump "
                   "per_rank to check it";
    return check;
  }
  for (std::size_t r = 1; r < observed.per_rank.size(); ++r) {
    if (observed.per_rank[r] != observed.per_rank[0]) {
      check.passed = false;
      check.detail = "rank " + std::to_string(r) + " holds " + to_string(observed.per_rank[r]) + " but rank 0 holds " +
                     to_string(observed.per_rank[0]) +
                     ": after an all-reduce every replica holds the same value, so the replicas diverged";
      return check;
    }
  }
  check.detail = "all " + std::to_string(world_size) + " ranks hold the same value";
  return check;
}

// What a rank's reported divisor is instead of the update's N (or M), when it is a count the code could
// have taken by mistake.
std::string divisor_mistake(const partition& update, std::size_t r, std::size_t m, const rational& divisor) {
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  const rank_stats& rank = update.ranks[r];
  const microbatch_stats& microbatch = rank.microbatches[m];
  std::uint64_t padding = 0;
  for (const rank_stats& each : update.ranks) padding += each.padding();
  const std::string n = weighted ? "mᵣ" : "nᵣ";
  if (divisor == rank.mass() && update.world_size() > 1)
    return "it is the rank's own " + std::string(weighted ? "weight mass" : "count") + " " + n + " = " +
           to_string(rank.mass()) + ": counted right, but divided by its own " +
           (weighted ? "mass" : "count") + ", so every rank weighs the same whatever its " +
           (weighted ? "mass (local_mean)" : "count (local_mean)");
  if (divisor == microbatch.mass() && rank.microbatches.size() > 1)
    return "it is the microbatch's own " + std::string(weighted ? "mass" : "count") + " " + to_string(microbatch.mass()) +
           ": every microbatch then weighs the same whatever its count (microbatch_mean)";
  if (!weighted && padding > 0 && divisor == rational(update.valid_tokens() + padding))
    return "it counts the " + std::to_string(padding) + " padding positions of the update (count_padding)";
  if (!weighted && rank.padding() > 0 && divisor == rational(rank.valid_tokens() + rank.padding()))
    return "it is the rank's own positions, padding included";
  if (weighted && divisor == rational(update.valid_tokens()))
    return "it is the valid-token count N, not the weight mass (count_denominator)";
  return "";
}

// `tokens.divided_by`: each rank's divisor must be the update's N (M under the weighted objective).
void check_divisors(const partition& update, const observed_result& observed, std::vector<std::string>& problems) {
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  const rational expected = update.mass();
  for (std::size_t r = 0; r < observed.divided_by.size(); ++r) {
    const std::vector<rational>& divisors = observed.divided_by[r];
    for (std::size_t m = 0; m < update.ranks[r].microbatches.size(); ++m) {
      const rational& divisor = divisors.size() == 1 ? divisors.front() : divisors[m];
      if (divisor == expected) continue;
      std::string problem = "rank " + std::to_string(r) +
                            (divisors.size() == 1 ? "" : ", microbatch " + std::to_string(m)) + " divided by " +
                            to_string(divisor) + ", not by the update's " + (weighted ? "M = " : "N = ") +
                            to_string(expected);
      const std::string mistake = divisor_mistake(update, r, m, divisor);
      problems.push_back(mistake.empty() ? problem : problem + ": " + mistake);
      if (divisors.size() == 1) break;
    }
  }
}

gate_check check_denominators(const partition& update, const observed_result& observed) {
  gate_check check{"denominator", true, ""};
  const bool masses = observed.global_mass || !observed.rank_masses.empty();
  if (!observed.global_tokens && observed.rank_tokens.empty() && !masses && observed.divided_by.empty()) {
    check.detail = "no token counts, weight masses or divisors reported: denominators not checked";
    return check;
  }
  std::vector<std::string> problems;
  check_divisors(update, observed, problems);
  if (observed.global_mass && *observed.global_mass != update.mass()) {
    std::string problem = "the global mass is " + to_string(*observed.global_mass) + " but the update's weights sum to M = " +
                          to_string(update.mass());
    if (*observed.global_mass == rational(update.valid_tokens()))
      problem += ": it is the valid-token count N, not the sum of the weights";
    else
      for (std::size_t r = 0; r < update.ranks.size(); ++r)
        if (update.world_size() > 1 && update.ranks[r].mass() == *observed.global_mass) {
          problem += ": it is rank " + std::to_string(r) + "'s local mass, not the mass of all ranks (all-reduce it before dividing)";
          break;
        }
    problems.push_back(problem);
  }
  for (std::size_t r = 0; r < observed.rank_masses.size(); ++r) {
    const rational mass = update.ranks[r].mass();
    if (observed.rank_masses[r] == mass) continue;
    problems.push_back("rank " + std::to_string(r) + " summed its weights to " + to_string(observed.rank_masses[r]) +
                       " but they sum to " + to_string(mass));
  }
  const std::uint64_t valid_tokens = update.valid_tokens();
  if (observed.global_tokens && *observed.global_tokens != valid_tokens) {
    const std::uint64_t reported = *observed.global_tokens;
    std::uint64_t padding = 0;
    for (const rank_stats& rank : update.ranks) padding += rank.padding();
    const auto difference = static_cast<std::int64_t>(reported) - static_cast<std::int64_t>(valid_tokens);
    std::string problem = "the global denominator is " + std::to_string(reported) + " but the update holds N = " +
                          std::to_string(valid_tokens) + " valid tokens: ";
    const auto local = std::find_if(update.ranks.begin(), update.ranks.end(),
                                    [&](const rank_stats& r) { return r.valid_tokens() == reported; });
    if (difference > 0 && static_cast<std::uint64_t>(difference) == padding)
      problem += "it counts " + positions(padding) + " that hold no valid token (padding or ignored labels)";
    else if (local != update.ranks.end() && update.world_size() > 1)
      problem += "it is rank " + std::to_string(local - update.ranks.begin()) +
                 "'s local count, not the count of all ranks (all-reduce the count before dividing)";
    else
      problem += "it counts " + count_difference(difference) + " the file's valid tokens";
    problems.push_back(problem);
  }
  for (std::size_t r = 0; r < observed.rank_tokens.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    const std::uint64_t reported = observed.rank_tokens[r];
    if (reported == rank.valid_tokens()) continue;
    const auto difference = static_cast<std::int64_t>(reported) - static_cast<std::int64_t>(rank.valid_tokens());
    std::string problem = "rank " + std::to_string(r) + " counted " + std::to_string(reported) + " tokens but holds " +
                          std::to_string(rank.valid_tokens()) + " valid ones: ";
    if (difference > 0 && static_cast<std::uint64_t>(difference) == rank.padding())
      problem += "its count includes " + positions(rank.padding()) + " that hold no valid token";
    else
      problem += "it counts " + count_difference(difference) + " it holds";
    problems.push_back(problem);
  }
  if (problems.empty()) {
    check.detail = std::string(masses ? "the reported token counts and weight masses match the file"
                                      : "the reported token counts match the file") +
                   (observed.divided_by.empty()
                        ? ""
                        : ", and every rank divided by the update's " +
                              std::string(update.objective == objective_kind::weighted_token_mean ? "M" : "N"));
    return check;
  }
  check.passed = false;
  for (const std::string& p : problems) check.detail += (check.detail.empty() ? "" : "; ") + p;
  return check;
}

}  // namespace

std::string_view verdict_name(gate_verdict verdict) noexcept { return verdict_names.name(verdict); }

std::optional<gate_verdict> verdict_from_name(std::string_view name) noexcept { return verdict_names.find(name); }

std::string verdict_alternatives() { return verdict_names.alternatives(); }

std::optional<rational> objective_bound(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  return strategy_bound(update, strategy::global_mean, type, reduction_type);
}

std::vector<explanation> known_mistakes(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  std::vector<explanation> candidates;
  const strategy correct = update.reducer == reducer_kind::mean ? strategy::scaled_sum : strategy::global_share;
  const std::string instead = correct_instead(update.reducer, update.objective);
  // With one microbatch per rank, averaging microbatch means is the same computation as local_mean.
  const bool accumulates = std::any_of(update.ranks.begin(), update.ranks.end(),
                                       [](const rank_stats& r) { return r.microbatches.size() > 1; });
  for (strategy s : all_strategies) {
    if (s == strategy::global_mean || s == correct) continue;
    if (s == strategy::microbatch_mean && !accumulates) continue;
    const std::optional<rational> value = gradient(update, s);
    if (!value) continue;
    mistake_text text = describe_strategy(s, update.reducer, update.objective);
    candidates.push_back({std::string(strategy_name(s)), *value, strategy_bound(update, s, type, reduction_type),
                          std::move(text.computed), std::move(text.why_wrong), instead});
  }
  const rational objective = *gradient(update, strategy::global_mean);
  const std::optional<rational> bound = objective_bound(update, type, reduction_type);
  for (factor_mistake& f : factor_mistakes(update)) {
    rational value = objective * f.factor;
    std::optional<rational> scaled_bound;
    if (bound) scaled_bound = *bound * f.factor;
    candidates.push_back({std::move(f.name), value, scaled_bound, std::move(f.computed), std::move(f.why_wrong), instead});
  }
  if (std::optional<explanation> empty = mean_of_empty(update, instead)) candidates.push_back(std::move(*empty));
  return candidates;
}

gate_result run_gate(const partition& update, const observed_result& observed) {
  gate_result result;
  result.type = observed.type;
  if (observed.reduction_type && *observed.reduction_type != observed.type) result.reduction_type = observed.reduction_type;
  result.observed = observed.per_rank.front();
  result.objective = *gradient(update, strategy::global_mean);
  result.rounding_depth = rounding_depth(update);
  if (observed.explicit_tolerance) {
    result.bound_is_explicit = true;
    rational allowed = observed.explicit_tolerance->absolute + observed.explicit_tolerance->relative * abs(result.objective);
    result.bound = allowed;
  } else {
    result.bound = objective_bound(update, observed.type, result.reduction_type);
  }

  result.checks.push_back(check_replicas(observed, update.world_size()));
  result.checks.push_back(check_denominators(update, observed));

  const rational* number = std::get_if<rational>(&result.observed);
  gate_check objective{"objective", false, ""};
  if (!number) {
    objective.detail = "the observed gradient is " + to_string(result.observed) +
                       ", not a number: no rounding of the objective's computation gives it";
  } else if (!result.bound) {
    objective.detail = "the " + std::string(dtype_name(observed.type)) + " unit roundoff times K = " +
                       std::to_string(result.rounding_depth) +
                       " roundings reaches 1: this dtype cannot resolve the computation on this partition";
  } else {
    const rational distance = abs(*number - result.objective);
    objective.passed = distance <= *result.bound;
    objective.detail = "|observed − objective| = " + to_string(distance) + (objective.passed ? " ≤ " : " > ") +
                       "bound " + to_string(*result.bound);
  }
  result.checks.push_back(objective);

  std::vector<explanation> fitting;
  for (explanation& candidate : known_mistakes(update, observed.type, result.reduction_type))
    if (fits(result.observed, candidate, observed.explicit_tolerance)) fitting.push_back(std::move(candidate));

  if (!number) {
    result.diagnosis = std::move(fitting);
    result.verdict = gate_verdict::fail;
  } else if (!result.bound) {
    result.verdict = gate_verdict::inconclusive;
    result.could_hide = std::move(fitting);
  } else if (objective.passed) {
    result.could_hide = std::move(fitting);
    result.verdict = result.could_hide.empty() ? gate_verdict::pass : gate_verdict::inconclusive;
  } else {
    result.diagnosis = std::move(fitting);
    if (result.diagnosis.empty() && result.objective != 0) {
      rational ratio = *number / result.objective;
      result.ratio = ratio;
    }
    result.verdict = gate_verdict::fail;
  }
  for (const gate_check& check : result.checks)
    if (!check.passed && check.name != "objective") result.verdict = gate_verdict::fail;
  return result;
}

}  // namespace normcheck
