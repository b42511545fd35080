#include "normcheck/gate/weights.hpp"

#include "normcheck/core/gradients.hpp"
#include "normcheck/io/text.hpp"

#include "normcheck/gate/nearby.hpp"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <tuple>

namespace normcheck {

namespace {

// What the gate needs of one group, computed once: its derivative sums (at θ, with the probe's values and
// with the witness's values 1, 2, …, n) and the magnitudes their bounds scale with.
struct group_facts {
  group_ref where;
  bool sequence = false;
  std::uint64_t tokens = 0;
  rational derivative;          // D = m·θ − Σw·y
  rational magnitude;           // m·|θ| + Σw·|y|
  rational witness_derivative;  // n·θ − n(n+1)/2
  rational witness_magnitude;   // n·|θ| + n(n+1)/2
};

// Without a witness the witness's sums are left 0: nothing reads them.
std::vector<group_facts> facts_of(const partition& update, bool with_witness) {
  std::vector<group_facts> facts;
  facts.reserve(update.group_count());
  const rational theta_size = abs(update.theta);
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      const microbatch_stats& microbatch = rank.microbatches[m];
      for (std::size_t g = 0; g < microbatch.group_count(); ++g) {
        const group_stats& group = microbatch.group(g);
        group_facts f;
        f.where = {r, m, g};
        f.sequence = microbatch.sequences.has_value();
        f.tokens = group.valid_tokens;
        f.derivative = loss_gradient_sum(group, update.theta);
        rational magnitude = theta_size * group.mass();
        magnitude += group.weighted_target_abs_sum();
        f.magnitude = std::move(magnitude);
        if (!with_witness) {
          facts.push_back(std::move(f));
          continue;
        }
        const rational n{group.valid_tokens};
        rational positions = n * (n + 1) / 2;  // Σ j for j = 1 … n
        rational witness = n * update.theta;
        witness -= positions;
        f.witness_derivative = std::move(witness);
        rational witness_magnitude = n * theta_size;
        witness_magnitude += positions;
        f.witness_magnitude = std::move(witness_magnitude);
        facts.push_back(std::move(f));
      }
    }
  }
  return facts;
}

// Rank 0's copy of one measurement.
struct measured {
  const std::vector<observed_value>* primary = nullptr;
  const std::vector<observed_value>* witness = nullptr;  // absent: no witness
};

// How far a component may be from c·D: the explicit tolerance, or the error factor times |c|·magnitude.
std::optional<rational> allowance(const rational& weight, const rational& expected, const rational& magnitude,
                                  const group_bounds& bounds) {
  if (bounds.explicit_tolerance) {
    rational allowed = bounds.explicit_tolerance->absolute + bounds.explicit_tolerance->relative * abs(expected);
    return allowed;
  }
  if (!bounds.factor) return std::nullopt;
  rational allowed = *bounds.factor * abs(weight) * magnitude;
  return allowed;
}

bool component_fits(const observed_value& value, const rational& weight, const rational& derivative,
                    const rational& magnitude, const group_bounds& bounds) {
  const rational* number = std::get_if<rational>(&value);
  if (!number) return false;
  const rational expected = weight * derivative;
  const std::optional<rational> allowed = allowance(weight, expected, magnitude, bounds);
  if (!allowed) return false;
  const rational distance = abs(*number - expected);
  return distance <= *allowed;
}

// Whether group g's components are those of the weight `weight`.
bool group_fits(std::size_t g, const rational& weight, const std::vector<group_facts>& facts, const measured& m,
                const group_bounds& bounds) {
  const group_facts& f = facts[g];
  if (!component_fits((*m.primary)[g], weight, f.derivative, f.magnitude, bounds)) return false;
  return !m.witness || component_fits((*m.witness)[g], weight, f.witness_derivative, f.witness_magnitude, bounds);
}

// A table of delivered weights read group by group, so that a candidate that differs from the observation
// is dropped at its first differing group: a normalization in some objective's units, times a factor, and
// for geometric weights times a^(G−1−m) along each rank's microbatches. The coefficient of a unit (an
// update, rank or microbatch) is computed once while its groups are read in order.
class lazy_table {
public:
  lazy_table(const partition& update, objective_kind objective, const normalization& n)
      : units_(update, objective), normalization_(&n) {}

  /// The weight of the group at `where`, or nullopt where the coefficient is undefined.
  std::optional<rational> at(const group_ref& where) const {
    const std::optional<rational>& coefficient = unit_coefficient(where);
    if (!coefficient) return std::nullopt;
    rational weight = *coefficient;
    if (units_.objective() == objective_kind::sequence_mean) {
      // × token_factor: 1/nₛ of the group's valid tokens (0 without any); nothing to do for one token.
      const std::uint64_t n = group_of(where).valid_tokens;
      if (n == 0) weight = 0;
      else if (n != 1) weight /= n;
    }
    if (ratio_) weight *= power(*ratio_, units_.update().ranks[where.rank].microbatches.size() - 1 - where.microbatch);
    return weight;
  }

