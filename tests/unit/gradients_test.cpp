// The six gradient strategies (gradients.hpp) against values derived by hand. Each expected value is
// written out with its derivation: Sᵣ = nᵣθ − Σy, then the local scalar, then the reducer.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

namespace {

using normcheck::integer;
using normcheck::partition;
using normcheck::rational;
using normcheck::reducer_kind;
using normcheck::strategy;
using normcheck::token;

rational rational_of(long p, long q) { return rational(integer(p), integer(q)); }

// The gradient as canonical text, or "undefined".
std::string shown(const partition& p, strategy s) {
  const std::optional<rational> value = normcheck::gradient(p, s);
  return value ? normcheck::to_string(*value) : std::string("undefined");
}

// The six gradients in report order, as text.
std::vector<std::string> all_shown(const partition& p) {
  std::vector<std::string> out;
  for (const std::optional<rational>& value : normcheck::compute_gradients(p))
    out.push_back(value ? normcheck::to_string(*value) : std::string("undefined"));
  return out;
}

using list = std::vector<std::string>;

// [[0], [2, 2, 2]] at θ = 0: S₀ = 0, S₁ = −6, n = (1, 3), N = 4, W = 2.
partition unequal(reducer_kind reducer) { return normcheck::make_partition({{token{0}}, {2, 2, 2}}, 0, reducer); }

}  // namespace

TEST_CASE("the six strategies on an unequal partition under the mean reducer") {
  const partition p = unequal(reducer_kind::mean);
  CHECK(shown(p, strategy::global_mean) == "-3/2");      // −6/4
  CHECK(shown(p, strategy::local_mean) == "-1");         // (0/1 + −6/3)/2
  CHECK(shown(p, strategy::local_sum) == "-3");          // (0 + −6)/2
  CHECK(shown(p, strategy::scaled_sum) == "-3/2");       // (0 + 2·(−6)/4)/2
  CHECK(shown(p, strategy::global_share) == "-3/4");     // (0 + −6/4)/2
  CHECK(shown(p, strategy::microbatch_mean) == "-1");    // one microbatch per rank: the local mean
}

TEST_CASE("the six strategies on an unequal partition under the sum reducer") {
  const partition p = unequal(reducer_kind::sum);
  CHECK(shown(p, strategy::global_mean) == "-3/2");      // independent of the reducer
  CHECK(shown(p, strategy::local_mean) == "-2");         // 0/1 + −6/3
  CHECK(shown(p, strategy::local_sum) == "-6");          // 0 + −6
  CHECK(shown(p, strategy::scaled_sum) == "-3");         // 2·(−6)/4: W times the objective
  CHECK(shown(p, strategy::global_share) == "-3/2");     // −6/4: the objective
  CHECK(shown(p, strategy::microbatch_mean) == "-2");
}

TEST_CASE("on an equal partition the averaged local means agree with the objective") {
  // [[0, 2], [2, 2]] at θ = 0: S = (−2, −4), n = (2, 2), N = 4, W = 2.
  const partition p = normcheck::make_partition({{0, 2}, {2, 2}});
  CHECK(all_shown(p) == list{"-3/2", "-3/2", "-3", "-3/2", "-3/4", "-3/2"});
  // (−2/2 + −4/2)/2 = −3/2; (−6)/2 = −3; (2·(−6)/4)/2 = −3/2; (−6/4)/2 = −3/4
}

TEST_CASE("an empty rank makes the local means undefined but not the compensated gradient") {
  // [[], [2, 2]] at θ = 0: S = (0, −4), n = (0, 2), N = 2, W = 2.
  const partition p = normcheck::make_partition({{}, {2, 2}});
  CHECK(shown(p, strategy::global_mean) == "-2");
  CHECK(shown(p, strategy::local_mean) == "undefined");
  CHECK(shown(p, strategy::local_sum) == "-2");          // (0 + −4)/2, equal by accident: N = W
  CHECK(shown(p, strategy::scaled_sum) == "-2");         // (0 + 2·(−4)/2)/2
  CHECK(shown(p, strategy::global_share) == "-1");       // (0 + −4/2)/2
  CHECK(shown(p, strategy::microbatch_mean) == "undefined");
}

TEST_CASE("a rank of padding only is an empty rank") {
  // [[null, null], [4, 2, 6]] at θ = 1: S = (0, 3 − 12 = −9), n = (0, 3), N = 3, W = 2.
  const partition p = normcheck::make_partition({{std::nullopt, std::nullopt}, {4, 2, 6}}, 1);
  CHECK(all_shown(p) == list{"-3", "undefined", "-9/2", "-3", "-3/2", "undefined"});
}

TEST_CASE("uneven microbatches under the mean reducer") {
  // Rank 0: microbatches [1] and [3, 5, null]; rank 1: [2, 6]; θ = 1.
  // Rank 0: S₀₀ = 1 − 1 = 0 (n 1), S₀₁ = 2 − 8 = −6 (n 2): S₀ = −6, n₀ = 3, G₀ = 2.
  // Rank 1: S₁ = 2 − 8 = −6, n₁ = 2, G₁ = 1. N = 5, W = 2.
  const partition p = normcheck::make_accumulated_partition({{{1}, {3, 5, std::nullopt}}, {{2, 6}}}, 1);
  CHECK(shown(p, strategy::global_mean) == "-12/5");      // −12/5
  CHECK(shown(p, strategy::local_mean) == "-5/2");        // (−6/3 + −6/2)/2
  CHECK(shown(p, strategy::local_sum) == "-6");           // (−6 + −6)/2
  CHECK(shown(p, strategy::scaled_sum) == "-12/5");       // (2·(−12)/5)/2
  CHECK(shown(p, strategy::global_share) == "-6/5");      // (−12/5)/2
  CHECK(shown(p, strategy::microbatch_mean) == "-9/4");   // ((0/1 + −6/2)/2 + −6/2)/2 = (−3/2 − 3)/2
}

