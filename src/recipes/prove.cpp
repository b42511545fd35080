#include "normcheck/recipes/prove.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"

#include "core/deterministic_random.hpp"
#include "count_grid.hpp"
#include "counterexample.hpp"
#include "group_prove.hpp"

#include "divisors.hpp"

#include <algorithm>

namespace normcheck {

namespace {

constexpr std::uint64_t scope_world_size = 4;
constexpr std::uint64_t scope_microbatches = 3;
constexpr std::uint64_t scope_tokens = 3;  // per microbatch
constexpr unsigned largest_decided_degree = 12;
constexpr int random_configurations = 20000;

// Per-token weights the weighted scopes give each group of tokens (the exposing microbatch, the rest of
// its rank, the other ranks).
const std::array<rational, 4> scope_weights{rational(0), fraction(1, 2), rational(1), rational(2)};

// (M, mᵣ, mₘ): the configuration's masses, or its counts under the token mean.
std::array<rational, 3> masses_of(const count_configuration& c) {
  if (c.masses) return *c.masses;
  return {rational(c.valid_tokens), rational(c.rank_tokens), rational(c.microbatch_tokens)};
}

count_values values_of(const count_configuration& c) {
  count_values v;
  const auto [mass, rank_mass, microbatch_mass] = masses_of(c);
  v[static_cast<std::size_t>(count_variable::W)] = c.world_size;
  v[static_cast<std::size_t>(count_variable::N)] = c.valid_tokens;
  v[static_cast<std::size_t>(count_variable::n_r)] = c.rank_tokens;
  v[static_cast<std::size_t>(count_variable::n_m)] = c.microbatch_tokens;
  v[static_cast<std::size_t>(count_variable::G)] = c.microbatches;
  v[static_cast<std::size_t>(count_variable::M)] = mass;
  v[static_cast<std::size_t>(count_variable::m_r)] = rank_mass;
  v[static_cast<std::size_t>(count_variable::m_m)] = microbatch_mass;
  return v;
}

// A configuration with masses: each of the three groups of tokens weighs `weights[i]` per token.
count_configuration weighted(count_configuration c, const std::array<rational, 3>& weights) {
  const rational microbatch_mass = weights[0] * c.microbatch_tokens;
  const rational rank_mass = microbatch_mass + weights[1] * (c.rank_tokens - c.microbatch_tokens);
  const rational mass = rank_mass + weights[2] * (c.valid_tokens - c.rank_tokens);
  c.masses = std::array<rational, 3>{mass, rank_mass, microbatch_mass};
  return c;
}

enum class outcome { holds, wrong, divides_by_zero };

struct judged {
  outcome result = outcome::holds;
  recipe_value scale;
};

// At one configuration: c/d must be 1/N (1/M) wherever the microbatch holds a token (of positive
// weight), and c must exist.
judged judge(const recipe& r, const count_configuration& c) {
  judged j;
  j.scale = r.scale.evaluate(values_of(c));
  if (!j.scale.value) {
    j.result = outcome::divides_by_zero;
    return j;
  }
  const auto [mass, rank_mass, microbatch_mass] = masses_of(c);
  if (microbatch_mass == 0) return j;
  rational effective = *j.scale.value;
  if (r.reducer == reducer_kind::mean) effective /= c.world_size;
  rational target = 1;
  target /= mass;
  if (effective != target) j.result = outcome::wrong;
  return j;
}

// A partition whose rank 0, microbatch 0 has the configuration's counts; that microbatch's tokens have
// target 1 and all others 0 at θ = 0, so every other microbatch contributes nothing and the exposing
// one alone decides the gradient.
token_partition partition_for(const count_configuration& c) {
  token_partition tokens;
  std::vector<std::vector<token>> first(c.microbatches);
  first[0].assign(c.microbatch_tokens, token(rational(1)));
  for (std::uint64_t i = 0; i < c.rank_tokens - c.microbatch_tokens; ++i)
    first[1 + i % (c.microbatches - 1)].emplace_back(rational(0));
  tokens.ranks.push_back(std::move(first));
  const std::uint64_t others = c.valid_tokens - c.rank_tokens;
  for (std::uint64_t r = 1; r < c.world_size; ++r) {
    std::vector<token> mb;
    const std::uint64_t share = others / (c.world_size - 1) + (r - 1 < others % (c.world_size - 1) ? 1 : 0);
    mb.assign(share, token(rational(0)));
    tokens.ranks.push_back({mb});
  }
  if (c.masses) {
    // Every token of a group weighs the group's mass over its count, so the masses are the configuration's.
    const auto [mass, rank_mass, microbatch_mass] = *c.masses;
    auto each = [](const rational& group_mass, std::uint64_t count) {
      return count == 0 ? rational(0) : rational(group_mass / count);
    };
    const rational exposing = each(microbatch_mass, c.microbatch_tokens);
    const rational rest_of_rank = each(rank_mass - microbatch_mass, c.rank_tokens - c.microbatch_tokens);
    const rational other_ranks = each(mass - rank_mass, others);
    for (std::size_t r = 0; r < tokens.ranks.size(); ++r) {
      std::vector<std::vector<token>> rank_weights;
      for (std::size_t m = 0; m < tokens.ranks[r].size(); ++m) {
        const rational& w = r > 0 ? other_ranks : m == 0 ? exposing : rest_of_rank;
        rank_weights.emplace_back(tokens.ranks[r][m].size(), token(w));
      }
      tokens.weights.push_back(std::move(rank_weights));
    }
  }
  return tokens;
}

recipe_counterexample expose(const recipe& r, const count_configuration& c, const judged& j) {
  return detail::counterexample_at(r, c, j.scale, j.result == outcome::divides_by_zero, partition_for(c),
                                   c.masses ? objective_kind::weighted_token_mean : objective_kind::token_mean);
}

// Every configuration a partition with W ≤ 4, G ≤ 3 and at most 3 tokens per microbatch can show one
// of its microbatches, smallest N first.
std::vector<count_configuration> small_scope() {
  std::vector<count_configuration> all;
  const std::uint64_t most_per_rank = scope_microbatches * scope_tokens;
  for (std::uint64_t n = 1; n <= scope_world_size * most_per_rank; ++n)
    for (std::uint64_t w = 1; w <= scope_world_size; ++w)
      for (std::uint64_t g = 1; g <= scope_microbatches; ++g)
        for (std::uint64_t n_r = 0; n_r <= std::min(n, g * scope_tokens); ++n_r) {
          const std::uint64_t rest = n - n_r;
          if (rest > (w - 1) * most_per_rank) continue;
          for (std::uint64_t n_m = 0; n_m <= std::min(n_r, scope_tokens); ++n_m)
            if (n_r - n_m <= (g - 1) * scope_tokens) {
              // Built in place: moving a temporary's empty optionals makes GCC 12 warn of uninitialized reads.
              count_configuration& c = all.emplace_back();
              c.world_size = w;
              c.valid_tokens = n;
              c.rank_tokens = n_r;
              c.microbatch_tokens = n_m;
              c.microbatches = g;
            }
        }
  return all;
}

// Partitions in the small scope: ordered ranks, each with 1..3 microbatches of 0..3 tokens, N > 0.
integer small_scope_partitions() {
  integer shapes = 0;
  for (std::uint64_t g = 1; g <= scope_microbatches; ++g)
    shapes += boost::multiprecision::pow(integer(scope_tokens + 1), static_cast<unsigned>(g));
  integer total = 0;
  for (unsigned w = 1; w <= scope_world_size; ++w)
    total += boost::multiprecision::pow(shapes, w) - boost::multiprecision::pow(integer(scope_microbatches), w);
  return total;
}

// One proof: the scopes are searched in order, each finding kept until one refutes the recipe.
class recipe_prover {
public:
  recipe_prover(const recipe& r, objective_kind objective)
      : recipe_(r), weighted_objective_(objective == objective_kind::weighted_token_mean) {}

