#include "normcheck/gate/mistakes.hpp"

#include "normcheck/gate/bound.hpp"

#include <algorithm>

namespace normcheck {

namespace {

struct mistake_text {
  std::string computed;
  std::string why_wrong;
};

std::string instead_text(reducer_kind reducer, objective_kind objective) {
  if (objective != objective_kind::token_mean && objective != objective_kind::weighted_token_mean) {
    const std::string what =
        objective == objective_kind::sequence_mean
            ? "B, with Sᵣ = Σₛ Sₛ/nₛ the rank's sum of its sequences' token means and B the sequences of the whole "
              "update that hold a valid token (all ranks, all microbatches)"
        : objective == objective_kind::sequence_sum_mean
            ? "B, with Sᵣ the rank's loss sum and B the sequences of the whole update that hold a valid token (all "
              "ranks, all microbatches)"
            : "C, with Sᵣ the rank's loss sum and C the declared normalizer";
    return reducer == reducer_kind::mean
               ? "backpropagate W·Sᵣ/" + what + ", so that the reducer's division by W is compensated"
               : "backpropagate Sᵣ/" + what + ": this reducer sums without dividing, so no world-size factor belongs "
                 "in the loss";
  }
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
  if (objective != objective_kind::token_mean && objective != objective_kind::weighted_token_mean &&
      s != strategy::global_mean) {
    // The same mistakes in the objective's own counts.
    mistake_text text = describe_strategy(s, reducer, objective_kind::token_mean);
    text.computed = "each rank backpropagated " + std::string(strategy_formula(s, objective)) + " (in the terms of " +
                    std::string(objective_name(objective)) + ")";
    return text;
  }
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
  const std::uint64_t padding = update.padding();
  if (!weighted && padding > 0) {
    const std::uint64_t positions = update.positions();
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

}  // namespace

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

std::vector<explanation> known_mistakes(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  std::vector<explanation> candidates;
  const strategy correct = update.reducer == reducer_kind::mean ? strategy::scaled_sum : strategy::global_share;
  const std::string instead = correct_instead(update);
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

std::string correct_instead(const partition& update) { return instead_text(update.reducer, update.objective); }

std::optional<explanation> mean_over_nothing(const partition& update) { return mean_of_empty(update, correct_instead(update)); }


mistake_words factor_words(std::string_view label) {
  const std::string text(label);
  if (label == "×W")
    return {"multiplied by W", "a world-size factor applied where the reducer does not divide by W (a summing reducer "
                               "or hook), or applied twice"};
  if (label == "/W") return {"divided by W", "the reducer's division by W was not compensated, or W was divided out twice"};
  if (label == "×G")
    return {"multiplied by G, the accumulation steps", "the G accumulated microbatches were summed where each was "
                                                        "meant to weigh its share: the division by G is missing"};
  if (label == "/G")
    return {"divided by G, the accumulation steps", "the loss was divided by G on top of a denominator that already "
                                                     "covers the whole window: accumulation divided twice"};
  if (label == "×W·G") return {"multiplied by W·G", "both the world-size and the accumulation factors are applied once too often"};
  if (label == "/(W·G)") return {"divided by W·G", "both the world size and the accumulation steps were divided out once too often"};
  if (label == "×W/G")
    return {"multiplied by W and divided by G", "a world-size factor too many and a division by G too many"};
  if (label == "×G/W")
    return {"multiplied by G and divided by W", "the division by G is missing and the reducer's division by W was not "
                                                "compensated"};
  const std::string how = label.front() == '/' ? "divided by " + text.substr(1) : "multiplied by " + text.substr(std::string_view("×").size());
  return {how, "a factor of " + text + " that the objective does not have: a count of something else (for example a "
               "world size that also counts tensor- or context-parallel ranks that do not average the loss)"};
}

mistake_words table_mistake_words(std::string_view name, const partition& update) {
  const reducer_kind reducer = update.reducer;
  const objective_kind objective = update.objective;
  const std::string declared(objective_name(objective));
  if (const std::optional<strategy> s = strategy_from_name(name)) {
    const mistake_text text = describe_strategy(*s, reducer, objective);
    return {text.computed, text.why_wrong};
  }
  if (name.starts_with("objective") && name.size() > std::string_view("objective").size()) {
    const mistake_words scaled = factor_words(name.substr(std::string_view("objective").size()));
    return {"the objective's gradient " + scaled.computed, scaled.why_wrong};
  }
  if (name == "sum_of_microbatch_means")
    return {"each microbatch backpropagated its own mean and the accumulation did not divide by the number of "
            "microbatches: Σₘ Sᵣₘ/nᵣₘ",
            "every microbatch then weighs the same whatever its count, and the window G times too much: the "
            "denominator must be the update's, not each microbatch's"};
  if (name == "empty_microbatches_counted")
    return {"each microbatch backpropagated its own mean, skipping those without valid tokens, and the accumulation "
            "divided by every microbatch, the empty ones included",
            "microbatches then weigh the same whatever their counts, and an empty microbatch still takes its share "
            "of the division"};
  if (name == "count_padding")
    return {"the loss sum divided by the update's positions, padding included, instead of its valid tokens",
            "padding positions (null in the file: padding, ignored labels) hold no token, so they must not count"};
  if (name == "count_before_shift")
    return {"the loss sum divided by the labels counted before the shift for next-token prediction: N plus one per "
            "row",
            "the first label of each row is never predicted; count the labels the loss sees, after the shift"};
  if (name == "microbatch_global_count")
    return {"each microbatch divided by its own count over all ranks (a per-microbatch global count) and the "
            "accumulation by G",
            "every microbatch then weighs the same whatever its count: count the valid tokens of the whole window, "
            "over all ranks and all accumulated microbatches"};
  if (name == "sequence_share")
    return {"each microbatch's token mean weighted by its share of the rank's sequences: Σₘ (Sᵣₘ/nᵣₘ)·(bᵣₘ/bᵣ)",
            "a token's weight then depends on how many tokens and sequences its microbatch holds"};
  if (name == "prefix_count")
    return {"each microbatch divided by a running count (the tokens seen so far in the window)",
            "earlier microbatches then weigh more than later ones: divide every microbatch by the count of the whole "
            "window"};
  if (name == "sequence_positions")
    return {"each sequence's loss sum divided by its padded length (its positions, padding included)",
            "a token's weight then depends on the padding of its row"};
  if (name == "geometric")
    return {"the accumulated gradient was rescaled after every microbatch, so earlier microbatches weigh "
            "geometrically less (or more) than later ones",
            "accumulation must add every microbatch's gradient with the same weight for its tokens; rescale the loss, "
            "not the accumulated buffer"};
  if (name == "short_window")
    return {"a short accumulation window divided by the nominal number of accumulation steps",
            "the last window of an epoch (or a step cut short) held fewer microbatches than the nominal G, but the "
            "loss was still divided by G: divide by the tokens (or microbatches) the window really holds"};
  if (name == "other_window")
    return {"a count taken over another window than the one accumulated",
            "the denominator must count the tokens of exactly the microbatches accumulated into this update"};
  if (name == "token_mean")
    return {"the code computed the token mean (every token weighs 1/N)",
            "the declared objective is " + declared + ": a token's weight must follow it, not the token count"};
  if (name == "sequence_mean")
    return {"the code computed the mean over sequences of each sequence's token mean (a token of sequence s weighs "
            "1/(B·nₛ))",
            "the declared objective is " + declared + ": long and short sequences must not be given the same total weight"};
  if (name == "sequence_sum_mean")
    return {"the code computed the mean over sequences of each sequence's loss sum (every token weighs 1/B)",
            "the declared objective is " + declared + ": its denominator is not the number of sequences"};
  if (name == "constant")
    return {"the code divided the loss sum by the declared constant normalizer C",
            "the declared objective is " + declared + ": its denominator depends on the update's counts"};
  if (name == "sum_of_sequence_means")
    return {"each rank backpropagated the sum of its sequences' token means, not their mean",
            "the mean over sequences must divide by the number of sequences B of the whole update"};
  if (name == "count_denominator")
    return {"the weighted loss sum divided by the valid-token count N instead of the weight mass M",
            "the objective weighs tokens, so its denominator is Σw = M; dividing by N scales the gradient by M/N"};
  if (name == "varies_within_group")
    return {"the tokens of a group did not all get the same weight (the witness component disagrees with one weight "
            "for the whole group)",
            "the objective gives every token of a group one weight; if the code weighs sequences inside a microbatch, "
            "declare them (rows, packed sequences) so each is measured as a group"};
  if (name == "unexplained")
    return {"the weights fit no known normalization (see the weight table)",
            "the weight table differs from the objective's and matches none of the known mistakes, nor one of them "
            "times a simple factor"};
  if (const std::size_t open = name.find('('); open != std::string_view::npos && name.ends_with(")")) {
    const std::string_view base = name.substr(0, open);
    const std::string_view other = name.substr(open + 1, name.size() - open - 2);
    if (const std::optional<strategy> s = strategy_from_name(base))
      if (const std::optional<objective_kind> o = objective_from_name(other)) {
        const mistake_text text = describe_strategy(*s, reducer, *o);
        return {text.computed + ", in the terms of the " + std::string(other) + " objective",
                text.why_wrong + "; and the declared objective is " + declared};
      }
  }
  return {"", ""};
}

}  // namespace normcheck
