// The laws of the weighted objective L = Σwᵢℓᵢ / Σwᵢ (the mistakes each one catches are in mutation_test.cpp).

#include "laws.hpp"
#include "generators.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using namespace normcheck::properties;

TEST_CASE("weighted compensation") {
  CHECK(rc::check("the objective is Σw·(θ − y)/Σw", weighted_compensation(objective_gradient())));
  CHECK(rc::check("the compensation gives the weighted objective", weighted_compensation()));
}

TEST_CASE("unit weights give the token mean") {
  CHECK(rc::check("unit weights: objective", unit_weights(objective_gradient())));
  CHECK(rc::check("unit weights: compensation", unit_weights()));
}

TEST_CASE("scaling every weight changes nothing") {
  for (const normalization_under_test& n : {objective_gradient(), compensated(), local_means_averaged(),
                                            w_factor_dropped(), w_applied_under_sum(), per_microbatch_denominator()})
    CHECK(rc::check("weight scaling for " + n.name, weight_scaling(n)));
}

TEST_CASE("zero-mass rejection") { CHECK(rc::check("zero-mass rejection", zero_mass_rejection())); }