  /// Whether every group of a unit weighs the unit's coefficient (no factor of its own).
  bool uniform_in_units() const { return units_.objective() != objective_kind::sequence_mean && !ratio_; }

  /// The coefficient of the unit holding the group at `where` (its weight, when uniform_in_units()).
  const std::optional<rational>& unit_coefficient(const group_ref& where) const {
    const unit_key key = key_of(where);
    if (!cached_ || cached_->first != key) {
      std::optional<rational> c = delivered_unit_weight(units_, *normalization_, where);
      if (c && factor_ != 1) *c *= factor_;
      cached_ = std::make_pair(key, std::move(c));
    }
    return cached_->second;
  }

  /// This table times `factor`.
  lazy_table scaled(const rational& factor) const {
    lazy_table out = *this;
    out.factor_ *= factor;
    out.cached_.reset();
    return out;
  }

  /// This table with microbatch m of each rank of G weighted by a^(G−1−m) more.
  lazy_table geometric(const rational& a) const {
    lazy_table out = *this;
    out.ratio_ = a;
    out.cached_.reset();
    return out;
  }

private:
  using unit_key = std::tuple<std::size_t, std::size_t, std::size_t>;

  unit_key key_of(const group_ref& where) const {
    switch (normalization_->level) {
      case scope::update: return {0, 0, 0};
      case scope::rank: return {where.rank + 1, 0, 0};
      case scope::microbatch: return {where.rank + 1, where.microbatch + 1, 0};
      case scope::group: break;
    }
    return {where.rank + 1, where.microbatch + 1, where.group + 1};
  }

  const group_stats& group_of(const group_ref& where) const {
    return units_.update().ranks[where.rank].microbatches[where.microbatch].group(where.group);
  }

  static rational power(const rational& a, std::size_t k) {
    rational p = 1;
    for (std::size_t i = 0; i < k; ++i) p *= a;
    return p;
  }

  objective_units units_;
  const normalization* normalization_;
  rational factor_ = 1;
  std::optional<rational> ratio_;
  mutable std::optional<std::pair<unit_key, std::optional<rational>>> cached_;
};

// Whether a table accounts for every component (each within its bound), read until its first difference.
bool table_fits(const lazy_table& table, const std::vector<group_facts>& facts, const measured& m,
                const group_bounds& bounds) {
  for (std::size_t g = 0; g < facts.size(); ++g) {
    const std::optional<rational> w = table.at(facts[g].where);
    if (!w || !group_fits(g, *w, facts, m, bounds)) return false;
  }
  return true;
}

// Whether two tables give every group the same weight (read until their first difference): candidates that
// coincide on this update are named once, without holding either table.
bool same_table(const lazy_table& a, const lazy_table& b, const std::vector<group_facts>& facts) {
  const bool by_unit = a.uniform_in_units() && b.uniform_in_units();
  for (const group_facts& f : facts) {
    if (by_unit ? a.unit_coefficient(f.where) != b.unit_coefficient(f.where) : a.at(f.where) != b.at(f.where))
      return false;
  }
  return true;
}

// A factor in the update's own terms, W^w · G^g · CP^s · constant (CP the sequence dimensions' size), so
// that it can be read on another update.
struct factor_form {
  int w = 0;
  int g = 0;
  rational constant{1};
  int s = 0;
  int t = 0;  // TP^t, TP the replica dimensions' size
};

// A weight table a candidate computation would produce, with its name and words, and how to produce it on
// another update: the named computation `base` ("objective" for the objective's own) times `factor`. A
// geometric fit has no base: it is read off this update's measurement.
struct candidate {
  std::string name;
  lazy_table table;
  mistake_words words;
  std::string base;
  factor_form factor;
  bool free = false;  // times a number that names nothing in W or G (a window, a bare factor): fits anything
};

// Whether two tables agree on every group of `update` (the groups of an update other than the measured one).
bool same_table_on(const lazy_table& a, const lazy_table& b, const partition& update) {
  for (std::size_t r = 0; r < update.ranks.size(); ++r)
    for (std::size_t m = 0; m < update.ranks[r].microbatches.size(); ++m)
      for (std::size_t g = 0; g < update.ranks[r].microbatches[m].group_count(); ++g)
        if (a.at({r, m, g}) != b.at({r, m, g})) return false;
  return true;
}

