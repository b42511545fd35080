// Laws of auxiliary loss terms: a term weighted as its objective says is never a failure, whatever the
// layout of its tokens and the main loss's; each way code gets a term's (or the main loss's) normalization
// wrong is caught and named; the update passes only when every loss does. The weights are reckoned here
// from explicit tokens, not by normcheck's strategy table. Each law keeps a planted wrong implementation it
// catches.

#include "normcheck/core/normalization.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/gate/mistakes.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace normcheck;

// A loss's valid tokens: rank → microbatch → targets (each microbatch one group).
using tokens = std::vector<std::vector<std::vector<int>>>;

// The device mesh a layout is on: none, dp 2 × cp 2, or dp 2 × tp 2 (the tokens listed are the first replicas').
enum class mesh_kind { none, dp_cp, dp_tp };

// The update: the mesh, θ, the main loss's tokens, two terms' and their weights.
struct layout {
  mesh_kind mesh = mesh_kind::none;
  rational theta;
  tokens main;
  std::vector<tokens> terms;
  std::vector<rational> weights;
};

std::size_t world(const layout& l) { return l.main.size(); }

// Every rank of the mesh, replicas included: each holds a copy of the measurement.
std::size_t listed(const layout& l) { return world(l) * (l.mesh == mesh_kind::dp_tp ? 2 : 1); }

std::uint64_t count(const tokens& t) {
  std::uint64_t n = 0;
  for (const auto& rank : t)
    for (const auto& microbatch : rank) n += microbatch.size();
  return n;
}

// Tokens shaped like `shape` (ranks, microbatches), each microbatch 0 to 4 targets (at least `least`), and some
// microbatch two or more: where every group holds one token, its count plus one per row is twice its count on
// every update one change away, and two computations that differ only there are one to the gate.
rc::Gen<tokens> tokens_like(std::size_t ranks, std::size_t microbatches, std::size_t least) {
  return rc::gen::exec([=] {
    tokens t(ranks, std::vector<std::vector<int>>(microbatches));
    for (auto& rank : t)
      for (auto& microbatch : rank)
        microbatch = *rc::gen::container<std::vector<int>>(*rc::gen::inRange<std::size_t>(least, 5),
                                                           rc::gen::inRange(-6, 7));
    const auto most = std::max_element(t.front().begin(), t.front().end(),
                                       [](const auto& a, const auto& b) { return a.size() < b.size(); });
    while (most->size() < 2) most->push_back(*rc::gen::inRange(-6, 7));
    return t;
  });
}

// A layout; `full`: every microbatch of every loss holds a token (a per-microbatch mean is then defined).
rc::Gen<layout> layouts(bool full) {
  return rc::gen::exec([=] {
    layout l;
    l.mesh = *rc::gen::element(mesh_kind::none, mesh_kind::dp_cp, mesh_kind::dp_tp);
    const std::size_t ranks = l.mesh == mesh_kind::dp_cp   ? 4
                              : l.mesh == mesh_kind::dp_tp ? 2
                                                           : *rc::gen::inRange<std::size_t>(1, 4);
    const std::size_t g = *rc::gen::inRange<std::size_t>(1, 4);
    const std::size_t least = full ? 1 : 0;
    l.theta = rational(*rc::gen::inRange(-4, 5)) / 2;
    l.main = *tokens_like(ranks, g, least);
    for (int t = 0; t < 2; ++t) {
      l.terms.push_back(*tokens_like(ranks, g, least));
      const int k = *rc::gen::element(1, 2, 3, 5, 7, -1);
      const int d = *rc::gen::element(1, 2, 4, 10);
      l.weights.push_back(rational(k) / d);
    }
    return l;
  });
}

// A counterexample in words: the mesh, the weights and each loss's tokens.
std::string described(const layout& l) {
  const std::string mesh = l.mesh == mesh_kind::dp_cp   ? "dp 2 × cp 2"
                           : l.mesh == mesh_kind::dp_tp ? "dp 2 × tp 2"
                                                        : "W = " + std::to_string(world(l));
  std::string out = mesh + ", θ = " + to_string(l.theta) +
                    ", weights " + to_string(l.weights[0]) + " and " + to_string(l.weights[1]) + "\n";
  for (const tokens* t : {&l.main, &l.terms[0], &l.terms[1]}) {
    for (const auto& rank : *t) {
      out += "[";
      for (const auto& microbatch : rank) {
        out += "(";
        for (int y : microbatch) out += std::to_string(y) + " ";
        out += ")";
      }
      out += "] ";
    }
    out += "\n";
  }
  return out;
}

