#pragma once
/// \file gate/mistakes.hpp
/// The known mistakes and their words: what each wrong computation yields on an update, what the code
/// computed, why that is not the objective's gradient and what to backpropagate instead.

#include "normcheck/core/dtype.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/gate/observed.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// Another explanation that this update cannot tell from one: both give it the same value (or weight table),
/// and they differ on an update one change away.
struct look_alike {
  std::string name;           ///< the other explanation
  std::string told_apart_by;  ///< that change, in a user's words ("G ≠ W (here G = W = 2)")
};

/// A candidate account of the observed value: a named strategy or the objective scaled by a factor.
struct explanation {
  std::string name;       ///< a strategy name ("local_mean"), a factor ("objective×W") or "mean_of_empty"
  observed_value value;   ///< what that computation yields on this partition (NaN for a mean over nothing)
  std::optional<rational> bound;  ///< its error bound at the dtype (nullopt: the dtype cannot resolve it)
  std::string computed;   ///< what the code computed
  std::string why_wrong;  ///< why that is not the objective's gradient
  std::string instead;    ///< what to backpropagate instead
  std::vector<look_alike> alike;  ///< the other explanations given that fit only because of this update's shape
};

/// Every known mistake as a candidate, with its value and bound on `update` at `type`, reduced in
/// `reduction_type` (the correct computation for the reducer and the objective itself are not candidates).
/// A mean over a microbatch or rank without valid tokens (`mean_of_empty`) is a candidate of value NaN.
std::vector<explanation> known_mistakes(const partition& update, dtype type,
                                        std::optional<dtype> reduction_type = std::nullopt);

/// `mean_of_empty`: a mean over a microbatch or rank without valid tokens, if the update has one (value NaN).
std::optional<explanation> mean_over_nothing(const partition& update);

/// What to backpropagate instead of a mistake, for the update's reducer and objective.
std::string correct_instead(const partition& update);

/// What a computation did and why that is wrong, in words.
struct mistake_words {
  std::string computed;
  std::string why_wrong;
};

/// The words of a computation the per-group gate recognizes, by its name: a strategy, a normalization the
/// table diagnoses, another objective's computation, another loss's count ("main_count", "count_of(mtp)"), the
/// objective times a factor ("objective×W"), a short or another window, geometric weights, weights that vary
/// within a group, or "unexplained".
mistake_words table_mistake_words(std::string_view name, const partition& update);

/// The words of a factor on top of a computation, by its label ("×W", "/G", "/cp", "/weight", "×4"): how it
/// scaled and why that is wrong.
mistake_words factor_words(std::string_view label, const partition& update);

/// Every name the gate gives, by kind, read from the tables that hold their words (`normcheck names` lists
/// them, and the Python package's copies are tested against them). A diagnosis is one of `normalizations`
/// or `others`, or another loss's count "count_of(mtp)"; "objective" followed by a factor; a normalization
/// followed by a factor or by another objective's name in parentheses; any of these after a site's name and
/// ": ", or after "term " and an auxiliary term's name and ": ". A factor is one of
/// `factors`, the size of mesh dimensions or their product ("/cp", "×(cp·sp)", "×(dp·tp)") or a plain number
/// ("×4", "/3", "×G/3").
struct diagnosis_names {
  std::vector<std::string_view> normalizations;  ///< the strategy table's, but the objective's own
  std::vector<std::string_view> others;          ///< what is not a normalization: geometric, short_window, …
  std::vector<std::string> factors;              ///< "×W", "/G", "×N", …
};
diagnosis_names gate_names();

/// The name of dividing by another loss's count in place of one's own: "main_count" (a term divided by the main
/// loss's count), "count_of(mtp)" (divided by term mtp's).
std::string sibling_count_name(const sibling_loss& other);

/// The name of the size of the mesh dimensions with `role` as a factor: "cp", "(cp·sp)" for two; empty
/// where their size is 1.
std::string mesh_factor_name(const partition& update, mesh_role role);

/// The name of every rank of a mesh with replica dimensions as a factor, the product of all its dimensions'
/// sizes: "(dp·tp)", "(dp·cp·tp)"; empty without replica dimensions (every rank is then one of W).
std::string whole_mesh_factor_name(const partition& update);

}  // namespace normcheck