// The best rational approximation of x with a denominator of at most `most` (continued fractions).
rational nearest_simple(const rational& x, std::uint64_t most) {
  const bool negative = x < 0;
  rational rest = negative ? rational(-x) : x;
  integer p0 = 0, q0 = 1, p1 = 1, q1 = 0;
  for (int step = 0; step < 64; ++step) {
    const integer a = numerator(rest) / denominator(rest);
    const integer p2 = a * p1 + p0;
    const integer q2 = a * q1 + q0;
    if (q2 > most) break;
    p0 = p1;
    q0 = q1;
    p1 = p2;
    q1 = q2;
    const rational fraction = rest - rational(a);
    if (fraction == 0) break;
    rest = 1 / fraction;
  }
  if (q1 == 0) return rational(0);
  rational best = rational(p1) / rational(q1);
  return negative ? rational(-best) : best;
}

// The group measured most precisely: the largest derivative sum with a finite observation.
std::optional<std::size_t> anchor_group(const std::vector<group_facts>& facts, const measured& m) {
  std::optional<std::size_t> best;
  rational largest;
  for (std::size_t g = 0; g < facts.size(); ++g) {
    if (!std::holds_alternative<rational>((*m.primary)[g])) continue;
    rational size = abs(facts[g].derivative);
    if (size > largest) {
      largest = std::move(size);
      best = g;
    }
  }
  return best;
}

// The factor λ that the observation suggests for `table` (observed / predicted at the anchor group).
std::optional<rational> suggested_factor(const lazy_table& table, const std::vector<group_facts>& facts,
                                         const measured& m, std::optional<std::size_t> anchor) {
  if (!anchor) return std::nullopt;
  const std::optional<rational> w = table.at(facts[*anchor].where);
  if (!w || *w == 0) return std::nullopt;
  rational predicted = *w * facts[*anchor].derivative;
  rational factor = std::get<rational>((*m.primary)[*anchor]) / predicted;
  return factor;
}

// The names of a factor in the update's own terms: "×W", "/G", "×W·G", "×4", "/3", "×2/3"; whether it is a
// ratio G/k of accumulation steps (a short or another window); and its form, to read it on another update.
struct factor_label {
  std::string text;
  std::optional<std::uint64_t> window;  // k when the factor is G/k with k ≠ G
  factor_form form;
  bool named = false;  // a form in W and G, not a window or a bare number
};

// The value of `form` on `update`, or nullopt where it is in G and the ranks accumulate differently.
std::optional<rational> value_on(const factor_form& form, const partition& update) {
  rational value = form.constant;
  const rational w{update.world_size()};
  for (int i = 0; i < std::abs(form.w); ++i) {
    if (form.w > 0) value *= w;
    else value /= w;
  }
  const rational cp{update.mesh_extent(mesh_role::sequence)};
  for (int i = 0; i < std::abs(form.s); ++i) {
    if (form.s > 0) value *= cp;
    else value /= cp;
  }
  const rational tp{update.mesh_extent(mesh_role::replica)};
  for (int i = 0; i < std::abs(form.t); ++i) {
    if (form.t > 0) value *= tp;
    else value /= tp;
  }
  if (form.g != 0) {
    const std::uint64_t g = update.common_accumulation();
    if (g == 0) return std::nullopt;
    const rational gg{g};
    for (int i = 0; i < std::abs(form.g); ++i) {
      if (form.g > 0) value *= gg;
      else value /= gg;
    }
  }
  return value;
}