partition update_of(const layout& l, const tokens& t) {
  std::vector<std::vector<std::vector<token>>> explicit_tokens;
  for (const auto& rank : t) {
    auto& listed = explicit_tokens.emplace_back();
    for (const auto& microbatch : rank) {
      auto& values = listed.emplace_back();
      for (int y : microbatch) values.emplace_back(rational(y));
    }
  }
  partition p = make_accumulated_partition(explicit_tokens, l.theta);
  if (l.mesh == mesh_kind::dp_cp) p.mesh = {{"dp", 2, mesh_role::data}, {"cp", 2, mesh_role::sequence}};
  if (l.mesh == mesh_kind::dp_tp) p.mesh = {{"dp", 2, mesh_role::data}, {"tp", 2, mesh_role::replica}};
  return p;
}

// How code weighs a loss's tokens.
enum class way {
  correct,                  // w·W·Sᵣ/N, its own count over the update
  main_count,               // a term divided by the main loss's count
  other_term_count,         // term 1 divided by term 0's count
  term_count,               // the main loss divided by term 0's count (overwritten in place)
  local_mean,               // its own count on each rank
  microbatch_mean,          // each microbatch's own count, the accumulation ÷ G
  prefix_count,             // the count seen so far in the window
  without_cp_compensation,  // averaged over cp once too often
  count_with_replicas,      // a count reduced over tp as well: each token counted twice
  weight_missing,           // a term not multiplied by its weight
};

// The weight a token of each group gets under DDP's mean, reckoned from the tokens; nullopt where the code would
// divide by zero.
std::optional<std::vector<rational>> reckoned(const layout& l, const tokens& t, const rational& w, way how) {
  const rational ranks{world(l)};
  std::vector<rational> table;
  for (const auto& rank : t) {
    std::uint64_t own = 0;
    for (const auto& microbatch : rank) own += microbatch.size();
    std::uint64_t seen = 0;
    for (const auto& microbatch : rank) {
      seen += microbatch.size();
      rational divisor;
      switch (how) {
        case way::correct: divisor = rational(count(t)); break;
        case way::main_count: divisor = rational(count(l.main)); break;
        case way::other_term_count:
        case way::term_count: divisor = rational(count(l.terms[0])); break;
        case way::local_mean: divisor = ranks * own; break;
        case way::microbatch_mean: divisor = ranks * rational(rank.size()) * microbatch.size(); break;
        case way::prefix_count: divisor = ranks * seen; break;
        case way::without_cp_compensation:
        case way::count_with_replicas: divisor = rational(2) * count(t); break;
        case way::weight_missing: divisor = rational(count(t)) * w; break;
      }
      if (divisor == 0) return std::nullopt;
      table.push_back(w / divisor);
    }
  }
  return table;
}

// What the probe measures of a loss weighed by `table`: each group's weight times its derivative sum Σ(θ − y),
// the same vector on every rank.
observed_result measured(const layout& l, const tokens& t, const std::vector<rational>& table) {
  observed_result observed;
  observed.type = dtype::exact;
  observed.from_per_rank = true;
  observed_vector components;
  rational total = 0;
  std::size_t g = 0;
  for (const auto& rank : t)
    for (const auto& microbatch : rank) {
      rational derivative = 0;
      for (int y : microbatch) derivative += l.theta - rational(y);
      rational component = table[g++] * derivative;
      total += component;
      components.push_back(component);
    }
  group_measurement groups;
  groups.from_per_rank = true;
  groups.per_rank.assign(listed(l), components);
  observed.per_rank.assign(listed(l), total);
  observed.groups = std::move(groups);
  return observed;
}

// The update's losses, linked, and what each measured.
struct judged_update {
  partition main;
  std::vector<auxiliary_term> terms;
  observed_result main_observed;
  std::vector<observed_result> term_observed;
};

