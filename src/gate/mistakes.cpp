#include "normcheck/gate/mistakes.hpp"

#include "normcheck/core/normalization.hpp"
#include "normcheck/gate/bound.hpp"
#include "normcheck/io/text.hpp"

#include <algorithm>
#include <array>

namespace normcheck {

namespace {

// A mean over a microbatch or rank without valid tokens.
constexpr std::string_view mean_of_empty_name = "mean_of_empty";

// The objective's denominator as a factor the scalar gate names ("objective×N", "objective/M"): N, or the
// weight mass M under the weighted objective.
constexpr std::array<std::string_view, 2> denominator_symbols{"N", "M"};

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
  const std::string what = weighted
                               ? n + " the weight mass of the whole update (Σw over all ranks and microbatches, Sᵣ "
                                     "the weighted loss sum Σwℓ)"
                               : n + " the valid tokens of the whole update (all ranks, all microbatches)";
  return reducer == reducer_kind::mean
             ? "backpropagate W·Sᵣ/" + n + " on every rank, with " + what +
                   ", so that the reducer's division by W is compensated"
             : "backpropagate Sᵣ/" + n + " on every rank, with " + what +
                   ": this reducer sums without dividing, so no world-size factor belongs in the loss";
}

mistake_text describe_strategy(strategy s, reducer_kind reducer, objective_kind objective) {
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
  if (s == strategy::global_mean) return {"", ""};
  const normalization& n = *find_normalization(strategy_name(s));
  return {std::string(n.computed), why_wrong(n, reducer)};
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
  const std::string n(denominator_symbols[weighted ? 1 : 0]);
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
                     "the loss sum was used where the mean was meant, or the " +
                         std::string(weighted ? "mass" : "count") + " was multiplied instead of divided"});
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
  if (weighted) {
    mistake_words words = table_mistake_words("count_denominator", update);
    factors.push_back({"count_denominator", total_mass / rational(update.valid_tokens()), std::move(words.computed),
                       std::move(words.why_wrong)});
  }
  // The sequence and replica dimensions' sizes, and every rank of a mesh with replicas, where they are not
  // already a factor above (equal to W or G).
  struct mesh_factor {
    std::string name;
    rational extent;
  };
  std::vector<mesh_factor> mesh_factors;
  for (const mesh_role role : {mesh_role::sequence, mesh_role::replica})
    if (std::string name = mesh_factor_name(update, role); !name.empty())
      mesh_factors.push_back({std::move(name), rational(update.mesh_extent(role))});
  if (std::string whole = whole_mesh_factor_name(update); !whole.empty())
    mesh_factors.push_back({std::move(whole), rational(update.listed_ranks())});
  for (const auto& [cp, extent] : mesh_factors) {
    for (const bool divided : {true, false}) {
      const std::string label = (divided ? "/" : "×") + cp;
      rational factor = divided ? 1 / extent : extent;
      if (std::any_of(factors.begin(), factors.end(), [&](const factor_mistake& f) { return f.factor == factor; }))
        continue;
      mistake_words words = factor_words(label, update);
      factors.push_back({"objective" + label, std::move(factor), "the objective's gradient " + words.computed,
                         std::move(words.why_wrong)});
    }
  }
  // Another loss's count in place of this loss's own: a term's positions, where they make the main loss's count (a
  // multi-token-prediction term padded where the main loss has the labels it drops), are that count in other words.
  const rational own = objective_units(update, update.objective).total();
  for (const sibling_loss& other : update.siblings) {
    if (other.same_count || other.total == 0) continue;
    rational factor = own / other.total;
    if (other.name.empty())
      std::erase_if(factors, [&](const factor_mistake& f) { return f.name == "count_padding" && f.factor == factor; });
    const std::string name = sibling_count_name(other);
    mistake_words words = table_mistake_words(name, update);
    factors.push_back({name, std::move(factor), std::move(words.computed), std::move(words.why_wrong)});
  }
  // A term's weight left out, or applied twice.
  if (update.loss_weight != 1)
    for (const bool divided : {true, false}) {
      const std::string label = divided ? "/weight" : "×weight";
      mistake_words words = factor_words(label, update);
      rational factor = divided ? 1 / update.loss_weight : update.loss_weight;
      factors.push_back({"objective" + label, std::move(factor), "the objective's gradient " + words.computed,
                         std::move(words.why_wrong)});
    }
  std::erase_if(factors, [](const factor_mistake& f) { return f.factor == 1; });
  return factors;
}