  proof_result run() {
    if (exhaustive_scope() || random_scope() || divisor_vanishes()) return result_;
    decide_for_all_counts();
    return result_;
  }

private:
  // Keeps the first wrong and the first dividing configuration. A wrong one is kept only when its replay
  // partition is defined everywhere, so that the counterexample file shows two numbers that differ rather
  // than a division by zero elsewhere.
  void note(const count_configuration& c, const judged& j) {
    if (j.result == outcome::wrong && !first_wrong_) {
      token_partition tokens = partition_for(c);
      tokens.reducer = recipe_.reducer;
      if (recipe_gradient(to_partition(tokens), recipe_).value) first_wrong_.emplace(c, j);
    }
    if (j.result == outcome::divides_by_zero && !first_zero_) first_zero_.emplace(c, j);
  }

  // Settles the verdict from what was noted, if anything refutes the recipe. A wrong gradient is the
  // stronger finding: the recipe fails even where it is defined.
  bool refuted() {
    if (!first_wrong_ && !first_zero_) return false;
    if (first_wrong_) {
      result_.verdict = proof_verdict::wrong;
      result_.counterexample = expose(recipe_, first_wrong_->first, first_wrong_->second);
      if (first_zero_) result_.division_risk = expose(recipe_, first_zero_->first, first_zero_->second);
    } else {
      result_.verdict = proof_verdict::divides_by_zero;
      result_.counterexample = expose(recipe_, first_zero_->first, first_zero_->second);
    }
    return true;
  }

