#include "normcheck/teaching/reducers.hpp"

#include "demo_support.hpp"

namespace normcheck {

using namespace demo_support;

namespace {


// The ratio of a strategy's gradient to the objective's at θ; nullopt where either is undefined or 0.
std::optional<rational> ratio_at(const partition& p, strategy s, const rational& theta) {
  const partition moved = at_theta(p, theta);
  const std::optional<rational> value = gradient(moved, s);
  const rational objective = *gradient(moved, strategy::global_mean);
  if (!value || objective == 0) return std::nullopt;
  rational ratio = *value / objective;
  return ratio;
}


std::string relation_text(const strategy_relation& r, const partition& p) {
  if (!r.delivered && !r.factor && !r.ratio_at_first) return "undefined";
  if (r.factor) {
    if (*r.factor == 1) return "equal";
    const std::string names = factor_in_counts(*r.factor, p);
    return "× " + exact(*r.factor) + (names.empty() ? "" : " (= " + names + ")");
  }
  if (r.ratio_at_first && r.ratio_at_second)
    return "no fixed factor: × " + exact(*r.ratio_at_first) + " at θ = " + exact(r.first_theta) + ", × " +
           exact(*r.ratio_at_second) + " at θ = " + exact(r.second_theta);
  return "undefined";
}


std::string reducer_heading(reducer_kind reducer) {
  return reducer == reducer_kind::mean ? "The mean reducer: (1/W)·Σᵣ, DDP's default" : "The sum reducer: Σᵣ";
}

}  // namespace

std::string factor_in_counts(const rational& factor, const partition& p) {
  const rational w(p.world_size());
  const rational n(p.valid_tokens());
  const std::array<std::pair<std::string_view, rational>, 6> candidates{{
      {"W", w}, {"N", n}, {"N/W", n / w}, {"1/W", 1 / w}, {"1/N", 1 / n}, {"W/N", w / n}}};
  std::string names;
  for (const auto& [name, value] : candidates)
    if (value == factor) names += (names.empty() ? "" : " = ") + std::string(name);
  return names;
}

const strategy_relation& relation_of(const reducer_facts& f, strategy s) {
  for (const strategy_relation& r : f.relations)
    if (r.name == s) return r;
  throw error(error_code::usage_error, "no relation computed for " + std::string(strategy_name(s)));
}

reducer_facts compute_reducer(const partition& update) {
  reducer_facts f;
  f.reducer = update.reducer;
  f.objective = *gradient(update, strategy::global_mean);
  // The objective's gradient θ − ȳ vanishes at one θ at most, so one of any two neighbours will do.
  rational first = update.theta;
  if (objective_at(update, first) == 0) first += 1;
  rational second = first + 1;
  if (objective_at(update, second) == 0) second += 1;
  for (strategy s : all_strategies) {
    if (s == strategy::global_mean) continue;
    strategy_relation r;
    r.name = s;
    r.delivered = gradient(update, s);
    r.equals_objective = r.delivered && *r.delivered == f.objective;
    r.first_theta = first;
    r.second_theta = second;
    const std::optional<rational> at_first = ratio_at(update, s, first);
    const std::optional<rational> at_second = ratio_at(update, s, second);
    if (at_first && at_second) {
      if (*at_first == *at_second) {
        r.factor = at_first;
      } else {
        r.ratio_at_first = at_first;
        r.ratio_at_second = at_second;
      }
    }
    f.relations.push_back(std::move(r));
  }
  return f;
}

demo_document reducers_document(const demo_input& input) {
  demo_document d;
  d.title = "Reducers: what W compensation does under a mean and under a sum";
  partition mean_update = input.update;
  mean_update.reducer = reducer_kind::mean;
  partition sum_update = input.update;
  sum_update.reducer = reducer_kind::sum;
  const std::array<reducer_facts, 2> facts{compute_reducer(mean_update), compute_reducer(sum_update)};
  const partition& p = mean_update;
  {
    demo_section s{"The update", {}};
    s.blocks.push_back(paragraph(description_of(input) + " " + update_summary(p) +
                                 " Both reducers are applied to the same ranks; the objective does not depend on "
                                 "the reducer: ∇L = ΣSᵣ/N = " + show(facts[0].objective) + "."));
    s.blocks.push_back(rank_table(input));
    d.sections.push_back(std::move(s));
  }
  for (const reducer_facts& f : facts) {
    const partition& update = f.reducer == reducer_kind::mean ? mean_update : sum_update;
    demo_section s{reducer_heading(f.reducer), {}};
    demo_table table;
    table.header = {"each rank backpropagates", "name", "delivered", "relation to the objective"};
    std::vector<std::string> correct;
    for (const strategy_relation& r : f.relations) {
      table.rows.push_back({std::string(strategy_formula(r.name)), std::string(strategy_name(r.name)),
                            exact(r.delivered), relation_text(r, update)});
      if (r.factor && *r.factor == 1) correct.push_back(std::string(strategy_formula(r.name)));
    }
    s.blocks.push_back(table);
    s.blocks.push_back(paragraph(
        correct.empty() ? std::string("No local scalar delivers the objective under this reducer.")
                        : "Under this reducer the objective is delivered, at every θ, by " + list_text(correct) +
                              ". The relation is measured as the ratio to the objective at θ = " +
                              exact(f.relations.front().first_theta) + " and at θ = " +
                              exact(f.relations.front().second_theta) +
                              "; equal ratios mean a fixed factor."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"W compensation under each reducer", {}};
    const strategy_relation& under_mean = relation_of(facts[0], strategy::scaled_sum);
    const strategy_relation& under_sum = relation_of(facts[1], strategy::scaled_sum);
    auto against_objective = [](const strategy_relation& r, const partition& update) {
      if (!r.factor) return relation_text(r, update);
      if (*r.factor == 1) return std::string("the objective");
      const std::string names = factor_in_counts(*r.factor, update);
      return exact(*r.factor) + " × the objective" +
             (names.empty() ? "" : " (" + exact(*r.factor) + " = " + names + ")");
    };
    s.blocks.push_back(display({"mean: W·Sᵣ/N delivers " + show(under_mean.delivered) + ": " +
                                    against_objective(under_mean, mean_update),
                                "sum:  W·Sᵣ/N delivers " + show(under_sum.delivered) + ": " +
                                    against_objective(under_sum, sum_update)}));
    const strategy_relation& share_under_sum = relation_of(facts[1], strategy::global_share);
    std::string text = "Under the mean reducer the factor W in each local scalar cancels the reducer's division by W. "
                       "A summing reducer does not divide, so the same local scalar ";
    text += under_sum.factor && *under_sum.factor != 1
                ? "scales the gradient by " + exact(*under_sum.factor) + "."
                : "happens to deliver the objective here (W = 1).";
    text += share_under_sum.factor && *share_under_sum.factor == 1
                ? " Under a sum, Sᵣ/N delivers the objective instead"
                : " Under a sum, Sᵣ/N does not deliver the objective either";
    text += ": the W in the local scalar must be the divisor of the reduction actually in use, not a constant of "
            "the recipe.";
    s.blocks.push_back(paragraph(text));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"The factor each mistake produces", {}};
    demo_table table;
    table.header = {"reducer", "each rank backpropagates", "factor", "in counts"};
    std::vector<std::string> reweighting;
    for (const reducer_facts& f : facts) {
      const partition& update = f.reducer == reducer_kind::mean ? mean_update : sum_update;
      for (const strategy_relation& r : f.relations) {
        if (r.factor && *r.factor != 1) {
          const std::string names = factor_in_counts(*r.factor, update);
          table.rows.push_back({std::string(reducer_name(f.reducer)), std::string(strategy_formula(r.name)),
                                exact(*r.factor), names.empty() ? std::string("—") : names});
        } else if (!r.factor && r.ratio_at_first) {
          reweighting.push_back(std::string(strategy_formula(r.name)) + " under " +
                                std::string(reducer_name(f.reducer)));
        }
      }
    }
    s.blocks.push_back(table);
    s.blocks.push_back(paragraph(
        "A fixed factor is a scale error: the direction is right and the size is wrong by a count of the run, so it "
        "changes whenever W or N changes. " +
        (reweighting.empty()
             ? std::string("Every other mistake here is a fixed factor as well.")
             : "The others (" + list_text(reweighting) +
                   ") have no fixed factor at all: their ratio to the objective moves with θ, because they weight "
                   "tokens differently. `normcheck demo disguise` shows why even a fixed factor is not a "
                   "learning-rate matter.")));
    d.sections.push_back(std::move(s));
  }
  return d;
}

}  // namespace normcheck