// The microbatches and ranks a mean would divide by zero in: "rank 1, microbatch 0", "rank 2 (all of it)".
std::vector<std::string> empty_places(const partition& update) {
  std::vector<std::string> places;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    if (rank.mass() == 0) {
      places.push_back("rank " + std::to_string(update.listed_rank(r)) +
                       (rank.microbatches.size() > 1 ? " (every microbatch)" : ""));
      continue;
    }
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m)
      if (rank.microbatches[m].mass() == 0)
        places.push_back("rank " + std::to_string(update.listed_rank(r)) + ", microbatch " + std::to_string(m));
  }
  return places;
}

// On a mesh with sequence dimensions a rank's own count is the count of its slices: local_mean says so.
void in_mesh_terms(std::string_view name, const partition& update, std::string& computed) {
  if (name != "local_mean" || update.mesh_extent(mesh_role::sequence) < 2) return;
  computed += mesh_spelled(counts_sequences(update.objective)
                               ? ": each {sequence} rank divided by the sequences its own slices hold, not by B, "
                                 "each sequence counted once over {mesh}"
                               : ": each {sequence} rank divided by the tokens of its own slices, not by the count "
                                 "reduced over {mesh}",
                           update);
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
  return explanation{std::string(mean_of_empty_name),
                     non_finite::nan,
                     std::nullopt,
                     "a mean (reduction='mean' or a division by a local count) over a part of the update without " +
                         std::string(weighted ? "weight" : "valid tokens") + ": " + where +
                         "; 0/0 is NaN, and the all-reduce hands it to every rank",
                     "a mean needs at least one valid token; the objective divides the whole update's loss sum by " +
                         std::string(weighted ? "M" : "N") + ", which is not 0, so a part without tokens simply adds 0",
                     instead,
                     {}};
}

std::vector<explanation> known_mistakes(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  std::vector<explanation> candidates;
  const strategy correct = update.reducer == reducer_kind::mean ? strategy::scaled_sum : strategy::global_share;
  const std::string instead = correct_instead(update);
  // With one microbatch per rank, averaging microbatch means is the same computation as local_mean.
  const bool accumulates = std::any_of(update.ranks.begin(), update.ranks.end(),
                                       [](const rank_stats& r) { return r.microbatches.size() > 1; });
  // One set of units for every strategy's gradient and bound: their per-rank sums are computed once.
  require_valid_tokens(update);
  const objective_units units(update, update.objective);
  const std::optional<rational> error = error_factor(update, type, reduction_type);
  const rational objective = *synchronized_gradient(units, normalization_of(strategy::global_mean));
  for (strategy s : all_strategies) {
    if (s == strategy::global_mean || s == correct) continue;
    if (s == strategy::microbatch_mean && !accumulates) continue;
    const std::optional<rational> value = synchronized_gradient(units, normalization_of(s));
    if (!value) continue;
    mistake_text text = describe_strategy(s, update.reducer, update.objective);
    in_mesh_terms(strategy_name(s), update, text.computed);
    candidates.push_back({std::string(strategy_name(s)), *value, strategy_bound(units, s, error),
                          std::move(text.computed), std::move(text.why_wrong), instead, {}});
  }
  const std::optional<rational> bound = strategy_bound(units, strategy::global_mean, error);
  for (factor_mistake& f : factor_mistakes(update)) {
    rational value = objective * f.factor;
    std::optional<rational> scaled_bound;
    if (bound) scaled_bound = *bound * abs(f.factor);
    candidates.push_back(
        {std::move(f.name), value, scaled_bound, std::move(f.computed), std::move(f.why_wrong), instead, {}});
  }
  if (std::optional<explanation> empty = mean_of_empty(update, instead)) candidates.push_back(std::move(*empty));
  return candidates;
}

std::string correct_instead(const partition& update) {
  std::string instead = instead_text(update.reducer, update.objective);
  if (!update.loss_name.empty()) {
    instead = "for term " + update.loss_name + ", " + instead + "; Sᵣ and its count are the term's own";
    if (update.loss_weight != 1)
      instead += ", and the term enters the update's loss times its weight " + to_string(update.loss_weight);
  }
  if (update.mesh_extent(mesh_role::replica) > 1)
    instead += mesh_spelled("; on this mesh W = " + std::to_string(update.world_size()) +
                                " counts the ranks of {mesh}, and N each token once, not once per {replica} replica",
                            update);
  if (counts_sequences(update.objective) && update.has_slices())
    instead += mesh_spelled(
        std::string("; on this mesh B counts each sequence once, however many {sequence} ranks hold slices of it") +
            (update.objective == objective_kind::sequence_mean
                 ? ", and a slice's tokens divide by nₛ, the valid tokens of all the sequence's slices (summed over "
                   "{sequence})"
                 : ""),
        update);
  return instead;
}