// `main_way` for the main loss, `term_ways[t]` for term t; nullopt where some table is undefined.
std::optional<judged_update> made(const layout& l, way main_way, const std::vector<way>& term_ways) {
  judged_update u;
  u.main = update_of(l, l.main);
  const auto main_table = reckoned(l, l.main, rational(1), main_way);
  if (!main_table) return std::nullopt;
  u.main_observed = measured(l, l.main, *main_table);
  for (std::size_t t = 0; t < l.terms.size(); ++t) {
    auxiliary_term term{t == 0 ? "mtp" : "moe", update_of(l, l.terms[t])};
    term.update.loss_name = term.name;
    term.update.loss_weight = l.weights[t];
    const auto table = reckoned(l, l.terms[t], l.weights[t], term_ways[t]);
    if (!table) return std::nullopt;
    u.term_observed.push_back(measured(l, l.terms[t], *table));
    u.terms.push_back(std::move(term));
  }
  link_losses(u.main, u.terms);
  return u;
}

// The gate as a law sees it; a planted one judges otherwise.
using gate_function = std::function<gate_result(judged_update&)>;

gate_result judged(judged_update& u) {
  return run_update_gate(u.main, u.main_observed, u.terms, u.term_observed);
}

// Planted: each term judged as if its weight were 1.
gate_result weight_ignored(judged_update& u) {
  for (auxiliary_term& term : u.terms) term.update.loss_weight = 1;
  return judged(u);
}

// Planted: every loss judged without the others' counts.
gate_result siblings_ignored(judged_update& u) {
  u.main.siblings.clear();
  for (auxiliary_term& term : u.terms) term.update.siblings.clear();
  return judged(u);
}

// A term weighted by its objective is never a failure, and its objective check holds; `planted_table` reckons
// the correct weights with the main loss's count instead.
bool correct_is_never_a_failure(const gate_function& gate, bool planted_table) {
  return rc::check("a term weighted by its own objective and weight is judged a pass, or inconclusive where a "
                   "mistake gives the same weights, never a failure",
                   [&] {
                     const layout l = *layouts(false);
                     const way term_way = planted_table ? way::main_count : way::correct;
                     std::optional<judged_update> u = made(l, way::correct, {term_way, term_way});
                     RC_ASSERT(u.has_value());
                     const gate_result result = gate(*u);
                     RC_LOG() << described(l);
                     RC_ASSERT(result.verdict != gate_verdict::fail);
                     for (const term_judgement& term : result.terms) {
                       RC_ASSERT(term.gate.verdict != gate_verdict::fail);
                       RC_ASSERT(term.gate.groups->matches_objective);
                       if (term.gate.verdict == gate_verdict::inconclusive) RC_ASSERT(!term.gate.could_hide.empty());
                     }
                   });
}

// The name the gate gives each way, on the loss it was planted in.
std::string name_of(way how) {
  switch (how) {
    case way::main_count: return "main_count";
    case way::other_term_count:
    case way::term_count: return "count_of(mtp)";
    case way::local_mean: return "local_mean";
    case way::microbatch_mean: return "microbatch_mean";
    case way::prefix_count: return "prefix_count";
    // On a weight table the missing compensation is the count taken before the sequences were split.
    case way::without_cp_compensation: return "count_before_sequence_sharding";
    case way::count_with_replicas: return "count_with_replicas";
    case way::weight_missing: return "objective/weight";
    case way::correct: break;
  }
  return "";
}

bool names(const std::vector<explanation>& list, const std::string& name) {
  return std::any_of(list.begin(), list.end(), [&](const explanation& e) { return e.name == name; });
}

