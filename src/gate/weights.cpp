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

// One group of the update, in group order: where it is and its tokens.
struct group_place {
  std::size_t index = 0;
  group_ref where;
  const group_stats* stats = nullptr;
  bool sequence = false;  // a declared sequence (else a whole microbatch)
};

// Calls `visit(place)` for each group of `update` in group order until it returns false; whether it never did.
template <typename Visit>
bool each_group(const partition& update, Visit&& visit) {
  std::size_t index = 0;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      const microbatch_stats& microbatch = rank.microbatches[m];
      const bool sequence = microbatch.sequences.has_value();
      for (std::size_t g = 0; g < microbatch.group_count(); ++g)
        if (!visit(group_place{index++, {r, m, g}, &microbatch.group(g), sequence})) return false;
    }
  }
  return true;
}

// The group at `index` in group order (index < update.group_count()).
group_place place_at(const partition& update, std::size_t index) {
  group_place found;
  each_group(update, [&](const group_place& p) {
    if (p.index != index) return true;
    found = p;
    return false;
  });
  return found;
}

// What a group's components are judged against: its derivative sums (at θ, with the probe's values and with
// the witness's values 1, 2, …, n) and the magnitudes their bounds scale with. Computed from the group's sums
// each time the group is read, never kept for every group: a dump of 2^17 groups would hold 55 MB of them.
struct group_facts {
  rational derivative;          // D = m·θ − Σw·y
  rational magnitude;           // m·|θ| + Σw·|y|
  rational witness_derivative;  // n·θ − n(n+1)/2
  rational witness_magnitude;   // n·|θ| + n(n+1)/2
};

// θ and |θ|, read once per judgement.
struct parameter {
  const rational& theta;
  rational size;
  bool zero;
  explicit parameter(const rational& value) : theta(value), size(abs(value)), zero(value == 0) {}
};

// Σ j for j = 1 … n: the witness's target sum over a group of n valid tokens.
rational positions_sum(std::uint64_t n) {
  if (n < (std::uint64_t{1} << 32)) return rational(n % 2 == 0 ? n / 2 * (n + 1) : (n + 1) / 2 * n);
  const rational count{n};
  rational sum = count * (count + 1) / 2;
  return sum;
}

// Without a witness the witness's sums are left 0: nothing reads them.
group_facts facts_of(const group_stats& group, const parameter& theta, bool with_witness) {
  group_facts f;
  if (theta.zero) {  // the probe's p = 0: D = −Σw·y, and the magnitude Σw·|y|
    f.derivative = group.weighted_target_sum();
    f.derivative.backend().negate();
    f.magnitude = group.weighted_target_abs_sum();
  } else {
    f.derivative = loss_gradient_sum(group, theta.theta);
    rational magnitude = theta.size * group.mass();
    magnitude += group.weighted_target_abs_sum();
    f.magnitude = std::move(magnitude);
  }
  if (!with_witness) return f;
  rational positions = positions_sum(group.valid_tokens);
  if (theta.zero) {
    f.witness_derivative = -positions;
    f.witness_magnitude = std::move(positions);
    return f;
  }
  const rational n{group.valid_tokens};
  rational witness = n * theta.theta;
  witness -= positions;
  f.witness_derivative = std::move(witness);
  rational witness_magnitude = n * theta.size;
  witness_magnitude += positions;
  f.witness_magnitude = std::move(witness_magnitude);
  return f;
}

// Rank 0's copy of one measurement, read in place.
struct measured {
  const observed_vector* primary = nullptr;
  const observed_vector* witness = nullptr;  // absent: no witness
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
bool group_fits(std::size_t g, const rational& weight, const group_facts& f, const measured& m,
                const group_bounds& bounds) {
  if (!component_fits((*m.primary)[g], weight, f.derivative, f.magnitude, bounds)) return false;
  return !m.witness || component_fits((*m.witness)[g], weight, f.witness_derivative, f.witness_magnitude, bounds);
}

// The verdict of the group judged last, for the next group that repeats it: the same valid tokens and sums, the
// same weight and the same components have the same verdict (a dump of one-token sequences repeats one group
// throughout), found without a rational operation.
class repeated_verdict {
public:
  bool fits(const group_place& p, const rational& weight, const parameter& theta, const measured& m,
            const group_bounds& bounds) {
    if (last_ && p.stats->same_tokens(*last_->stats) && weight == last_->weight &&
        m.primary->same_at(p.index, *m.primary, last_->index) &&
        (!m.witness || m.witness->same_at(p.index, *m.witness, last_->index)))
      return last_->fits;
    const bool fits = group_fits(p.index, weight, facts_of(*p.stats, theta, m.witness != nullptr), m, bounds);
    last_ = verdict{p.stats, p.index, weight, fits};
    return fits;
  }

private:
  struct verdict {
    const group_stats* stats;
    std::size_t index;
    rational weight;
    bool fits;
  };
  std::optional<verdict> last_;
};

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
      // × token_factor: 1/nₛ of its sequence's valid tokens (0 for a group without any); nothing to do for one.
      const std::uint64_t n = group_of(where).valid_tokens == 0 ? 0 : units_.sequence_tokens(where);
      if (n == 0) weight = 0;
      else if (n != 1) weight /= n;
    }
    if (ratio_) weight *= power(*ratio_, units_.update().ranks[where.rank].microbatches.size() - 1 - where.microbatch);
    return weight;
  }

  /// Whether every group of a unit weighs the unit's coefficient (no factor of its own).
  bool uniform_in_units() const { return units_.objective() != objective_kind::sequence_mean && !ratio_; }
  /// Whether the group at `where` weighs its unit's coefficient: the table is uniform in its units, or the
  /// group's own factor is 1 (a sequence of one token under the sequence mean; a slice's factor is its whole
  /// sequence's).
  bool weighs_coefficient(const group_ref& where) const {
    return uniform_in_units() ||
           (!ratio_ && group_of(where).valid_tokens > 0 && units_.sequence_tokens(where) == 1);
  }
  /// Whether every group of a microbatch weighs the same: uniform in units no finer than a microbatch.
  bool uniform_in_microbatches() const { return uniform_in_units() && normalization_->level != scope::group; }

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