std::optional<explanation> mean_over_nothing(const partition& update) {
  return mean_of_empty(update, correct_instead(update));
}

namespace {

// Words of a computation by name, `{declared}` standing for the declared objective's name.
struct named_words {
  std::string_view name;
  std::string_view computed;
  std::string_view why_wrong;
};

// The factors on top of a computation whose cause is known, by label.
constexpr std::array<named_words, 8> factor_table{{
    {"×W", "multiplied by W",
     "a world-size factor applied where the reducer does not divide by W (a summing reducer or hook), or applied "
     "twice"},
    {"/W", "divided by W", "the reducer's division by W was not compensated, or W was divided out twice"},
    {"×G", "multiplied by G, the accumulation steps",
     "the G accumulated microbatches were summed where each was meant to weigh its share: the division by G is "
     "missing"},
    {"/G", "divided by G, the accumulation steps",
     "the loss was divided by G on top of a denominator that already covers the whole window: accumulation divided "
     "twice"},
    {"×W·G", "multiplied by W·G", "both the world-size and the accumulation factors are applied once too often"},
    {"/(W·G)", "divided by W·G", "both the world size and the accumulation steps were divided out once too often"},
    {"×W/G", "multiplied by W and divided by G", "a world-size factor too many and a division by G too many"},
    {"×G/W", "multiplied by G and divided by W",
     "the division by G is missing and the reducer's division by W was not compensated"},
}};

// The factors equal to a mesh dimension's size, by role and direction, in the mesh's words (mesh_spelled).
struct mesh_factor_words {
  mesh_role role;
  bool divided;
  std::string_view computed;
  std::string_view why_wrong;
};

constexpr std::array<mesh_factor_words, 4> mesh_factor_table{{
    {mesh_role::replica, true, "divided by {TP}, the size of {replica}",
     "each token was counted on every {replica} rank: the ranks of {replica} hold the same tokens, so a count "
     "reduced over them counts each {TP} times"},
    {mesh_role::replica, false, "multiplied by {TP}, the size of {replica}",
     "the loss was scaled by the size of {replica}, whose ranks hold the same tokens and do not average the loss: "
     "only the ranks of {mesh} do"},
    {mesh_role::sequence, true, "divided by {CP}, the size of {sequence}",
     "the loss was averaged over {sequence} once too often, or each token was counted on every {sequence} rank: "
     "the ranks of {sequence} hold slices of the same sequences, whose gradients the reducer already adds"},
    {mesh_role::sequence, false, "multiplied by {CP}, the size of {sequence}",
     "a compensation for {sequence} applied where nothing divides by it, or a count reduced over {data} only that "
     "left out the other {sequence} ranks' tokens"},
}};

// What the per-group gate recognizes beyond the strategy table's normalizations: weights of another
// objective, of another window, rescaled accumulation, and weights it cannot name.
constexpr std::array<named_words, 11> other_table{{
    {"geometric",
     "the accumulated gradient was rescaled after every microbatch, so earlier microbatches weigh geometrically less "
     "(or more) than later ones",
     "accumulation must add every microbatch's gradient with the same weight for its tokens; rescale the loss, not "
     "the accumulated buffer"},
    {"short_window", "a short accumulation window divided by the nominal number of accumulation steps",
     "the last window of an epoch (or a step cut short) held fewer microbatches than the nominal G, but the loss was "
     "still divided by G: divide by the tokens (or microbatches) the window really holds"},
    {"other_window", "a count taken over another window than the one accumulated",
     "the denominator must count the tokens of exactly the microbatches accumulated into this update"},
    {"token_mean", "the code computed the token mean (every token weighs 1/N)",
     "the declared objective is {declared}: a token's weight must follow it, not the token count"},
    {"sequence_mean",
     "the code computed the mean over sequences of each sequence's token mean (a token of sequence s weighs "
     "1/(B·nₛ))",
     "the declared objective is {declared}: long and short sequences must not be given the same total weight"},
    {"sequence_sum_mean",
     "the code computed the mean over sequences of each sequence's loss sum (every token weighs 1/B)",
     "the declared objective is {declared}: its denominator is not the number of sequences"},
    {"constant", "the code divided the loss sum by the declared constant normalizer C",
     "the declared objective is {declared}: its denominator depends on the update's counts"},
    {"sum_of_sequence_means", "each rank backpropagated the sum of its sequences' token means, not their mean",
     "the mean over sequences must divide by the number of sequences B of the whole update"},
    {"count_denominator", "the weighted loss sum divided by the valid-token count N instead of the weight mass M",
     "the objective weighs tokens, so its denominator is Σw = M; dividing by N scales the gradient by M/N"},
    {"varies_within_group",
     "the tokens of a group did not all get the same weight (the witness component disagrees with one weight for "
     "the whole group)",
     "the objective gives every token of a group one weight; if the code weighs sequences inside a microbatch, "
     "declare them (rows, packed sequences) so each is measured as a group"},
    {"unexplained", "the weights fit no known normalization (see the weight table)",
     "the weight table differs from the objective's and matches none of the known mistakes, nor one of them times a "
     "simple factor"},
}};

template <std::size_t size>
const named_words* lookup(const std::array<named_words, size>& table, std::string_view name) {
  for (const named_words& entry : table)
    if (entry.name == name) return &entry;
  return nullptr;
}

std::string with_declared(std::string_view text, objective_kind declared) {
  std::string out(text);
  constexpr std::string_view slot = "{declared}";
  if (const std::size_t at = out.find(slot); at != std::string::npos)
    out.replace(at, slot.size(), objective_name(declared));
  return out;
}

// Another loss's count divided by in place of this loss's own.
mistake_words sibling_count_words(const partition& update, const sibling_loss& other) {
  const objective_units units(update, update.objective);
  const std::string loss = loss_spelled(update);
  const std::string others = other.name.empty() ? "the main loss" : "term " + other.name;
  const rational ratio = units.total() / other.total;
  const std::string whose = update.loss_name.empty() ? "the main loss's sum" : "the term's loss sum";
  return {whose + " was divided by " + others + "'s count, " + on_screen(other.total) + ", instead of its own, " +
              std::string(units.symbol(0)) + " = " + on_screen(units.total()),
          "each loss of the update is normalized by its own tokens: " + loss + "'s tokens then weigh " +
              on_screen(ratio) + " times what the objective gives them, and its share of the gradient follows " +
              others + "'s count (a multi-token-prediction mask drops labels at the end of each sequence, a " +
              "count shared between losses can be overwritten by another's); count " + loss +
              "'s own tokens over the whole update and divide by that"};
}

}  // namespace