// Every name of `factor` on `update`: each form in W and G it equals (at G = W, "/W" and "/G" both), else a
// window G/k, else the number itself.
std::vector<factor_label> labels_of(const rational& factor, const partition& update) {
  const std::uint64_t g = update.common_accumulation();
  struct symbolic {
    int w;
    int g;
    std::string text;
    int s = 0;
    int t = 0;
  };
  std::vector<symbolic> forms;
  if (update.world_size() > 1) forms.push_back({1, 0, "×W"}), forms.push_back({-1, 0, "/W"});
  if (g > 1) {
    forms.push_back({0, 1, "×G"});
    forms.push_back({0, -1, "/G"});
    if (update.world_size() > 1) {
      forms.push_back({1, 1, "×W·G"});
      forms.push_back({-1, -1, "/(W·G)"});
      forms.push_back({1, -1, "×W/G"});
      forms.push_back({-1, 1, "×G/W"});
    }
  }
  const std::string cp = mesh_factor_name(update, mesh_role::sequence);
  const std::string tp = mesh_factor_name(update, mesh_role::replica);
  if (!cp.empty()) {
    forms.push_back({0, 0, "×" + cp, 1});
    forms.push_back({0, 0, "/" + cp, -1});
  }
  if (!tp.empty()) {
    forms.push_back({0, 0, "×" + tp, 0, 1});
    forms.push_back({0, 0, "/" + tp, 0, -1});
  }
  if (!cp.empty() && !tp.empty()) {  // a loss scaled by TP·CP (every model-parallel rank counted as a replica)
    forms.push_back({0, 0, "×(" + cp + "·" + tp + ")", 1, 1});
    forms.push_back({0, 0, "/(" + cp + "·" + tp + ")", -1, -1});
  }
  std::vector<factor_label> labels;
  for (const symbolic& s : forms) {
    const factor_form form{s.w, s.g, rational(1), s.s, s.t};
    if (value_on(form, update) == factor) labels.push_back({s.text, std::nullopt, form, true});
  }
  if (!labels.empty()) return labels;
  if (g > 1) {
    const rational k = rational(g) / factor;
    if (denominator(k) == 1 && k > 0 && k != rational(g) && k <= 64)
      return {{"×G/" + to_string(k), static_cast<std::uint64_t>(numerator(k)), {0, 1, 1 / k}, false}};
  }
  const factor_form bare{0, 0, factor};
  if (denominator(factor) == 1) return {{"×" + to_string(factor), std::nullopt, bare, false}};
  if (numerator(factor) == 1) return {{"/" + denominator(factor).str(), std::nullopt, bare, false}};
  return {{"×" + to_string(factor), std::nullopt, bare, false}};
}

// The names a normalization of the report takes when it was written for another objective than the
// declared one.
std::string foreign_name(const normalization& n, objective_kind written_for, reducer_kind reducer) {
  const std::string objective(objective_name(written_for));
  const std::string_view correct = reducer == reducer_kind::mean ? "scaled_sum" : "global_share";
  if (n.name == correct) return objective;
  if (n.name == "local_sum" && written_for == objective_kind::sequence_mean) return "sum_of_sequence_means";
  return std::string(n.name) + "(" + objective + ")";
}

// Every candidate whose table the gate compares with the observation, exact ones first: the report's
// normalizations under the declared objective (but the correct one), the diagnosed ones, and the report's
// under every other objective the update can be counted in.
std::vector<candidate> candidates_of(const partition& update) {
  std::vector<candidate> out;
  const std::string_view correct = update.reducer == reducer_kind::mean ? "scaled_sum" : "global_share";
  const bool accumulates = std::any_of(update.ranks.begin(), update.ranks.end(),
                                       [](const rank_stats& r) { return r.microbatches.size() > 1; });
  auto add = [&](std::string name, objective_kind objective, const normalization& n) {
    mistake_words words = table_mistake_words(name, update);
    std::string base = name;
    out.push_back({std::move(name), lazy_table(update, objective, n), std::move(words), std::move(base), {}});
  };
  for (const normalization& n : report_normalizations()) {
    if (n.objective_itself || n.name == correct) continue;
    if (n.name == "microbatch_mean" && !accumulates) continue;
    // Under the sequence mean, a rank's unnormalized sum adds its sequences' means.
    const bool sequence_sum = n.name == "local_sum" && update.objective == objective_kind::sequence_mean;
    add(sequence_sum ? "sum_of_sequence_means" : std::string(n.name), update.objective, n);
  }
  for (const normalization& n : diagnosed_normalizations()) add(std::string(n.name), update.objective, n);
  for (objective_kind other : {objective_kind::token_mean, objective_kind::sequence_mean,
                               objective_kind::sequence_sum_mean, objective_kind::constant}) {
    if (other == update.objective || !objective_units::applies(update, other)) continue;
    for (const normalization& n : report_normalizations()) {
      if (n.objective_itself) continue;
      if (n.name == "microbatch_mean" && !accumulates) continue;
      std::string name = foreign_name(n, other, update.reducer);
      if (update.objective == objective_kind::weighted_token_mean && other == objective_kind::token_mean &&
          n.name == correct)
        name = "count_denominator";
      add(std::move(name), other, n);
    }
  }
  return out;
}