TEST_CASE("uneven microbatches under the sum reducer") {
  const partition p =
      normcheck::make_accumulated_partition({{{1}, {3, 5, std::nullopt}}, {{2, 6}}}, 1, reducer_kind::sum);
  CHECK(all_shown(p) == list{"-12/5", "-5", "-12", "-24/5", "-12/5", "-9/2"});
}

TEST_CASE("an empty microbatch makes microbatch_mean undefined only") {
  // Rank 0: [1] and []; rank 1: [2] and [4]; θ = 0. S = (−1, −6), n = (1, 2), N = 3.
  const partition p = normcheck::make_accumulated_partition({{{1}, {}}, {{2}, {4}}});
  CHECK(shown(p, strategy::global_mean) == "-7/3");
  CHECK(shown(p, strategy::local_mean) == "-2");          // (−1/1 + −6/2)/2
  CHECK(shown(p, strategy::scaled_sum) == "-7/3");
  CHECK(shown(p, strategy::microbatch_mean) == "undefined");
}

TEST_CASE("microbatches of equal counts make microbatch_mean the objective") {
  // Rank 0: [1, 3] and [5, 7]; rank 1: [2, 2] and [0, 4]; θ = 0; every microbatch holds 2 tokens.
  // Microbatch means: rank 0 (−2, −6) → −4, rank 1 (−2, −2) → −2; (−4 + −2)/2 = −3 = −24/8.
  const partition p = normcheck::make_accumulated_partition({{{1, 3}, {5, 7}}, {{2, 2}, {0, 4}}});
  CHECK(all_shown(p) == list{"-3", "-3", "-12", "-3", "-3/2", "-3"});
}

TEST_CASE("local_sum equals the objective under the mean reducer exactly when N equals W") {
  // [[1], [3]] at θ = 0: N = W = 2, (−1 + −3)/2 = −2 = −4/2.
  const partition equal = normcheck::make_partition({{1}, {3}});
  CHECK(shown(equal, strategy::local_sum) == shown(equal, strategy::global_mean));
  const partition unequal_counts = normcheck::make_partition({{1}, {3, 3}});
  CHECK(shown(unequal_counts, strategy::local_sum) != shown(unequal_counts, strategy::global_mean));
}

TEST_CASE("theta enters every derivative sum") {
  // [[0], [2, 2, 2]] at θ = 1: S = (1, 3 − 6 = −3), N = 4.
  const partition p = normcheck::make_partition({{0}, {2, 2, 2}}, 1);
  CHECK(all_shown(p) == list{"-1/2", "0", "-1", "-1/2", "-1/4", "0"});
  // local_mean (1/1 + −3/3)/2 = 0; local_sum (1 − 3)/2 = −1; scaled_sum (2·(−2)/4)/2 = −1/2
}

TEST_CASE("no valid token throws no_valid_tokens for every strategy") {
  for (const partition& p : {normcheck::make_partition({{}, {}}),
                             normcheck::make_partition({{std::nullopt}, {std::nullopt, std::nullopt}}),
                             normcheck::make_accumulated_partition({{{}, {std::nullopt}}})}) {
    CHECK_THROWS_AS(normcheck::require_valid_tokens(p), normcheck::error);
    CHECK_THROWS_AS(normcheck::compute_gradients(p), normcheck::error);
    for (strategy s : normcheck::all_strategies) {
      const std::string name(normcheck::strategy_name(s));
      CAPTURE(name);
      try {
        (void)normcheck::gradient(p, s);
        FAIL("no exception for an update without valid tokens");
      } catch (const normcheck::error& e) {
        CHECK(e.code() == normcheck::error_code::no_valid_tokens);
      }
    }
  }
  CHECK_NOTHROW(normcheck::require_valid_tokens(normcheck::make_partition({{}, {1}})));
}

TEST_CASE("strategy names round-trip and each has a formula") {
  const std::vector<std::string> names{"global_mean",  "local_mean",   "local_sum",
                                       "scaled_sum",   "global_share", "microbatch_mean"};
  REQUIRE(normcheck::all_strategies.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(normcheck::strategy_name(normcheck::all_strategies[i]) == names[i]);
    CHECK(normcheck::strategy_from_name(names[i]) == normcheck::all_strategies[i]);
    CHECK_FALSE(normcheck::strategy_formula(normcheck::all_strategies[i]).empty());
  }
  CHECK_FALSE(normcheck::strategy_from_name("Global_mean").has_value());
  CHECK_FALSE(normcheck::strategy_from_name("").has_value());
}

TEST_CASE("every computed gradient is canonical") {
  const partition p = normcheck::make_accumulated_partition({{{1}, {3, 5, std::nullopt}}, {{2, 6}}, {{7, 7, 7}}},
                                                            rational_of(1, 3));
  for (const std::optional<rational>& value : normcheck::compute_gradients(p)) {
    REQUIRE(value.has_value());
    CHECK(normcheck::is_canonical(*value));
  }
}