  // Judges one configuration; under the weighted objective, with every choice of per-token weight for its
  // three groups of tokens (a group without tokens has mass 0 whatever its weight).
  void judge_all(const count_configuration& c) {
    if (!weighted_objective_) {
      ++judged_configurations_;
      note(c, judge(recipe_, c));
      return;
    }
    const std::array<std::uint64_t, 3> group_tokens{c.microbatch_tokens, c.rank_tokens - c.microbatch_tokens,
                                                    c.valid_tokens - c.rank_tokens};
    for (const rational& a : scope_weights)
      for (const rational& b : scope_weights)
        for (const rational& d : scope_weights) {
          const std::array<rational, 3> weights{a, b, d};
          bool distinct = true;  // skip repeats that only change the weight of an empty group
          for (std::size_t g = 0; g < 3; ++g)
            if (group_tokens[g] == 0 && weights[g] != scope_weights.front()) distinct = false;
          if (!distinct) continue;
          const count_configuration w = weighted(c, weights);
          if ((*w.masses)[0] == 0) continue;  // M = 0 has no objective
          ++judged_configurations_;
          note(w, judge(recipe_, w));
        }
  }

  // Every small partition, smallest N first. True when it refutes the recipe.
  bool exhaustive_scope() {
    const std::vector<count_configuration> scope = small_scope();
    for (const count_configuration& c : scope) judge_all(c);
    result_.coverage = "every partition with W ≤ 4, G ≤ 3 and at most 3 tokens per microbatch (" +
                       detail::grouped(small_scope_partitions().str()) + " partitions, through the " +
                       detail::grouped(scope.size()) + " distinct (W, N, n_r, n_m, G) a microbatch of them can see)";
    if (weighted_objective_)
      result_.coverage += ", each with the tokens of the microbatch, of the rest of its rank and of the other ranks "
                          "weighing 0, 1/2, 1 or 2 each (" + detail::grouped(judged_configurations_) +
                          " configurations with M > 0)";
    result_.coverage += ", smallest N first";
    return refuted();
  }

