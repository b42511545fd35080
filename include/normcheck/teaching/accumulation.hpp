#pragma once
/// \file teaching/accumulation.hpp
/// The accumulation demo: a denominator per microbatch, a global count per microbatch, and the
/// update's N; only the last gives every token the weight 1/N.

#include "normcheck/teaching/demo_input.hpp"
#include "normcheck/teaching/document.hpp"

#include <optional>
#include <vector>

namespace normcheck {

/// The weight of one token in one microbatch under each accumulation.
struct microbatch_weight {
  std::size_t rank = 0;
  std::size_t microbatch = 0;
  std::uint64_t valid_tokens = 0;
  std::optional<rational> per_microbatch_mean;   ///< microbatch_mean: 1/(W·Gᵣ·nᵣₘ)
  std::optional<rational> per_microbatch_count;  ///< global count per microbatch: 1/(G·Nₘ)
  std::optional<rational> update_count;          ///< the update's N: 1/N
};

/// The numbers of the accumulation demo.
struct accumulation_facts {
  demo_input input;
  rational objective;
  std::optional<rational> microbatch_means;          ///< microbatch_mean
  std::optional<rational> rank_means;                ///< local_mean over the whole update
  std::optional<rational> microbatch_global_counts;  ///< (1/G)Σₘ ΣᵣSᵣₘ/Nₘ; needs the same G on every rank
  std::vector<rational> slice_objectives;            ///< ΣᵣSᵣₘ/Nₘ per microbatch index m
  rational update_count;                             ///< scaled_sum with the update's N
  std::vector<microbatch_weight> weights;
  demo_input control;                                ///< equal microbatch counts
  std::optional<rational> control_microbatch_means;
  rational control_objective;
  demo_input with_empty_microbatch;                  ///< rank 0 gets one more microbatch, without tokens
  std::optional<rational> empty_microbatch_means;
  rational empty_objective;
  rational empty_update_count;
};

/// Computes the accumulation demo on `input` (mean reducer).
accumulation_facts compute_accumulation(const demo_input& input);

/// The accumulation demo's document.
demo_document accumulation_document(const accumulation_facts& facts);

}  // namespace normcheck