// What a judgement reads of the update: the groups, θ, the bounds.
struct judged_update {
  const partition& update;
  parameter theta;
  group_bounds bounds;
};

// Whether a table accounts for every component (each within its bound), read until its first difference.
bool table_fits(const lazy_table& table, const judged_update& u, const measured& m) {
  repeated_verdict verdicts;
  return each_group(u.update, [&](const group_place& p) {
    const std::optional<rational> w = table.at(p.where);
    return w && verdicts.fits(p, *w, u.theta, m, u.bounds);
  });
}

// Whether two tables give every group of `update` the same weight (read until their first difference):
// candidates that coincide on this update are named once, without holding either table.
bool same_table(const lazy_table& a, const lazy_table& b, const partition& update) {
  if (a.uniform_in_microbatches() && b.uniform_in_microbatches()) {  // one comparison a microbatch
    for (std::size_t r = 0; r < update.ranks.size(); ++r)
      for (std::size_t m = 0; m < update.ranks[r].microbatches.size(); ++m)
        if (a.unit_coefficient({r, m, 0}) != b.unit_coefficient({r, m, 0})) return false;
    return true;
  }
  return each_group(update, [&](const group_place& p) {
    if (a.weighs_coefficient(p.where) && b.weighs_coefficient(p.where))  // compared in place, not copied
      return a.unit_coefficient(p.where) == b.unit_coefficient(p.where);
    return a.at(p.where) == b.at(p.where);
  });
}

// A factor in the update's own terms, W^w · G^g · CP^s · constant (CP the sequence dimensions' size), so
// that it can be read on another update.
struct factor_form {
  int w = 0;
  int g = 0;
  rational constant{1};
  int s = 0;
  int t = 0;  // TP^t, TP the replica dimensions' size
  int k = 0;  // weight^k, the loss's weight in the update's objective (an auxiliary term's)
  std::optional<std::size_t> sibling{};  // × this loss's count / the count of the sibling loss it indexes
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
  // The table as a class of equal tables of this update times a factor: candidates with the same class and
  // factor have the same table, and their totals are the class's times the factor (absent: unknown).
  std::optional<std::pair<std::size_t, rational>> same_as;
};

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
std::optional<std::size_t> anchor_group(const judged_update& u, const measured& m) {
  std::optional<std::size_t> best;
  rational largest;
  const group_stats* last = nullptr;  // the group whose size was computed last
  each_group(u.update, [&](const group_place& p) {
    if (!m.primary->is_finite(p.index)) return true;
    if (last && p.stats->same_tokens(*last)) return true;  // as large as that one, which was no larger
    last = p.stats;
    rational size = abs(loss_gradient_sum(*p.stats, u.theta.theta));
    if (size > largest) {
      largest = std::move(size);
      best = p.index;
    }
    return true;
  });
  return best;
}

// The group most precisely measured, found once a fit asks for it.
class anchor {
public:
  anchor(const judged_update& u, const measured& m) : u_(u), m_(m) {}
  const std::optional<std::size_t>& group() const {
    if (!found_) found_ = anchor_group(u_, m_);
    return *found_;
  }

private:
  const judged_update& u_;
  const measured& m_;
  mutable std::optional<std::optional<std::size_t>> found_;
};