// Geometric weights along the microbatch order: microbatch m of a rank of G weighs a^(G−1−m) times what
// `base` gives it, the accumulated buffer having been rescaled by a after every microbatch. `a` is read off
// the first rank of three or more microbatches and tried as the simplest nearby fraction.
std::optional<candidate> geometric_fit(const candidate& base, const partition& update,
                                       const std::vector<group_facts>& facts, const measured& m,
                                       const group_bounds& bounds, std::optional<std::size_t> anchor) {
  std::optional<std::size_t> rank;
  for (std::size_t r = 0; r < update.ranks.size() && !rank; ++r)
    if (update.ranks[r].microbatches.size() >= 3) rank = r;
  if (!rank) return std::nullopt;
  // observed / base for the first group of each of that rank's microbatches, in order.
  std::vector<std::optional<rational>> ratios;
  for (std::size_t g = 0; g < facts.size(); ++g) {
    const group_facts& f = facts[g];
    if (f.where.rank != *rank || f.where.group != 0) continue;
    const rational* number = std::get_if<rational>(&(*m.primary)[g]);
    const std::optional<rational> w = base.table.at(f.where);
    if (!number || !w || *w == 0 || f.derivative == 0) {
      ratios.emplace_back();
      continue;
    }
    rational ratio = *number / (*w * f.derivative);
    ratios.emplace_back(std::move(ratio));
  }
  std::optional<rational> a;
  for (std::size_t i = ratios.size(); i-- > 1;)
    if (ratios[i] && ratios[i - 1] && *ratios[i] != 0) {
      a = nearest_simple(*ratios[i - 1] / *ratios[i], 64);
      break;
    }
  if (!a || *a == 1 || *a <= 0) return std::nullopt;
  const lazy_table weighted = base.table.geometric(*a);
  const std::optional<rational> factor = suggested_factor(weighted, facts, m, anchor);
  if (!factor) return std::nullopt;
  const rational lambda = nearest_simple(*factor, 64);
  if (lambda <= 0) return std::nullopt;
  lazy_table fitted = weighted.scaled(lambda);
  if (!table_fits(fitted, facts, m, bounds)) return std::nullopt;
  mistake_words words = table_mistake_words("geometric", update);
  words.computed += " (each microbatch weighs " + to_string(*a) + " times the next one, relative to " + base.name +
                    (lambda == 1 ? "" : ", times " + to_string(lambda)) + ")";
  return candidate{"geometric", std::move(fitted), std::move(words), {}, {}, true};
}

// `base` times the simplest factor the observation suggests, if that accounts for every component: one
// candidate for each name of the factor (`named_only`: only names in W and G, not windows or bare numbers).
std::vector<candidate> factor_fits(const candidate& base, const partition& update,
                                   const std::vector<group_facts>& facts, const measured& m, const group_bounds& bounds,
                                   std::optional<std::size_t> anchor, bool named_only = false) {
  const std::optional<rational> suggested = suggested_factor(base.table, facts, m, anchor);
  if (!suggested || *suggested <= 0) return {};
  const rational factor = nearest_simple(*suggested, 64);
  if (factor <= 0 || factor == 1 || numerator(factor) > 4096) return {};
  const std::vector<factor_label> labels = labels_of(factor, update);
  if (named_only && !labels.front().named) return {};
  lazy_table table = base.table.scaled(factor);
  if (!table_fits(table, facts, m, bounds)) return {};
  std::vector<candidate> out;
  for (const factor_label& label : labels) {
    std::string name = base.name + label.text;
    mistake_words words;
    if (label.window) {
      const std::uint64_t g = update.common_accumulation();
      name = *label.window > g ? "short_window" : "other_window";
      words = table_mistake_words(name, update);
      words.computed += " (" + base.name + " times G/" + std::to_string(*label.window) + ": divided by " +
                        std::to_string(*label.window) + " where the window accumulated G = " + std::to_string(g) + ")";
    } else if (base.name == "objective") {
      words = table_mistake_words(name, update);
    } else {
      const mistake_words scaling = factor_words(label.text, update);
      words = {base.words.computed + ", and the result " + scaling.computed,
               base.words.why_wrong + "; and it is " + scaling.computed + ": " + scaling.why_wrong};
    }
    factor_form form = label.form;
    form.w += base.factor.w;
    form.g += base.factor.g;
    form.s += base.factor.s;
    form.t += base.factor.t;
    form.constant *= base.factor.constant;
    out.push_back({std::move(name), table, std::move(words), base.base, std::move(form), !label.named});
  }
  return out;
}

explanation explain(const candidate& c, const std::vector<group_facts>& facts, const std::string& instead) {
  tree_sum total;
  for (const group_facts& f : facts) total.add(c.table.at(f.where).value_or(rational(0)) * f.derivative);
  return {c.name, total.value(), std::nullopt, c.words.computed, c.words.why_wrong, instead, {}};
}