  // Random larger configurations. True when they refute the recipe.
  bool random_scope() {
    detail::deterministic_random random(0x2545F4914F6CDD1Dull);
    for (int i = 0; i < random_configurations && !first_wrong_ && !first_zero_; ++i) {
      count_configuration c;
      c.world_size = 1 + random.below(64);
      c.microbatches = 1 + random.below(16);
      c.microbatch_tokens = random.below(1001);
      c.rank_tokens = c.microbatch_tokens + (c.microbatches > 1 ? random.below(1000 * (c.microbatches - 1) + 1) : 0);
      c.valid_tokens = c.rank_tokens + (c.world_size > 1 ? random.below(16000 * (c.world_size - 1) + 1) : 0);
      if (c.valid_tokens == 0) c.valid_tokens = c.rank_tokens = c.microbatch_tokens = 1;
      if (weighted_objective_) {
        std::array<rational, 3> weights;
        for (rational& w : weights) w = fraction(random.below(17), 1 + random.below(8));
        c = weighted(c, weights);
        if ((*c.masses)[0] == 0) c = weighted(c, {rational(1), rational(1), rational(1)});
      }
      note(c, judge(recipe_, c));
    }
    result_.coverage += "; " + std::to_string(random_configurations) +
                        " random configurations with W ≤ 64, G ≤ 16, up to 1000 tokens per microbatch" +
                        (weighted_objective_ ? " and per-group token weights p/q with p ≤ 16, q ≤ 8" : "");
    return refuted();
  }

  // A divisor may vanish only beyond the scopes (N − 777): each is shown nonzero on every configuration, or
  // its zeros are sought (solved for one count at a time, the others those of the small scope), and one that
  // is found makes the recipe divide by zero there. True when one does; a divisor neither shown nonzero nor
  // found zero keeps the recipe from being proved.
  bool divisor_vanishes() {
    std::vector<std::string> settled;
    for (const detail::recipe_divisor& divisor : detail::divisors_of(recipe_.scale)) {
      if (std::find(settled.begin(), settled.end(), divisor.text) != settled.end()) continue;
      if (divisor.numerator && detail::nonzero_on_every_configuration(*divisor.numerator, {weighted_objective_})) {
        settled.push_back(divisor.text);
        continue;
      }
      if (divisor.numerator)
        if (const std::optional<count_configuration> zero = zero_of(*divisor.numerator)) {
          note(*zero, judge(recipe_, *zero));
          result_.coverage += "; the divisor " + divisor.text + " is 0 at " + describe(*zero) +
                              (single_variable_zeros(*divisor.numerator).empty()
                                   ? std::string()
                                   : " (" + single_variable_zeros(*divisor.numerator) + ")") +
                              ", beyond the scopes";
          if (refuted()) return true;
        }
      if (std::find(undecided_divisors_.begin(), undecided_divisors_.end(), divisor.text) == undecided_divisors_.end())
        undecided_divisors_.push_back(divisor.text);
      settled.push_back(divisor.text);
    }
    return false;
  }

  // "0 wherever N = 777" for a divisor in one count alone, whose zeros in the domain are then all of its roots.
  static std::string single_variable_zeros(const detail::polynomial& numerator) {
    std::optional<count_variable> only;
    for (count_variable v : all_count_variables)
      if (numerator.uses(v)) {
        if (only) return "";
        only = v;
      }
    if (!only) return "";
    const std::vector<rational> roots = detail::roots_in_domain(numerator.in_one_variable(*only, count_values{}), *only);
    if (roots.empty()) return "";
    std::string text = "0 wherever " + std::string(variable_name(*only)) + " = ";
    for (std::size_t i = 0; i < roots.size(); ++i) text += (i ? " or " : "") + to_string(roots[i]);
    return text;
  }

  // A configuration at which `numerator` is 0 and the recipe divides by zero, found by solving for each
  // count it uses with the others taken from the small scope (weighted: under two sets of weights).
  std::optional<count_configuration> zero_of(const detail::polynomial& numerator) const {
    const std::vector<count_configuration> bases = small_scope();
    std::vector<std::array<rational, 3>> weightings{{rational(1), rational(1), rational(1)}};
    if (weighted_objective_) weightings.push_back({scope_weights[1], rational(1), scope_weights[3]});
    for (count_variable v : all_count_variables) {
      if (!numerator.uses(v)) continue;
      for (const std::array<rational, 3>& weights : weightings)
        for (const count_configuration& counts : bases) {
          const count_configuration base = weighted_objective_ ? weighted(counts, weights) : counts;
          for (const rational& root : detail::roots_in_domain(numerator.in_one_variable(v, values_of(base)), v))
            if (const std::optional<count_configuration> at = placed(base, weights, v, root, numerator))
              if (judge(recipe_, *at).result == outcome::divides_by_zero) return at;
        }
    }
    return std::nullopt;
  }

