#include "normcheck/gate/gate.hpp"

#include "normcheck/core/names.hpp"
#include "normcheck/gate/nearby.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/io/text.hpp"

#include <algorithm>

namespace normcheck {

namespace {

constexpr name_table verdict_names{std::array<std::pair<gate_verdict, std::string_view>, 3>{{
    {gate_verdict::pass, "pass"},
    {gate_verdict::fail, "fail"},
    {gate_verdict::inconclusive, "inconclusive"},
}}};

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

// Marks the explanations that give this update the same value and differ on a nearby one, with the change
// that tells them apart (one that agrees everywhere is the same computation in other words, and unmarked).
void mark_alike(std::vector<explanation>& fitting, const partition& update, dtype type,
                std::optional<dtype> reduction_type) {
  std::vector<std::pair<std::string, std::vector<explanation>>> nearby;
  bool made = false;
  auto value_there = [](const std::vector<explanation>& there, const std::string& name) -> const observed_value* {
    for (const explanation& e : there)
      if (e.name == name) return &e.value;
    return nullptr;
  };
  for (std::size_t i = 0; i < fitting.size(); ++i)
    for (std::size_t j = i + 1; j < fitting.size(); ++j) {
      if (fitting[i].value != fitting[j].value) continue;
      if (!made) {
        made = true;
        for (nearby_update& n : nearby_updates(update))
          nearby.emplace_back(std::move(n.change), known_mistakes(n.update, type, reduction_type));
      }
      for (const auto& [change, there] : nearby) {
        const observed_value* a = value_there(there, fitting[i].name);
        const observed_value* b = value_there(there, fitting[j].name);
        if (a && b && *a != *b) {
          fitting[i].alike.push_back({fitting[j].name, change});
          fitting[j].alike.push_back({fitting[i].name, change});
          break;
        }
      }
    }
}

}  // namespace

std::string_view verdict_name(gate_verdict verdict) noexcept { return verdict_names.name(verdict); }

std::optional<gate_verdict> verdict_from_name(std::string_view name) noexcept { return verdict_names.find(name); }

std::string verdict_alternatives() { return verdict_names.alternatives(); }

std::vector<std::string_view> verdict_spellings() { return verdict_names.spellings(); }

namespace {

std::vector<std::string> sorted_names(const std::vector<explanation>& explanations) {
  std::vector<std::string> names;
  for (const explanation& e : explanations) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

// What both gates set first: the arithmetic, the observed and the objective's totals, the rounding depth,
// and the bound on the total (an explicit tolerance's, else the dtype's).
gate_result started(const partition& update, const observed_result& observed) {
  gate_result result;
  result.type = observed.type;
  if (observed.reduction_type && *observed.reduction_type != observed.type)
    result.reduction_type = observed.reduction_type;
  result.observed = observed.per_rank.front();
  result.objective = *gradient(update, strategy::global_mean);
  result.rounding_depth = rounding_depth(update);
  if (observed.explicit_tolerance) {
    result.bound_is_explicit = true;
    rational allowed =
        observed.explicit_tolerance->absolute + observed.explicit_tolerance->relative * abs(result.objective);
    result.bound = allowed;
  } else {
    result.bound = objective_bound(update, observed.type, result.reduction_type);
  }
  return result;
}

// The gate on a per-group measurement: replica agreement on the vectors, the denominators, then the weight
// table group by group (the top-level probe and every site), fitted where it differs from the objective's.
gate_result run_group_gate(const partition& update, const observed_result& observed) {
  gate_result result = started(update, observed);
  const group_bounds bounds{error_factor(update, observed.type, result.reduction_type), observed.explicit_tolerance};
  const group_measurement& top = *observed.groups;

  gate_check replicas{"replica_agreement", true, ""};
  if (!top.from_per_rank) {
    replicas.detail = "one synchronized vector given (gradient): agreement between replicas not checked; dump "
                      "per_rank to check it";
  } else if (std::optional<std::string> difference = replica_difference(top)) {
    replicas.passed = false;
    replicas.detail = std::move(*difference);
  } else {
    replicas.detail = "all " + std::to_string(update.listed_ranks()) + " ranks hold the same vector of " +
                      std::to_string(update.group_count()) + " groups";
  }
  result.checks.push_back(std::move(replicas));
  result.checks.push_back(check_denominators(update, observed));

  // The top-level probe's measurement and every site's, judged together: what they share is found once.
  std::vector<const group_measurement*> measurements{&top};
  for (const group_measurement& site : observed.sites) measurements.push_back(&site);
  std::vector<group_judgement> judgements = judge_groups(update, measurements, bounds);
  group_judgement judgement = std::move(judgements.front());
  result.checks.push_back({"objective", judgement.matches_objective, judgement.detail});
  const bool resolvable = bounds.factor || bounds.explicit_tolerance;

  for (std::size_t k = 0; k < observed.sites.size(); ++k) {
    const group_measurement& site = observed.sites[k];
    site_result& judged = result.sites.emplace_back();
    judged.name = site.site;
    if (site.from_per_rank) judged.replica_difference = replica_difference(site);
    judged.judgement = std::move(judgements[k + 1]);
  }
  // A site is judged against p, not only against the objective: when the loss itself is normalized wrong,
  // every module carries p's wrong table, and that is one mistake (the objective check's), not one per module.
  const auto differs_from_p = [&](const site_result& site) {
    if (site.replica_difference) return true;
    if (site.judgement.matches_objective != judgement.matches_objective) return true;
    return !judgement.matches_objective && sorted_names(site.judgement.diagnosis) != sorted_names(judgement.diagnosis);
  };
  for (site_result& site : result.sites) site.as_p = !differs_from_p(site);
  if (!result.sites.empty()) {
    gate_check sites{"sites", true, ""};
    std::vector<std::string> differing;
    for (const site_result& site : result.sites)
      if (!site.as_p) differing.push_back(printable(site.name));
    sites.passed = differing.empty() || !resolvable;
    const std::string as = judgement.matches_objective ? "as the objective does" : "as p does";
    sites.detail = differing.empty()
                       ? "all " + std::to_string(result.sites.size()) + " sites weigh every group " + as
                       : std::to_string(differing.size()) + " of " + std::to_string(result.sites.size()) +
                             " sites weigh the groups otherwise than p: " + join(differing, "") +
                             "; a gradient hook, a per-module wrapper or a parameter group treats these modules' "
                             "gradients differently";
    result.checks.push_back(std::move(sites));
  }

  const observed_vector& components = top.per_rank.front();
  bool finite = true;
  for (std::size_t g = 0; g < components.size() && finite; ++g) finite = components.is_finite(g);
  if (!finite) {
    if (std::optional<explanation> empty = mean_over_nothing(update)) judgement.diagnosis = {std::move(*empty)};
    result.verdict = gate_verdict::fail;
  } else if (!resolvable) {
    result.verdict = gate_verdict::inconclusive;
  } else if (judgement.matches_objective) {
    result.verdict = judgement.could_hide.empty() ? gate_verdict::pass : gate_verdict::inconclusive;
  } else {
    result.verdict = gate_verdict::fail;
  }
  result.diagnosis = judgement.diagnosis;
  result.could_hide = judgement.could_hide;
  // A site that weighs the groups otherwise is named with what fits its own table: "head: objective/G".
  for (const site_result& site : result.sites) {
    if (!resolvable || site.as_p || (!site.replica_difference && site.judgement.matches_objective)) continue;
    for (const explanation& e : site.judgement.diagnosis) {
      explanation named = e;
      named.name = site.name + ": " + e.name;
      named.computed = "in " + site.name + ": " + e.computed;
      result.diagnosis.push_back(std::move(named));
    }
  }
  result.groups = std::move(judgement);
  for (const gate_check& check : result.checks)
    if (!check.passed && check.name != "objective") result.verdict = gate_verdict::fail;
  return result;
}

}  // namespace

gate_result run_gate(const partition& update, const observed_result& observed) {
  if (observed.groups) return run_group_gate(update, observed);
  gate_result result = started(update, observed);

  result.checks.push_back(check_replicas(observed, update.listed_ranks()));
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
  if (!number || !result.bound || !objective.passed) mark_alike(fitting, update, observed.type, result.reduction_type);

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

namespace {

// How bad a verdict is: pass, inconclusive, fail.
int severity(gate_verdict verdict) {
  switch (verdict) {
    case gate_verdict::pass:
      return 0;
    case gate_verdict::inconclusive:
      return 1;
    case gate_verdict::fail:
      return 2;
  }
  return 2;
}

// A term's explanation among the update's: "term mtp: local_mean" (a site's read "head: objective/G").
explanation of_term(const std::string& term, const explanation& e) {
  const std::string prefix = "term " + term + ": ";
  explanation named = e;
  named.name = prefix + e.name;
  named.computed = prefix + e.computed;
  for (look_alike& other : named.alike) other.name = prefix + other.name;
  return named;
}

}  // namespace

gate_result run_update_gate(const partition& update, const observed_result& observed,
                            std::span<const auxiliary_term> terms, std::span<const observed_result> term_observed) {
  gate_result result = run_gate(update, observed);
  if (terms.empty()) return result;
  result.main_verdict = result.verdict;
  for (std::size_t t = 0; t < terms.size(); ++t) {
    term_judgement& judged = result.terms.emplace_back();
    judged.name = terms[t].name;
    judged.gate = run_gate(terms[t].update, term_observed[t]);
    const gate_verdict verdict = judged.gate.verdict;
    if (severity(verdict) > severity(result.verdict)) result.verdict = verdict;
    if (verdict == gate_verdict::fail)
      for (const explanation& e : judged.gate.diagnosis) result.diagnosis.push_back(of_term(judged.name, e));
    if (verdict == gate_verdict::inconclusive)
      for (const explanation& e : judged.gate.could_hide) result.could_hide.push_back(of_term(judged.name, e));
  }
  return result;
}

}  // namespace normcheck