// The groups whose witness shows weights that vary inside them: the witness is not the measured weight
// times the witness's derivative sum. Each group is judged with its own measured weight.
std::vector<std::size_t> varying_groups(const std::vector<group_facts>& facts, const measured& m,
                                        const group_bounds& bounds) {
  std::vector<std::size_t> varying;
  if (!m.witness) return varying;
  for (std::size_t g = 0; g < facts.size(); ++g) {
    const group_facts& f = facts[g];
    const rational* primary = std::get_if<rational>(&(*m.primary)[g]);
    const rational* witness = std::get_if<rational>(&(*m.witness)[g]);
    if (!primary || !witness || f.derivative == 0 || f.tokens < 2) continue;
    const rational weight = *primary / f.derivative;
    const std::optional<rational> primary_allowed = allowance(weight, *primary, f.magnitude, bounds);
    const std::optional<rational> witness_allowed =
        allowance(weight, weight * f.witness_derivative, f.witness_magnitude, bounds);
    if (!primary_allowed || !witness_allowed) continue;
    // The measured weight is uncertain by primary_allowed/|D|, which the witness carries times |D'|.
    rational allowed = *witness_allowed + *primary_allowed * abs(f.witness_derivative) / abs(f.derivative);
    const rational distance = abs(*witness - weight * f.witness_derivative);
    if (distance > allowed) varying.push_back(g);
  }
  return varying;
}

std::string place_of(const group_facts& f, const partition& update) {
  return "rank " + std::to_string(update.listed_rank(f.where.rank)) + ", microbatch " +
         std::to_string(f.where.microbatch) + (f.sequence ? ", sequence " + std::to_string(f.where.group) : "");
}

}  // namespace

std::vector<weight_candidate> weight_candidates(const partition& update) {
  std::vector<weight_candidate> out;
  for (candidate& c : candidates_of(update)) {
    // The whole table, group by group; a candidate undefined somewhere is no computation of this update.
    std::vector<rational> weights;
    bool defined = true;
    for (std::size_t r = 0; r < update.ranks.size() && defined; ++r)
      for (std::size_t m = 0; m < update.ranks[r].microbatches.size() && defined; ++m)
        for (std::size_t g = 0; g < update.ranks[r].microbatches[m].group_count(); ++g) {
          std::optional<rational> w = c.table.at({r, m, g});
          if (!w) {
            defined = false;
            break;
          }
          weights.push_back(std::move(*w));
        }
    if (defined) out.push_back({std::move(c.name), std::move(weights)});
  }
  return out;
}

std::optional<std::string> replica_difference(const group_measurement& measurement) {
  auto first_difference = [](const std::vector<observed_vector>& vectors,
                             std::string_view what) -> std::optional<std::string> {
    for (std::size_t r = 1; r < vectors.size(); ++r)
      for (std::size_t g = 0; g < vectors[r].size(); ++g)
        if (!vectors[r].same_at(g, vectors[0]))
          return "rank " + std::to_string(r) + " holds " + to_string(vectors[r][g]) + " in " + std::string(what) +
                 " component " + std::to_string(g) + " but rank 0 holds " + to_string(vectors[0][g]) +
                 ": after an all-reduce every replica holds the same vector, so the replicas diverged";
    return std::nullopt;
  };
  if (std::optional<std::string> d = first_difference(measurement.per_rank, "group")) return d;
  return first_difference(measurement.witness, "witness");
}