// The factor λ that the observation suggests for `table` (observed / predicted at the anchor group). Where the
// table gives the anchor no weight (a computation that leaves its microbatch out, as sequence_share does one that
// declares no sequences), it is read at the group the table predicts most of instead.
std::optional<rational> suggested_factor(const lazy_table& table, const judged_update& u, const measured& m,
                                         const anchor& at) {
  if (!at.group()) return std::nullopt;
  const group_place p = place_at(u.update, *at.group());
  const std::optional<rational> w = table.at(p.where);
  if (!w) return std::nullopt;
  std::optional<std::pair<std::size_t, rational>> read;  // the group and what the table predicts there
  if (*w != 0) {
    read.emplace(p.index, *w * loss_gradient_sum(*p.stats, u.theta.theta));
  } else {
    rational largest;
    each_group(u.update, [&](const group_place& q) {
      const std::optional<rational> weight = table.at(q.where);
      if (!weight || *weight == 0 || !m.primary->is_finite(q.index)) return true;
      rational predicted = *weight * loss_gradient_sum(*q.stats, u.theta.theta);
      if (abs(predicted) > largest) {
        largest = abs(predicted);
        read.emplace(q.index, std::move(predicted));
      }
      return true;
    });
  }
  if (!read || read->second == 0) return std::nullopt;
  rational factor = std::get<rational>((*m.primary)[read->first]) / read->second;
  return factor;
}