  // `base` with `v` = `value`, the counts `numerator` does not use moved so that the configuration is one a
  // partition can show (nₘ ≤ nᵣ ≤ N, a second microbatch or rank where they differ), small enough to write
  // out as a counterexample; nothing when there is none.
  std::optional<count_configuration> placed(const count_configuration& base, const std::array<rational, 3>& weights,
                                            count_variable v, const rational& value,
                                            const detail::polynomial& numerator) const {
    constexpr std::uint64_t most_tokens = 1'000'000;
    constexpr std::uint64_t most_ranks_or_microbatches = 10'000;
    auto fixed = [&](count_variable x) { return x == v || numerator.uses(x); };
    const bool mass = v == count_variable::M || v == count_variable::m_r || v == count_variable::m_m;
    std::int64_t counts[5] = {static_cast<std::int64_t>(base.world_size), static_cast<std::int64_t>(base.valid_tokens),
                              static_cast<std::int64_t>(base.rank_tokens),
                              static_cast<std::int64_t>(base.microbatch_tokens), static_cast<std::int64_t>(base.microbatches)};
    std::int64_t& w = counts[0];
    std::int64_t& n = counts[1];
    std::int64_t& n_r = counts[2];
    std::int64_t& n_m = counts[3];
    std::int64_t& g = counts[4];
    if (!mass) {
      if (value > rational(static_cast<long>(most_tokens))) return std::nullopt;
      counts[static_cast<std::size_t>(v)] = value.convert_to<std::int64_t>();
    }
    if (!fixed(count_variable::n_r) && n_r < n_m) n_r = n_m;
    if (!fixed(count_variable::n_m) && n_m > n_r) n_m = n_r;
    if (!fixed(count_variable::N) && n < std::max<std::int64_t>(n_r, 1)) n = std::max<std::int64_t>(n_r, 1);
    if (!fixed(count_variable::n_r) && n_r > n) n_r = n;
    if (!fixed(count_variable::n_m) && n_m > n_r) n_m = n_r;
    if (!fixed(count_variable::G) && n_r > n_m && g < 2) g = 2;
    if (!fixed(count_variable::W) && n > n_r && w < 2) w = 2;
    const bool shown = w >= 1 && g >= 1 && n >= 1 && n_m >= 0 && n_m <= n_r && n_r <= n && (n_r == n_m || g >= 2) &&
                       (n == n_r || w >= 2) && n <= static_cast<std::int64_t>(most_tokens) &&
                       w <= static_cast<std::int64_t>(most_ranks_or_microbatches) &&
                       g <= static_cast<std::int64_t>(most_ranks_or_microbatches);
    if (!shown) return std::nullopt;
    count_configuration c{static_cast<std::uint64_t>(w), static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(n_r),
                          static_cast<std::uint64_t>(n_m), static_cast<std::uint64_t>(g), std::nullopt};
    if (!weighted_objective_) return c;
    const bool masses_fixed = fixed(count_variable::M) || fixed(count_variable::m_r) || fixed(count_variable::m_m);
    if (!masses_fixed) return weighted(c, weights);
    // The masses the numerator needs, each group's weight then following from its mass and count.
    std::array<rational, 3> masses = *base.masses;  // M, m_r, m_m
    if (mass) masses[v == count_variable::M ? 0 : v == count_variable::m_r ? 1 : 2] = value;
    const std::array<rational, 3> group_masses{masses[2], masses[1] - masses[2], masses[0] - masses[1]};
    const std::array<std::uint64_t, 3> group_counts{c.microbatch_tokens, c.rank_tokens - c.microbatch_tokens,
                                                    c.valid_tokens - c.rank_tokens};
    std::array<rational, 3> group_weights;
    for (std::size_t i = 0; i < 3; ++i) {
      if (group_masses[i] < 0 || (group_counts[i] == 0 && group_masses[i] != 0)) return std::nullopt;
      group_weights[i] = group_counts[i] == 0 ? rational(0) : rational(group_masses[i] / group_counts[i]);
    }
    if (masses[0] <= 0) return std::nullopt;
    return weighted(c, group_weights);
  }

