#pragma once
/// \file teaching/disguise.hpp
/// The disguise demo: a gradient off by k next to the correct gradient with the learning rate times k,
/// under each optimizer feature, exactly; where the two runs part.

#include "normcheck/core/gradients.hpp"
#include "normcheck/teaching/demo_input.hpp"
#include "normcheck/teaching/document.hpp"
#include "normcheck/teaching/trajectory.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// The disguise demo's settings (read from literals through the one door).
struct disguise_parameters {
  rational learning_rate;  ///< η of the mistaken run; the disguised run uses k·η
  rational weight_decay;   ///< λ
  rational momentum;       ///< μ
  std::size_t steps = 8;
};

/// η = 0.1, λ = 0.1, μ = 0.9, 8 steps.
disguise_parameters default_disguise_parameters();

/// One optimizer, run twice: the scaled gradient with η, and the correct gradient with k·η.
struct disguise_run {
  std::string feature;
  optimizer_settings mistaken;
  optimizer_settings disguised;
  std::vector<rational> mistaken_path;
  std::vector<rational> disguised_path;
  std::optional<parting> parts;
};

/// The numbers of the disguise demo.
struct disguise_facts {
  demo_input input;
  strategy mistake;          ///< the local scalar whose gradient is off by k under the update's reducer
  rational factor;           ///< k, computed as the mistaken gradient over the objective's
  rational optimum;          ///< where the objective's gradient vanishes (the target mean)
  rational start;            ///< x₀: the update's θ
  rational clip_threshold;   ///< |∇L(x₀)|: the largest gradient the correct run sees
  disguise_parameters parameters;
  std::vector<disguise_run> runs;  ///< plain SGD first, then each feature
};

/// The mistake the disguise demo uses under a reducer: scaled_sum (off by W) under sum, local_sum (off by N/W) under
/// mean.
strategy disguise_mistake(reducer_kind reducer);

/// Computes the disguise demo: k from the library, then both runs for every optimizer feature.
disguise_facts compute_disguise(const demo_input& input, const disguise_parameters& parameters);

/// The disguise demo's document.
demo_document disguise_document(const disguise_facts& facts);
/// An SVG figure: the two runs of every optimizer as lines, with the step where they part marked.
std::string disguise_figure(const disguise_facts& facts);

}  // namespace normcheck