diagnosis_names gate_names() {
  diagnosis_names names;
  for (const auto& table : {report_normalizations(), diagnosed_normalizations()})
    for (const normalization& n : table)
      if (!n.objective_itself) names.normalizations.push_back(n.name);
  for (const named_words& entry : other_table) names.others.push_back(entry.name);
  names.others.push_back(mean_of_empty_name);
  names.others.push_back("main_count");  // and "count_of(mtp)": another loss's count (sibling_count_name)
  for (const named_words& entry : factor_table) names.factors.emplace_back(entry.name);
  for (const std::string_view label : {"/weight", "×weight"}) names.factors.emplace_back(label);
  for (const std::string_view symbol : denominator_symbols)
    for (const std::string_view how : {"×", "/"}) names.factors.push_back(std::string(how) + std::string(symbol));
  return names;
}

std::string sibling_count_name(const sibling_loss& other) {
  return other.name.empty() ? "main_count" : "count_of(" + other.name + ")";
}

std::string mesh_factor_name(const partition& update, mesh_role role) {
  if (update.mesh_extent(role) < 2) return {};
  std::string names = update.mesh_names(role);
  if (names.find(' ') == std::string::npos) return names;
  for (std::size_t at; (at = names.find(" × ")) != std::string::npos;)
    names.replace(at, std::string_view(" × ").size(), "·");
  return "(" + names + ")";
}

std::string whole_mesh_factor_name(const partition& update) {
  if (update.mesh_extent(mesh_role::replica) < 2) return {};
  std::string names;
  for (const mesh_dim& dim : update.mesh)
    if (dim.size > 1) names += (names.empty() ? "" : "·") + dim.name;
  return "(" + names + ")";
}