  // F = c·N − d (c·M − d weighted) is a rational function; its numerator has total degree at most D, so if
  // F vanishes on a product grid of D + 1 values per variable inside the domain, the numerator is the zero
  // polynomial and the identity holds for all counts (and masses).
  void decide_for_all_counts() {
    const auto [numerator_degree, denominator_degree] = recipe_.scale.degree_bound();
    const unsigned degree = std::max(numerator_degree, denominator_degree) + 1;
    if (degree > largest_decided_degree) {
      result_.verdict = proof_verdict::checked;
      result_.coverage += "; the expression's degree bound " + std::to_string(degree) +
                          " is too large to decide for all counts, so this is checked, not proved";
      return;
    }
    const std::uint64_t d = degree;
    const count_variable denominator = weighted_objective_ ? count_variable::M : count_variable::N;
    // A variable takes D + 1 values when F depends on it, one value otherwise. Counts nest (nₘ ≤ nᵣ ≤ N),
    // masses too, each range above the one below it.
    auto range_of = [&](count_variable v, std::uint64_t low) {
      const bool varies = recipe_.scale.uses(v) || v == denominator ||
                          (v == count_variable::W && recipe_.reducer == reducer_kind::mean);
      return detail::count_axis{v, low, varies ? low + d : low};
    };
    std::vector<detail::count_axis> axes{range_of(count_variable::W, 2), range_of(count_variable::G, 2),
                           range_of(count_variable::n_m, 1), range_of(count_variable::n_r, d + 2),
                           range_of(count_variable::N, 2 * d + 3)};
    if (weighted_objective_) {
      axes.push_back(range_of(count_variable::m_m, 1));
      axes.push_back(range_of(count_variable::m_r, d + 2));
      axes.push_back(range_of(count_variable::M, 2 * d + 3));
    }
    std::vector<std::uint64_t> at;
    for (const detail::count_axis& a : axes) at.push_back(a.low);
    auto value = [&](count_variable v) { return detail::value_at(axes, at, v); };
    std::uint64_t points = 0;
    for (;;) {
      count_configuration c{value(count_variable::W), value(count_variable::N), value(count_variable::n_r),
                            value(count_variable::n_m), value(count_variable::G), std::nullopt};
      if (weighted_objective_)
        c.masses = std::array<rational, 3>{rational(value(count_variable::M)), rational(value(count_variable::m_r)),
                                           rational(value(count_variable::m_m))};
      note(c, judge(recipe_, c));
      if (refuted()) return;
      ++points;
      if (!detail::next_point(axes, at)) break;
    }
    if (!undecided_divisors_.empty()) {
      std::string divisors;
      for (const std::string& text : undecided_divisors_) divisors += (divisors.empty() ? "" : ", ") + text;
      result_.verdict = proof_verdict::checked;
      result_.coverage += "; c·" + std::string(variable_name(denominator)) +
                          " − d vanishes on a grid large enough for its degree, but the divisor" +
                          (undecided_divisors_.size() > 1 ? "s " : " ") + divisors +
                          " could not be shown nonzero for every count, nor found 0, so where " +
                          (undecided_divisors_.size() > 1 ? "one of them is" : "it is") +
                          " 0 the scale may be undefined: this is checked, not proved";
      return;
    }
    result_.verdict = proof_verdict::proved;
    result_.coverage += "; proved for all " + std::string(weighted_objective_ ? "counts and masses" : "counts") +
                        ": c·" + std::string(variable_name(denominator)) + " − d has a numerator of degree at most " +
                        std::to_string(degree) + " and vanishes on a grid of " + std::to_string(points) +
                        " configurations (" + std::to_string(degree + 1) + " values of each variable it depends on)";
  }