// Each way is caught in the loss it was planted in and named there, whenever what it measures differs from the
// objective's on the update (else it can only hide); the update then fails with the loss's name on it.
bool each_mistake_is_named(const gate_function& gate) {
  return rc::check("each way of normalizing a term, or the main loss, wrong is caught and named", [&] {
    const way how = *rc::gen::element(way::main_count, way::other_term_count, way::term_count, way::local_mean,
                                      way::microbatch_mean, way::prefix_count, way::without_cp_compensation,
                                      way::count_with_replicas, way::weight_missing);
    const bool per_microbatch = how == way::microbatch_mean || how == way::prefix_count;
    layout l = *layouts(per_microbatch);
    if (how == way::without_cp_compensation) RC_PRE(l.mesh == mesh_kind::dp_cp);
    if (how == way::count_with_replicas) RC_PRE(l.mesh == mesh_kind::dp_tp);
    if (per_microbatch) RC_PRE(l.main.front().size() > 1);
    // The loss it is planted in: the main loss, term 1 (divided by term 0's count) or term 0.
    const std::size_t victim = how == way::term_count ? 0 : how == way::other_term_count ? 2 : 1;
    std::vector<way> term_ways{way::correct, way::correct};
    way main_way = way::correct;
    if (victim == 0) main_way = how;
    else term_ways[victim - 1] = how;
    const tokens& planted_tokens = victim == 0 ? l.main : l.terms[victim - 1];
    const rational weight = victim == 0 ? rational(1) : l.weights[victim - 1];
    const auto wrong = reckoned(l, planted_tokens, weight, how);
    RC_PRE(wrong.has_value());
    // What the probe measures must differ: a group whose derivative sum is 0 hides every weight.
    const observed_result right = measured(l, planted_tokens, *reckoned(l, planted_tokens, weight, way::correct));
    RC_PRE(!(measured(l, planted_tokens, *wrong).groups->per_rank.front() == right.groups->per_rank.front()));
    std::optional<judged_update> u = made(l, main_way, term_ways);
    RC_ASSERT(u.has_value());
    const gate_result result = gate(*u);
    RC_LOG() << described(l) << "planted " << name_of(how) << " in loss " << victim << ", diagnosed:";
    for (const explanation& e : result.diagnosis) RC_LOG() << " " << e.name;
    RC_LOG() << "\n";
    RC_ASSERT(result.verdict == gate_verdict::fail);
    const gate_result& loss = victim == 0 ? result : result.terms[victim - 1].gate;
    RC_ASSERT(loss.verdict == gate_verdict::fail);
    // Another loss's count is named by whichever loss holds that count (two may hold as many tokens).
    std::vector<std::string> accepted{name_of(how)};
    const partition& planted_in = victim == 0 ? u->main : u->terms[victim - 1].update;
    const rational divisor = how == way::main_count ? rational(count(l.main)) : rational(count(l.terms[0]));
    if (how == way::main_count || how == way::other_term_count || how == way::term_count)
      for (const sibling_loss& other : planted_in.siblings)
        if (other.total == divisor) accepted.push_back(sibling_count_name(other));
    const std::string prefix = victim == 0 ? "" : "term " + result.terms[victim - 1].name + ": ";
    RC_ASSERT(std::any_of(accepted.begin(), accepted.end(), [&](const std::string& name) {
      return names(loss.diagnosis, name) && names(result.diagnosis, prefix + name);
    }));
  });
}

// The update's verdict is the worst of its losses' (fail, then inconclusive, then pass); `planted`: the main
// loss's alone.
bool worst_of_its_losses(bool planted) {
  return rc::check("the update passes only when the main loss and every term pass", [planted] {
    const layout l = *layouts(false);
    const way main_way = *rc::gen::element(way::correct, way::local_mean);
    const std::vector<way> term_ways{*rc::gen::element(way::correct, way::main_count, way::local_mean),
                                     *rc::gen::element(way::correct, way::weight_missing)};
    std::optional<judged_update> u = made(l, main_way, term_ways);
    RC_PRE(u.has_value());
    const gate_result result = judged(*u);
    auto severity = [](gate_verdict v) {
      return v == gate_verdict::fail ? 2 : v == gate_verdict::inconclusive ? 1 : 0;
    };
    int worst = severity(*result.main_verdict);
    if (!planted)
      for (const term_judgement& term : result.terms) worst = std::max(worst, severity(term.gate.verdict));
    RC_ASSERT(severity(result.verdict) == worst);
  });
}

}  // namespace

TEST_CASE("a term weighted by its objective is never a failure") {
  CHECK(correct_is_never_a_failure(judged, false));
  // Planted: the gate forgets the term's weight, and the correct weights reckoned with the main loss's count.
  CHECK_FALSE(correct_is_never_a_failure(weight_ignored, false));
  CHECK_FALSE(correct_is_never_a_failure(judged, true));
}

TEST_CASE("each mistake in a term or the main loss is caught and named") {
  CHECK(each_mistake_is_named(judged));
  // Planted: the gate judges each loss without the others' counts, and cannot name a count taken from another.
  CHECK_FALSE(each_mistake_is_named(siblings_ignored));
}

TEST_CASE("the update passes only when every loss passes") {
  CHECK(worst_of_its_losses(false));
  // Planted: the update's verdict taken from the main loss alone.
  CHECK_FALSE(worst_of_its_losses(true));
}