// The names of a factor in the update's own terms: "×W", "/G", "×W·G", "×4", "/3", "×2/3"; whether it is a
// ratio G/k of accumulation steps (a short or another window); and its form, to read it on another update.
struct factor_label {
  std::string text;
  std::optional<std::uint64_t> window;  // k when the factor is G/k with k ≠ G
  factor_form form;
  bool named = false;  // a form in W and G, not a window or a bare number
  bool declared = false;  // a short window of the declared nominal steps: its precondition holds, so no free factor
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
  for (int i = 0; i < std::abs(form.k); ++i) {
    if (form.k > 0) value *= update.loss_weight;
    else value /= update.loss_weight;
  }
  if (form.sibling) {
    if (*form.sibling >= update.siblings.size() || update.siblings[*form.sibling].total == 0) return std::nullopt;
    value *= objective_units(update, update.objective).total() / update.siblings[*form.sibling].total;
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

// k where `factor` is G/k with k a whole number of steps other than G (at most 64), else nullopt.
std::optional<std::uint64_t> window_ratio(const rational& factor, std::uint64_t g) {
  if (g == 0 || factor <= 0) return std::nullopt;
  const rational k = rational(g) / factor;
  if (denominator(k) != 1 || k == rational(g) || k > 64) return std::nullopt;
  return static_cast<std::uint64_t>(numerator(k));
}

// k where `factor` names a window of the update: G/k with k < G (another window), or k the nominal accumulation
// steps the document declares, above G (a short window: every rank holds the same G < k microbatches).
std::optional<std::uint64_t> window_steps(const rational& factor, const partition& update) {
  const std::uint64_t g = update.common_accumulation();
  const std::optional<std::uint64_t> k = window_ratio(factor, g);
  if (!k || (*k > g && *k != update.accumulation_steps)) return std::nullopt;
  return k;
}

// Every name of `factor` on `update`: each form in W and G it equals (at G = W, "/W" and "/G" both), and a
// short window of the declared steps beside them; else another window G/k, else the number itself.
std::vector<factor_label> labels_of(const rational& factor, const partition& update) {
  const std::uint64_t g = update.common_accumulation();
  struct symbolic {
    int w;
    int g;
    std::string text;
    int s = 0;
    int t = 0;
    int k = 0;
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
  // Every rank of the mesh, replicas included (a world size that counts them), where that is a name of its own.
  if (const std::string whole = whole_mesh_factor_name(update); !whole.empty() && whole != tp &&
                                                                 whole != "(" + cp + "·" + tp + ")") {
    forms.push_back({1, 0, "×" + whole, 0, 1});
    forms.push_back({-1, 0, "/" + whole, 0, -1});
  }
  if (update.loss_weight != 1) {  // an auxiliary term's weight left out, or applied twice
    forms.push_back({0, 0, "/weight", 0, 0, -1});
    forms.push_back({0, 0, "×weight", 0, 0, 1});
  }
  std::vector<factor_label> labels;
  for (const symbolic& s : forms) {
    const factor_form form{s.w, s.g, rational(1), s.s, s.t, s.k};
    if (value_on(form, update) == factor) labels.push_back({s.text, std::nullopt, form, true});
  }
  // G/k of the accumulation steps: a short window where k is the nominal number of steps the document declares
  // (a whole window of fewer microbatches divided by it), given beside any name in W and G; a count over another
  // window where k < G, only where nothing else names the factor.
  if (const std::optional<std::uint64_t> k = window_steps(factor, update)) {
    factor_label window{"×G/" + std::to_string(*k), *k, {0, 1, rational(1) / *k}, false};
    if (*k > g) {
      window.declared = true;
      labels.push_back(std::move(window));
    } else if (labels.empty() && g > 1) {
      return {std::move(window)};
    }
  }
  if (!labels.empty()) return labels;
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

// Every candidate whose table the gate compares with the observation, exact ones first: another loss's count
// in place of this one's, the report's normalizations under the declared objective (but the correct one), the
// diagnosed ones, and the report's under every other objective the update can be counted in.
std::vector<candidate> candidates_of(const partition& update) {
  std::vector<candidate> out;
  const std::string_view correct = update.reducer == reducer_kind::mean ? "scaled_sum" : "global_share";
  const bool accumulates = std::any_of(update.ranks.begin(), update.ranks.end(),
                                       [](const rank_stats& r) { return r.microbatches.size() > 1; });
  auto add = [&](std::string name, objective_kind objective, const normalization& n) {
    mistake_words words = table_mistake_words(name, update);
    std::string base = name;
    out.push_back(
        {std::move(name), lazy_table(update, objective, n), std::move(words), std::move(base), {}, false, {}});
  };
  // First, another loss's count in place of this one's (a term divided by the main loss's count, the main loss
  // by a term's): the objective's table times this loss's count over the other's.
  const rational own = objective_units(update, update.objective).total();
  for (std::size_t i = 0; i < update.siblings.size(); ++i) {
    const sibling_loss& other = update.siblings[i];
    if (other.same_count || other.total == 0) continue;
    std::string name = sibling_count_name(other);
    mistake_words words = table_mistake_words(name, update);
    factor_form form;
    form.sibling = i;
    out.push_back(
        {std::move(name),
         lazy_table(update, update.objective, normalization_of(strategy::global_mean)).scaled(own / other.total),
         std::move(words), "objective", std::move(form), false, {}});
  }
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
std::optional<candidate> geometric_fit(const candidate& base, const judged_update& u, const measured& m,
                                       const anchor& at) {
  const partition& update = u.update;
  std::optional<std::size_t> rank;
  for (std::size_t r = 0; r < update.ranks.size() && !rank; ++r)
    if (update.ranks[r].microbatches.size() >= 3) rank = r;
  if (!rank) return std::nullopt;
  // observed / base for the first group of each of that rank's microbatches, in order.
  std::vector<std::optional<rational>> ratios;
  each_group(update, [&](const group_place& p) {
    if (p.where.rank != *rank || p.where.group != 0) return true;
    const observed_value value = (*m.primary)[p.index];
    const rational* number = std::get_if<rational>(&value);
    const std::optional<rational> w = base.table.at(p.where);
    const rational derivative = loss_gradient_sum(*p.stats, u.theta.theta);
    if (!number || !w || *w == 0 || derivative == 0) {
      ratios.emplace_back();
      return true;
    }
    rational ratio = *number / (*w * derivative);
    ratios.emplace_back(std::move(ratio));
    return true;
  });
  std::optional<rational> a;
  for (std::size_t i = ratios.size(); i-- > 1;)
    if (ratios[i] && ratios[i - 1] && *ratios[i] != 0) {
      a = nearest_simple(*ratios[i - 1] / *ratios[i], 64);
      break;
    }
  if (!a || *a == 1 || *a <= 0) return std::nullopt;
  const lazy_table weighted = base.table.geometric(*a);
  const std::optional<rational> factor = suggested_factor(weighted, u, m, at);
  if (!factor) return std::nullopt;
  const rational lambda = nearest_simple(*factor, 64);
  if (lambda <= 0) return std::nullopt;
  lazy_table fitted = weighted.scaled(lambda);
  if (!table_fits(fitted, u, m)) return std::nullopt;
  mistake_words words = table_mistake_words("geometric", update);
  words.computed += " (each microbatch weighs " + to_string(*a) + " times the next one, relative to " + base.name +
                    (lambda == 1 ? "" : ", times " + to_string(lambda)) + ")";
  return candidate{"geometric", std::move(fitted), std::move(words), {}, {}, true, {}};
}

// What a factor that names nothing may be, where it has the shape of a named computation whose precondition the
// document does not meet, and what would let the gate name it: G/k with k above G (a short window, without the
// declared nominal steps k), and on the objective N/(N + k) (the labels counted before the shift, without the
// declared rows, at most one a valid token). Empty otherwise.
std::string unnamed_reading(const rational& factor, const candidate& base, const partition& update) {
  std::string reading;
  const std::uint64_t g = update.common_accumulation();
  if (const std::optional<std::uint64_t> k = window_ratio(factor, g); k && *k > g && g > 1)
    reading += "; it is G/" + std::to_string(*k) + " with G = " + std::to_string(g) + ": the window's " +
               std::to_string(g) + " microbatches divided by " + std::to_string(*k) +
               ", as a short last window divided by the nominal accumulation steps would be, but the document " +
               (update.accumulation_steps == 0
                    ? std::string("declares no accumulation_steps")
                    : "declares accumulation_steps = " + std::to_string(update.accumulation_steps)) +
               ", so it is not named short_window";
  const normalization* shifted = find_normalization("count_before_shift");
  if (base.name == "objective" && update.objective == objective_kind::token_mean && factor > 0 && factor < 1 &&
      !shifted->coefficient(objective_units(update, update.objective), {})) {  // undefined: rows not declared
    const rational n{update.valid_tokens()};
    const rational extra = n / factor - n;  // the count the code divided by, N + extra: fewer rows than tokens
    const rational count = n + extra;
    if (denominator(extra) == 1 && extra < n)
      reading += "; it is N/(N + " + to_string(extra) + ") with N = " + to_string(n) + ": the count " +
                 to_string(count) + " holds " + to_string(extra) +
                 " labels more than the valid tokens, as the labels counted before the shift would with " +
                 to_string(extra) + " rows, but the document declares no sequences (rows) in its microbatches, so "
                 "it is not named count_before_shift";
  }
  return reading;
}

// `base` times the simplest factor the observation suggests, if that accounts for every component: one
// candidate for each name of the factor (`named_only`: only names in W and G, not windows or bare numbers).
// `tried` holds whether that fits where a table equal to base's was tried already (the factor is then the same).
std::vector<candidate> factor_fits(const candidate& base, const judged_update& u, const measured& m, const anchor& at,
                                   std::optional<bool>& tried, bool named_only = false) {
  const partition& update = u.update;
  const std::optional<rational> suggested = suggested_factor(base.table, u, m, at);
  // A negative factor names a mistake only where the loss's weight is negative (left out, or applied twice).
  const bool negative = update.loss_weight < 0;
  if (!suggested || *suggested == 0 || (*suggested < 0 && !negative)) return {};
  const rational factor = nearest_simple(*suggested, 64);
  if (factor == 0 || (factor < 0 && !negative) || factor == 1 || abs(numerator(factor)) > 4096) return {};
  const std::vector<factor_label> labels = labels_of(factor, update);
  if (named_only && !labels.front().named && !labels.front().declared) return {};
  lazy_table table = base.table.scaled(factor);
  if (!tried) tried = table_fits(table, u, m);
  if (!*tried) return {};
  std::vector<candidate> out;
  for (const factor_label& label : labels) {
    std::string name = base.name + label.text;
    mistake_words words;
    if (label.window) {
      const std::uint64_t g = update.common_accumulation();
      name = *label.window > g ? "short_window" : "other_window";
      words = table_mistake_words(name, update);
      words.computed += " (" + base.name + " times G/" + std::to_string(*label.window) + ": divided by " +
                        (label.declared ? "the declared accumulation_steps = " : std::string()) +
                        std::to_string(*label.window) + " where the window accumulated G = " + std::to_string(g) + ")";
    } else if (base.name == "objective") {
      words = table_mistake_words(name, update);
    } else {
      const mistake_words scaling = factor_words(label.text, update);
      words = {base.words.computed + ", and the result " + scaling.computed,
               base.words.why_wrong + "; and it is " + scaling.computed + ": " + scaling.why_wrong};
    }
    if (!label.named && !label.window) words.computed += unnamed_reading(factor, base, update);
    factor_form form = label.form;
    form.w += base.factor.w;
    form.g += base.factor.g;
    form.s += base.factor.s;
    form.t += base.factor.t;
    form.k += base.factor.k;
    form.sibling = base.factor.sibling;
    form.constant *= base.factor.constant;
    std::optional<std::pair<std::size_t, rational>> same_as;
    if (base.same_as) same_as.emplace(base.same_as->first, base.same_as->second * factor);
    const bool unnamed = !label.named && !label.declared;
    out.push_back({std::move(name), table, std::move(words), base.base, std::move(form), unnamed, std::move(same_as)});
  }
  return out;
}

// Σ_g weight_g·D_g over every group: what the computation a table describes yields on the update. A run of
// groups with the same weight and the same sums adds one term times its length.
rational table_total(const lazy_table& table, const judged_update& u) {
  tree_sum total;
  const group_stats* run = nullptr;
  rational weight;
  std::uint64_t length = 0;
  auto add_run = [&] {
    if (length == 0) return;
    rational term = weight * loss_gradient_sum(*run, u.theta.theta);
    if (length > 1) term *= length;
    total.add(std::move(term));
  };
  const rational zero;
  each_group(u.update, [&](const group_place& p) {
    if (run && p.stats->same_tokens(*run) && table.weighs_coefficient(p.where)) {
      const std::optional<rational>& c = table.unit_coefficient(p.where);
      if ((c ? *c : zero) == weight) {
        ++length;
        return true;
      }
    }
    add_run();
    run = p.stats;
    weight = table.at(p.where).value_or(rational(0));
    length = 1;
    return true;
  });
  add_run();
  return total.value();
}

// The groups among the first `limit` whose witness shows weights that vary inside them: the witness is not
// the measured weight times the witness's derivative sum. Each group is judged with its own measured weight.
std::vector<std::size_t> varying_groups(const judged_update& u, const measured& m, std::size_t limit) {
  std::vector<std::size_t> varying;
  if (!m.witness) return varying;
  each_group(u.update, [&](const group_place& p) {
    if (p.index >= limit) return false;
    const std::size_t g = p.index;
    if (p.stats->valid_tokens < 2 || !m.primary->is_finite(g) || !m.witness->is_finite(g)) return true;
    const group_facts f = facts_of(*p.stats, u.theta, true);
    if (f.derivative == 0) return true;
    const rational primary = std::get<rational>((*m.primary)[g]);
    const rational witness = std::get<rational>((*m.witness)[g]);
    const rational weight = primary / f.derivative;
    const std::optional<rational> primary_allowed = allowance(weight, primary, f.magnitude, u.bounds);
    const std::optional<rational> witness_allowed =
        allowance(weight, weight * f.witness_derivative, f.witness_magnitude, u.bounds);
    if (!primary_allowed || !witness_allowed) return true;
    // The measured weight is uncertain by primary_allowed/|D|, which the witness carries times |D'|.
    rational allowed = *witness_allowed + *primary_allowed * abs(f.witness_derivative) / abs(f.derivative);
    const rational distance = abs(witness - weight * f.witness_derivative);
    if (distance > allowed) varying.push_back(g);
    return true;
  });
  return varying;
}

std::string place_of(const group_place& p, const partition& update) {
  return "rank " + std::to_string(update.listed_rank(p.where.rank)) + ", microbatch " +
         std::to_string(p.where.microbatch) + (p.sequence ? ", sequence " + std::to_string(p.where.group) : "");
}

// Group p's row of the weight table, but for its verdicts: its component, the weight the code gave it
// (observed / D) and the objective's.
weight_row row_of(const group_place& p, const rational& derivative, const observed_vector& primary,
                  const rational& objective) {
  weight_row row;
  row.where = p.where;
  row.sequence = p.sequence;
  row.tokens = p.stats->valid_tokens;
  row.observed = primary[p.index];
  row.objective = objective;
  if (const rational* number = std::get_if<rational>(&row.observed); number && derivative != 0) {
    rational code = *number / derivative;
    if (row.objective != 0) {
      rational ratio = code / row.objective;
      row.ratio = std::move(ratio);
    }
    row.code = std::move(code);
  }
  return row;
}

// The sum of a measurement's finite components, or its last NaN or infinity: what an account that is no
// computation shows as its value.
observed_value observed_total(const observed_vector& components) {
  for (std::size_t g = components.size(); g-- > 0;)
    if (!components.is_finite(g)) return components[g];
  return components.finite_sum();
}

}  // namespace

std::vector<weight_candidate> weight_candidates(const partition& update) {
  std::vector<weight_candidate> out;
  for (candidate& c : candidates_of(update)) {
    // The whole table, group by group; a candidate undefined somewhere is no computation of this update.
    std::vector<rational> weights;
    const bool defined = each_group(update, [&](const group_place& p) {
      std::optional<rational> w = c.table.at(p.where);
      if (!w) return false;
      weights.push_back(std::move(*w));
      return true;
    });
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

// Whether `c` is the main loss's count in a term's own words, where the two land on one table: a multi-token-
// prediction term drops one label per row, so its labels before that shift, or its positions with the dropped
// labels as padding, make the main loss's count.
bool main_count_in_other_words(const candidate& kept, const candidate& c) {
  return kept.name == "main_count" && (c.name == "count_before_shift" || c.name == "count_padding");
}

// What every measurement of one update shares: the objective's table, the candidates, which of their tables
// coincide (on one rank every candidate is the objective), and what each candidate sums to, found once.
struct shared_judgement {
  judged_update u;
  lazy_table objective_table;
  std::vector<candidate> candidates;
  std::vector<std::size_t> first_alike;  // per candidate: the first candidate with its table (itself for none)
  std::vector<bool> objective_alike;     // per candidate: its table is the objective's
  std::string instead;
  mutable std::vector<std::optional<rational>> totals;  // per class of equal tables: table_total, once asked

  shared_judgement(const partition& update, const group_bounds& bounds)
      : u{update, parameter(update.theta), bounds},
        objective_table(update, update.objective, normalization_of(strategy::global_mean)),
        candidates(candidates_of(update)),
        instead(correct_instead(update)),
        totals(candidates.size() + 1) {
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      std::size_t first = c;
      for (std::size_t k = 0; k < c && first == c; ++k)
        if (first_alike[k] == k && same_table(candidates[k].table, candidates[c].table, update)) first = k;
      first_alike.push_back(first);
      objective_alike.push_back(first == c ? same_table(objective_table, candidates[c].table, update)
                                           : objective_alike[first]);
      candidates[c].same_as.emplace(table_class(c), rational(1));
    }
  }

  // Candidate c's class of equal tables: the first candidate with its table, or candidates.size() for the
  // objective's.
  std::size_t table_class(std::size_t c) const { return objective_alike[c] ? candidates.size() : first_alike[c]; }

  // The explanation `c` gives: its name and words, and what it yields on this update (Σ weight·D, once per
  // class of equal tables).
  explanation explain(const candidate& c) const {
    rational total;
    if (c.same_as) {
      const std::size_t k = c.same_as->first;
      if (!totals[k]) totals[k] = table_total(k < candidates.size() ? candidates[k].table : objective_table, u);
      total = *totals[k] * c.same_as->second;
    } else {
      total = table_total(c.table, u);
    }
    return {c.name, std::move(total), std::nullopt, c.words.computed, c.words.why_wrong, instead, {}};
  }

  std::vector<explanation> explained(const std::vector<const candidate*>& fits) const;
};

// The explanations of a failure, in rank order. A fit that gives every group of this update and of every
// nearby update the weights an earlier fit gives is that computation in other words, and is left out, as is
// a free factor or a repeated name on an earlier fit's table; one that agrees with an earlier fit on this
// update only is kept, and both name the change that tells them apart.
std::vector<explanation> shared_judgement::explained(const std::vector<const candidate*>& fits) const {
  const partition& update = u.update;
  std::vector<explanation> out;
  std::vector<const candidate*> kept;
  // Made once, and only when two fits agree here; each held in place, since its tables point into it.
  std::vector<std::unique_ptr<nearby_tables>> nearby;
  bool made = false;
  for (const candidate* c : fits) {
    bool same_computation = false;
    std::vector<std::pair<std::size_t, std::string>> alike;
    for (std::size_t k = 0; k < kept.size() && !same_computation; ++k) {
      const bool known_same = kept[k]->same_as && c->same_as && *kept[k]->same_as == *c->same_as;
      if (!known_same && !same_table(kept[k]->table, c->table, update)) continue;
      // A free factor that lands on an earlier fit's table, the same name again, or the main loss's count in a
      // term's own words adds no explanation.
      if (c->free || c->name == kept[k]->name || main_count_in_other_words(*kept[k], *c)) {
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
        } else if (!same_table(*a, *b, there->nearby.update)) {
          change = there->nearby.change;
          break;
        }
      }
      if (change) alike.emplace_back(k, std::move(*change));
      else if (comparable) same_computation = true;
    }
    if (same_computation) continue;
    explanation e = explain(*c);
    for (const auto& [k, change] : alike) {
      e.alike.push_back({kept[k]->name, change});
      out[k].alike.push_back({c->name, change});
    }
    kept.push_back(c);
    out.push_back(std::move(e));
  }
  return out;
}

// Rank 0's copy of `measurement` judged against the update's objective, and fitted when it differs.
group_judgement judged(const shared_judgement& s, const group_measurement& measurement) {
  const judged_update& u = s.u;
  const partition& update = u.update;
  const group_bounds& bounds = u.bounds;
  group_judgement result;
  // Rank 0's copy, read in place: a component becomes a rational only while its group is judged.
  const measured m{&measurement.per_rank.front(), measurement.witness.empty() ? nullptr : &measurement.witness.front()};
  const anchor at(u, m);

  // Every group is judged; of the first kept_weight_rows of them the verdicts are kept for the reports' rows,
  // and the first one outside its bound is described in the detail.
  std::size_t outside = 0;
  std::optional<group_place> first_outside;
  std::optional<weight_row> worst;
  bool objective_defined = true;
  result.groups = update.group_count();
  const std::size_t kept = std::min(result.groups, kept_weight_rows);
  result.row_within_bound.reserve(kept);
  repeated_verdict verdicts;
  each_group(update, [&](const group_place& p) {
    const std::optional<rational> defined = s.objective_table.at(p.where);
    objective_defined = objective_defined && defined.has_value();
    const rational objective = defined.value_or(rational(0));
    const bool within_bound = verdicts.fits(p, objective, u.theta, m, bounds);
    outside += within_bound ? 0 : 1;
    if (p.index < kept) result.row_within_bound.push_back(within_bound);
    if (!within_bound && !first_outside) {
      first_outside = p;
      worst = row_of(p, loss_gradient_sum(*p.stats, update.theta), *m.primary, objective);
    }
    return true;
  });
  result.row_witness_agrees.assign(kept, true);
  for (std::size_t g : varying_groups(u, m, kept)) result.row_witness_agrees[g] = false;
  result.matches_objective = outside == 0 && (bounds.factor || bounds.explicit_tolerance);

  // The exact candidates that fit, in their order. Many coincide on an update (on one rank, every one is
  // the objective): a table equal to one judged before it, or to the objective's, has that result without
  // reading the measurement again.
  const std::vector<candidate>& candidates = s.candidates;
  const bool objective_fits = outside == 0 && objective_defined;
  std::vector<bool> fits(candidates.size(), false);
  std::vector<const candidate*> fitting;
  std::vector<const candidate*> distinct_fitting;  // the first of each table
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const std::size_t first = s.first_alike[c];
    if (first != c) {
      fits[c] = fits[first];
      if (fits[c]) fitting.push_back(&candidates[c]);
      continue;
    }
    fits[c] = s.objective_alike[c] ? objective_fits : table_fits(candidates[c].table, u, m);
    if (fits[c]) fitting.push_back(&candidates[c]), distinct_fitting.push_back(&candidates[c]);
  }
  if (result.matches_objective) {
    result.detail = "all " + std::to_string(result.groups) + " groups weigh what the objective gives them, each "
                    "within its bound" + std::string(m.witness ? ", uniformly inside each group (witness)" : "");
    for (const candidate* c : distinct_fitting) result.could_hide.push_back(s.explain(*c));
    return result;
  }
  if (!bounds.factor && !bounds.explicit_tolerance) {
    result.detail = "the dtype's unit roundoff times the roundings reaches 1: this dtype cannot resolve the "
                    "computation on this partition";
    return result;
  }
  result.detail =
      std::to_string(outside) + " of " + std::to_string(result.groups) +
      " groups do not weigh what the "
      "objective gives them; the first, " +
      place_of(*first_outside, update) + ", weighs " +
      (worst->code ? on_screen(*worst->code) + " (≈ " + approximate(*worst->code) + ")" : to_string(worst->observed)) +
      " where the objective gives " + on_screen(worst->objective) + " (≈ " + approximate(worst->objective) + ")";

  // Every explanation that fits, ranked: the named computations; then the objective times a factor named in
  // W and G; only when neither fits, a factor on any of them, then geometric weights.
  const candidate objective_candidate{
      "objective", s.objective_table, {}, "objective", {}, false, std::make_pair(candidates.size(), rational(1))};
  std::vector<candidate> scaled_fits;
  // Whether a table times its suggested factor fits, per distinct table (the objective's last): candidates that
  // coincide with one tried before have its answer.
  std::vector<std::optional<bool>> scaled_fit(candidates.size() + 1);
  auto tried = [&](std::size_t c) -> std::optional<bool>& { return scaled_fit[s.table_class(c)]; };
  if (!fitting.empty()) {
    scaled_fits = factor_fits(objective_candidate, u, m, at, scaled_fit.back(), true);
  } else {
    auto keep = [&](std::vector<candidate> found) {
      for (candidate& c : found) scaled_fits.push_back(std::move(c));
    };
    keep(factor_fits(objective_candidate, u, m, at, scaled_fit.back()));
    for (std::size_t c = 0; c < candidates.size(); ++c) keep(factor_fits(candidates[c], u, m, at, tried(c)));
    if (scaled_fits.empty()) {
      auto geometric = [&](const candidate& base) {
        if (std::optional<candidate> c = geometric_fit(base, u, m, at)) scaled_fits.push_back(std::move(*c));
      };
      geometric(objective_candidate);
      for (const candidate& c : candidates)
        if (c.name == "microbatch_mean") geometric(c);
    }
  }
  for (const candidate& c : scaled_fits) fitting.push_back(&c);
  result.diagnosis = s.explained(fitting);
  if (!result.diagnosis.empty()) return result;

  // What fits nothing. The witness may say why: weights that vary inside a group fit no table of one weight
  // per group.
  const std::vector<std::size_t> varying = varying_groups(u, m, result.groups);
  if (!varying.empty()) {
    std::string where;
    for (std::size_t i = 0; i < varying.size() && i < 4; ++i)
      where += (i ? "; " : "") + place_of(place_at(update, varying[i]), update);
    if (varying.size() > 4) where += "; and " + std::to_string(varying.size() - 4) + " more";
    mistake_words words = table_mistake_words("varies_within_group", update);
    words.computed += ": " + where;
    result.diagnosis.push_back({"varies_within_group", observed_total(*m.primary), std::nullopt, words.computed,
                                words.why_wrong, s.instead, {}});
    return result;
  }
  mistake_words words = table_mistake_words("unexplained", update);
  // A factor of 0 (every component 0) names no divisor.
  if (const std::optional<rational> factor = suggested_factor(s.objective_table, u, m, at); factor && *factor != 0) {
    if (table_fits(s.objective_table.scaled(*factor), u, m)) {
      const objective_units units(update, update.objective);
      words.computed += "; every group weighs the objective's weight times ≈ " + approximate(*factor) +
                        ", as if the loss sum had been divided by ≈ " + approximate(units.total() / *factor) +
                        " instead of " + std::string(units.symbol(0)) + " = " + on_screen(units.total());
    }
  }
  result.diagnosis.push_back(
      {"unexplained", observed_total(*m.primary), std::nullopt, words.computed, words.why_wrong, s.instead, {}});
  return result;
}

}  // namespace

std::vector<group_judgement> judge_groups(const partition& update,
                                          const std::vector<const group_measurement*>& measurements,
                                          const group_bounds& bounds) {
  const shared_judgement s(update, bounds);
  std::vector<group_judgement> out;
  out.reserve(measurements.size());
  for (const group_measurement* measurement : measurements) out.push_back(judged(s, *measurement));
  return out;
}

std::vector<weight_row> weight_rows(const partition& update, const group_measurement& measurement,
                                    const group_judgement& judgement, std::size_t count) {
  std::vector<weight_row> rows;
  count = std::min(count, judgement.kept_rows());
  rows.reserve(count);
  const lazy_table objective_table(update, update.objective, normalization_of(strategy::global_mean));
  each_group(update, [&](const group_place& p) {
    if (p.index >= count) return false;
    weight_row row = row_of(p, loss_gradient_sum(*p.stats, update.theta), measurement.per_rank.front(),
                            objective_table.at(p.where).value_or(rational(0)));
    row.within_bound = judgement.row_within_bound[p.index];
    row.witness_agrees = judgement.row_witness_agrees[p.index];
    rows.push_back(std::move(row));
    return true;
  });
  return rows;
}

}  // namespace normcheck