  const recipe& recipe_;
  bool weighted_objective_;
  proof_result result_;
  std::optional<std::pair<count_configuration, judged>> first_wrong_;
  std::optional<std::pair<count_configuration, judged>> first_zero_;
  std::uint64_t judged_configurations_ = 0;
  std::vector<std::string> undecided_divisors_;  // neither shown nonzero everywhere nor found 0
};

}  // namespace


std::string describe(const count_configuration& c) {
  std::string text = "W = " + std::to_string(c.world_size) + ", N = " + std::to_string(c.valid_tokens) +
                     ", n_r = " + std::to_string(c.rank_tokens) + ", n_m = " + std::to_string(c.microbatch_tokens) +
                     ", G = " + std::to_string(c.microbatches);
  if (c.masses)
    text += ", M = " + to_string((*c.masses)[0]) + ", m_r = " + to_string((*c.masses)[1]) +
            ", m_m = " + to_string((*c.masses)[2]);
  if (c.sequences) {
    const sequence_counts& q = *c.sequences;
    text += ", n_s = " + std::to_string(q.group_tokens) + ", B = " + std::to_string(q.sequences) +
            ", b_r = " + std::to_string(q.rank_sequences) + ", b_m = " + std::to_string(q.microbatch_sequences);
    if (!q.declared) text += " (a microbatch without sequences)";
  }
  if (c.group_mass && c.sequences) text += ", the group's mass " + to_string(*c.group_mass);
  if (c.normalizer) text += ", C = " + to_string(*c.normalizer);
  return text;
}

std::string_view objective_weight(objective_kind objective) noexcept {
  switch (objective) {
    case objective_kind::token_mean: return "1/N";
    case objective_kind::weighted_token_mean: return "1/M";
    case objective_kind::sequence_mean: return "1/(B·n_s)";
    case objective_kind::sequence_sum_mean: return "1/B";
    case objective_kind::constant: return "1/C";
  }
  return "1/N";
}

std::string objective_scale(objective_kind objective, reducer_kind reducer) {
  std::string_view units = "N";
  switch (objective) {
    case objective_kind::token_mean: units = "N"; break;
    case objective_kind::weighted_token_mean: units = "M"; break;
    case objective_kind::sequence_mean: units = "(B * n_s)"; break;
    case objective_kind::sequence_sum_mean: units = "B"; break;
    case objective_kind::constant: units = "C"; break;
  }
  return (reducer == reducer_kind::mean ? "W / " : "1 / ") + std::string(units);
}

std::string_view verdict_name(proof_verdict verdict) noexcept {
  switch (verdict) {
    case proof_verdict::proved: return "proved";
    case proof_verdict::checked: return "checked";
    case proof_verdict::wrong: return "wrong";
    case proof_verdict::divides_by_zero: return "divides_by_zero";
  }
  return "checked";
}

proof_result prove_recipe(const recipe& r, objective_kind objective) {
  if (objective != objective_kind::weighted_token_mean)
    if (const std::optional<count_variable> mass = r.scale.mass_variable())
      throw error(error_code::recipe_error, "the recipe uses " + std::string(variable_name(*mass)) +
                                                ", a weight mass: prove it with --objective weighted_token_mean");
  if (objective != objective_kind::constant && r.scale.uses(count_variable::C))
    throw error(error_code::recipe_error, "the recipe uses C, the declared normalizer: prove it with --objective constant");
  if (detail::decided_by_groups(r, objective)) return detail::prove_by_groups(r, objective);
  return recipe_prover(r, objective).run();
}

}  // namespace normcheck