namespace {

// A candidate's table on a nearby update, with the candidates made there: its base computation there times
// its factor there (nullopt where either is not defined there).
struct nearby_tables {
  nearby_update nearby;
  std::vector<candidate> candidates;
  std::optional<lazy_table> objective;
};

std::optional<lazy_table> table_on(const candidate& c, const nearby_tables& there) {
  const std::optional<rational> factor = value_on(c.factor, there.nearby.update);
  if (c.base.empty() || !factor) return std::nullopt;
  if (c.base == "objective") return there.objective->scaled(*factor);
  for (const candidate& other : there.candidates)
    if (other.name == c.base) return other.table.scaled(*factor);
  return std::nullopt;
}

// The explanations of a failure, in rank order. A fit that gives every group of this update and of every
// nearby update the weights an earlier fit gives is that computation in other words, and is left out, as is
// a free factor or a repeated name on an earlier fit's table; one that agrees with an earlier fit on this
// update only is kept, and both name the change that tells them apart.
std::vector<explanation> explained(const std::vector<const candidate*>& fits, const partition& update,
                                   const std::vector<group_facts>& facts, const std::string& instead) {
  std::vector<explanation> out;
  std::vector<const candidate*> kept;
  // Made once, and only when two fits agree here; each held in place, since its tables point into it.
  std::vector<std::unique_ptr<nearby_tables>> nearby;
  bool made = false;
  for (const candidate* c : fits) {
    bool same_computation = false;
    std::vector<std::pair<std::size_t, std::string>> alike;
    for (std::size_t k = 0; k < kept.size() && !same_computation; ++k) {
      if (!same_table(kept[k]->table, c->table, facts)) continue;
      // A free factor that lands on an earlier fit's table, or the same name again, adds no explanation.
      if (c->free || c->name == kept[k]->name) {
        same_computation = true;
        break;
      }
      if (!made) {
        made = true;
        for (nearby_update& n : nearby_updates(update)) {
          auto there = std::make_unique<nearby_tables>();
          there->nearby = std::move(n);
          there->candidates = candidates_of(there->nearby.update);
          there->objective.emplace(there->nearby.update, update.objective, normalization_of(strategy::global_mean));
          nearby.push_back(std::move(there));
        }
      }
      std::optional<std::string> change;
      bool comparable = true;
      for (const std::unique_ptr<nearby_tables>& there : nearby) {
        const std::optional<lazy_table> a = table_on(*kept[k], *there);
        const std::optional<lazy_table> b = table_on(*c, *there);
        if (!a || !b) {
          comparable = false;
        } else if (!same_table_on(*a, *b, there->nearby.update)) {
          change = there->nearby.change;
          break;
        }
      }
      if (change) alike.emplace_back(k, std::move(*change));
      else if (comparable) same_computation = true;
    }
    if (same_computation) continue;
    explanation e = explain(*c, facts, instead);
    for (const auto& [k, change] : alike) {
      e.alike.push_back({kept[k]->name, change});
      out[k].alike.push_back({c->name, change});
    }
    kept.push_back(c);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

group_judgement judge_groups(const partition& update, const group_measurement& measurement,
                             const group_bounds& bounds) {
  group_judgement result;
  // The measurement judged now, as values; every other one stays compact meanwhile.
  const std::vector<observed_value> primary = measurement.per_rank.front().values();
  const std::vector<observed_value> witness =
      measurement.witness.empty() ? std::vector<observed_value>() : measurement.witness.front().values();
  const measured m{&primary, measurement.witness.empty() ? nullptr : &witness};
  const std::vector<group_facts> facts = facts_of(update, m.witness != nullptr);
  const objective_units units(update, update.objective);
  const lazy_table objective_table(update, update.objective, normalization_of(strategy::global_mean));
  const std::optional<std::size_t> anchor = anchor_group(facts, m);

  // Every group is judged; the first kept_weight_rows of them are kept as rows for the reports, and the
  // first one outside its bound for the detail.
  std::size_t outside = 0;
  std::optional<std::size_t> first_outside;
  std::optional<weight_row> worst;
  bool objective_defined = true;
  result.groups = facts.size();
  result.rows.reserve(std::min(facts.size(), kept_weight_rows));
  for (std::size_t g = 0; g < facts.size(); ++g) {
    const group_facts& f = facts[g];
    const std::optional<rational> defined = objective_table.at(f.where);
    objective_defined = objective_defined && defined.has_value();
    const rational objective = defined.value_or(rational(0));
    const bool within_bound = group_fits(g, objective, facts, m, bounds);
    outside += within_bound ? 0 : 1;
    const bool kept = g < kept_weight_rows;
    if (!kept && (within_bound || first_outside)) continue;
    weight_row row;
    row.where = f.where;
    row.sequence = f.sequence;
    row.tokens = f.tokens;
    row.observed = (*m.primary)[g];
    row.objective = objective;
    if (const rational* number = std::get_if<rational>(&row.observed); number && f.derivative != 0) {
      rational code = *number / f.derivative;
      if (row.objective != 0) {
        rational ratio = code / row.objective;
        row.ratio = std::move(ratio);
      }
      row.code = std::move(code);
    }
    row.within_bound = within_bound;
    if (!within_bound && !first_outside) {
      first_outside = g;
      worst = row;
    }
    if (kept) result.rows.push_back(std::move(row));
  }
  for (std::size_t g : varying_groups(facts, m, bounds))
    if (g < result.rows.size()) result.rows[g].witness_agrees = false;
  result.matches_objective = outside == 0 && (bounds.factor || bounds.explicit_tolerance);

  const std::string instead = correct_instead(update);
  const std::vector<candidate> candidates = candidates_of(update);
  // What an account that is no computation shows as its value: the observation itself, summed over the groups.
  observed_value observed_total = rational(0);
  {
    tree_sum total;
    for (const observed_value& v : *m.primary) {
      if (const rational* number = std::get_if<rational>(&v)) total.add(*number);
      else observed_total = v;
    }
    if (std::holds_alternative<rational>(observed_total)) observed_total = total.value();
  }
  // The exact candidates that fit, in their order. Many coincide on an update (on one rank, every one is
  // the objective): a table equal to one already judged, the objective's included, has its result without
  // reading the measurement again.
  struct judged_table {
    const lazy_table* table;
    bool fits;
  };
  std::vector<judged_table> judged;
  const bool objective_fits = outside == 0 && objective_defined;
  std::vector<const candidate*> fitting;
  std::vector<const candidate*> distinct_fitting;  // the first of each table
  for (const candidate& c : candidates) {
    const auto seen = std::find_if(judged.begin(), judged.end(),
                                   [&](const judged_table& j) { return same_table(*j.table, c.table, facts); });
    if (seen != judged.end()) {
      if (seen->fits) fitting.push_back(&c);
      continue;
    }
    const bool fits =
        same_table(objective_table, c.table, facts) ? objective_fits : table_fits(c.table, facts, m, bounds);
    judged.push_back({&c.table, fits});
    if (fits) fitting.push_back(&c), distinct_fitting.push_back(&c);
  }
  if (result.matches_objective) {
    result.detail = "all " + std::to_string(facts.size()) + " groups weigh what the objective gives them, each "
                    "within its bound" + std::string(m.witness ? ", uniformly inside each group (witness)" : "");
    for (const candidate* c : distinct_fitting) result.could_hide.push_back(explain(*c, facts, instead));
    return result;
  }
  if (!bounds.factor && !bounds.explicit_tolerance) {
    result.detail = "the dtype's unit roundoff times the roundings reaches 1: this dtype cannot resolve the "
                    "computation on this partition";
    return result;
  }
  result.detail =
      std::to_string(outside) + " of " + std::to_string(facts.size()) +
      " groups do not weigh what the "
      "objective gives them; the first, " +
      place_of(facts[*first_outside], update) + ", weighs " +
      (worst->code ? on_screen(*worst->code) + " (≈ " + approximate(*worst->code) + ")" : to_string(worst->observed)) +
      " where the objective gives " + on_screen(worst->objective) + " (≈ " + approximate(worst->objective) + ")";

  // Every explanation that fits, ranked: the named computations; then the objective times a factor named in
  // W and G; only when neither fits, a factor on any of them, then geometric weights.
  const candidate objective_candidate{"objective", objective_table, {}, "objective", {}};
  std::vector<candidate> scaled_fits;
  if (!fitting.empty()) {
    scaled_fits = factor_fits(objective_candidate, update, facts, m, bounds, anchor, true);
  } else {
    auto keep = [&](std::vector<candidate> fits) {
      for (candidate& c : fits) scaled_fits.push_back(std::move(c));
    };
    keep(factor_fits(objective_candidate, update, facts, m, bounds, anchor));
    for (const candidate& c : candidates) keep(factor_fits(c, update, facts, m, bounds, anchor));
    if (scaled_fits.empty()) {
      auto geometric = [&](const candidate& base) {
        if (std::optional<candidate> c = geometric_fit(base, update, facts, m, bounds, anchor))
          scaled_fits.push_back(std::move(*c));
      };
      geometric(objective_candidate);
      for (const candidate& c : candidates)
        if (c.name == "microbatch_mean") geometric(c);
    }
  }
  for (const candidate& c : scaled_fits) fitting.push_back(&c);
  result.diagnosis = explained(fitting, update, facts, instead);
  if (!result.diagnosis.empty()) return result;

  // What fits nothing. The witness may say why: weights that vary inside a group fit no table of one weight
  // per group.
  const std::vector<std::size_t> varying = varying_groups(facts, m, bounds);
  if (!varying.empty()) {
    std::string where;
    for (std::size_t i = 0; i < varying.size() && i < 4; ++i)
      where += (i ? "; " : "") + place_of(facts[varying[i]], update);
    if (varying.size() > 4) where += "; and " + std::to_string(varying.size() - 4) + " more";
    mistake_words words = table_mistake_words("varies_within_group", update);
    words.computed += ": " + where;
    result.diagnosis.push_back({"varies_within_group", observed_total, std::nullopt, words.computed, words.why_wrong,
                                instead, {}});
    return result;
  }
  mistake_words words = table_mistake_words("unexplained", update);
  // A factor of 0 (every component 0) names no divisor.
  if (const std::optional<rational> factor = suggested_factor(objective_table, facts, m, anchor);
      factor && *factor != 0) {
    if (table_fits(objective_table.scaled(*factor), facts, m, bounds))
      words.computed += "; every group weighs the objective's weight times ≈ " + approximate(*factor) +
                        ", as if the loss sum had been divided by ≈ " + approximate(units.total() / *factor) +
                        " instead of " + std::string(units.symbol(0)) + " = " + on_screen(units.total());
  }
  result.diagnosis.push_back(
      {"unexplained", observed_total, std::nullopt, words.computed, words.why_wrong, instead, {}});
  return result;
}

}  // namespace normcheck
