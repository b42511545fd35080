#pragma once
/// \file teaching/derivation.hpp
/// The derivation demo: why each rank backpropagates W·Sᵣ/N, measured on an update by the library —
/// averaged local means against the objective, per-rank and per-token weights, the equal-count control,
/// an empty rank, and the rejection of an update without tokens.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/teaching/demo_input.hpp"
#include "normcheck/teaching/document.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// How much of the gradient one rank, or one token of it, carries under a strategy.
struct rank_weight {
  std::uint64_t valid_tokens = 0;
  std::optional<rational> rank_share_local_means;   ///< the rank's share in the averaged local means
  rational rank_share_objective;                    ///< nᵣ/N
  std::optional<rational> token_weight_local_means; ///< 1/(W·nᵣ); undefined without tokens
  std::optional<rational> token_weight_objective;   ///< 1/N; undefined without tokens
};

/// The weight of every rank and token, measured by the library's gradient on probe updates with the
/// same counts (one token, or one rank's tokens, with derivative 1 and every other derivative 0).
std::vector<rank_weight> measure_rank_weights(const partition& update);

/// The numbers of the derivation demo.
struct derivation_facts {
  demo_input input;                       ///< the update, under the mean reducer
  rational objective;                     ///< ΣSᵣ/N
  std::optional<rational> local_means;    ///< (1/W)Σ Sᵣ/nᵣ
  rational compensated;                   ///< the delivered gradient of W·Sᵣ/N
  std::vector<rational> algebra;          ///< each line of the compensation algebra, evaluated
  std::vector<rank_weight> weights;
  demo_input control;                     ///< the tokens dealt equally
  std::optional<rational> control_local_means;
  rational control_objective;
  rational control_compensated;
  demo_input with_empty_rank;             ///< the update with one more rank that holds no token
  std::optional<rational> empty_local_means;
  rational empty_objective;
  rational empty_compensated;
  std::optional<error_code> all_empty_rejection;  ///< what the library says when no rank holds a token
  std::string all_empty_message;
};

/// Computes the derivation demo on `input` (its reducer is taken to be the mean).
derivation_facts compute_derivation(const demo_input& input);

/// The derivation demo's document.
demo_document derivation_document(const derivation_facts& facts);
/// An SVG figure: each rank's share and one token's weight, averaged local means versus the objective, as bars.
std::string derivation_figure(const derivation_facts& facts);

}  // namespace normcheck