mistake_words factor_words(std::string_view label, const partition& update) {
  if (const named_words* known = lookup(factor_table, label))
    return {std::string(known->computed), std::string(known->why_wrong)};
  if (label == "/weight" || label == "×weight") {
    const std::string weight = to_string(update.loss_weight);
    const std::string loss = loss_spelled(update);
    if (label == "/weight")
      return {"divided by " + loss + "'s weight " + weight,
              loss + "'s loss was not multiplied by its declared weight " + weight +
                  " (or the weight was divided out once more): its tokens then weigh 1/(" + weight +
                  ") times what the objective gives them"};
    return {"multiplied by " + loss + "'s weight " + weight + " once more",
            "the weight " + weight + " was applied twice (in the loss and again in a scale or a hook)"};
  }
  for (const mesh_factor_words& known : mesh_factor_table) {
    const std::string name = mesh_factor_name(update, known.role);
    if (!name.empty() && label == (known.divided ? "/" : "×") + name)
      return {mesh_spelled(known.computed, update), mesh_spelled(known.why_wrong, update)};
  }
  if (const std::string whole = whole_mesh_factor_name(update); !whole.empty()) {
    const std::string size = std::to_string(update.listed_ranks());
    if (label == "×" + whole)
      return {mesh_spelled("multiplied by " + size + ", the size of the whole mesh, {replica} included", update),
              mesh_spelled("the loss was scaled by a world size that counts every rank, the {replica} replicas too: "
                           "they hold the same tokens and do not average the loss, only the ranks of {mesh} do "
                           "(W = " + std::to_string(update.world_size()) + ")",
                           update)};
    if (label == "/" + whole)
      return {mesh_spelled("divided by " + size + ", the size of the whole mesh, {replica} included", update),
              mesh_spelled("the loss was averaged over every rank, or its count reduced over every rank, the "
                           "{replica} replicas included: they hold the same tokens, so only the ranks of {mesh} "
                           "divide (W = " + std::to_string(update.world_size()) + ")",
                           update)};
  }
  const std::string text(label);
  const std::string how = label.front() == '/' ? "divided by " + text.substr(1)
                                               : "multiplied by " + text.substr(std::string_view("×").size());
  return {how, "a factor of " + text + " that the objective does not have: a count of something else (for example a "
               "world size that also counts tensor- or context-parallel ranks that do not average the loss)"};
}

mistake_words table_mistake_words(std::string_view name, const partition& update) {
  const reducer_kind reducer = update.reducer;
  const objective_kind objective = update.objective;
  for (const sibling_loss& other : update.siblings)
    if (name == sibling_count_name(other)) return sibling_count_words(update, other);
  if (const std::optional<strategy> s = strategy_from_name(name)) {
    mistake_text text = describe_strategy(*s, reducer, objective);
    in_mesh_terms(name, update, text.computed);
    return {text.computed, text.why_wrong};
  }
  if (const normalization* n = find_normalization(name)) {
    mistake_words words{mesh_spelled(n->computed, update), mesh_spelled(why_wrong(*n, reducer), update)};
    // An auxiliary loss computed beside the main one often misses the compensation the main loss has: the same
    // weights (Megatron-LM #3674, verl #6609).
    if (!update.loss_name.empty() && name == "count_before_sequence_sharding")
      words.computed += mesh_spelled("; or, the same weights, the term's loss was left without the compensation "
                                     "for {sequence} (not multiplied by {CP}), so the reducer's mean over "
                                     "{sequence} divided it",
                                     update);
    return words;
  }
  if (const named_words* known = lookup(other_table, name))
    return {std::string(known->computed), with_declared(known->why_wrong, objective)};
  if (name.starts_with("objective") && name.size() > std::string_view("objective").size()) {
    const mistake_words scaled = factor_words(name.substr(std::string_view("objective").size()), update);
    return {"the objective's gradient " + scaled.computed, scaled.why_wrong};
  }
  if (const std::size_t open = name.find('('); open != std::string_view::npos && name.ends_with(")")) {
    const std::string_view base = name.substr(0, open);
    const std::string_view other = name.substr(open + 1, name.size() - open - 2);
    if (const std::optional<strategy> s = strategy_from_name(base))
      if (const std::optional<objective_kind> o = objective_from_name(other)) {
        const mistake_text text = describe_strategy(*s, reducer, *o);
        return {text.computed + ", in the terms of the " + std::string(other) + " objective",
                text.why_wrong + "; and the declared objective is " + std::string(objective_name(objective))};
      }
  }
  return {"", ""};
}

}  // namespace normcheck
