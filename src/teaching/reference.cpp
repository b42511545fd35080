#include "normcheck/teaching/reference.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"

namespace normcheck {

namespace {

std::string show(const std::optional<rational>& value) {
  return value ? to_string(*value) : std::string("undefined");
}

std::string show_ranks(const std::vector<std::vector<token>>& ranks) {
  std::string out = "[";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    out += r ? ",[" : "[";
    for (std::size_t i = 0; i < ranks[r].size(); ++i)
      out += (i ? "," : "") + (ranks[r][i] ? to_string(*ranks[r][i]) : std::string("null"));
    out += "]";
  }
  return out + "]";
}

// A check that strategy s on the given ranks at θ equals `expected`.
reference_check value_check(const std::vector<std::vector<token>>& ranks, const rational& theta, strategy s,
                            const rational& expected, std::string shows) {
  const partition p = make_partition(ranks, theta);
  const std::optional<rational> actual = gradient(p, s);
  reference_check check;
  check.claim = std::string(strategy_name(s)) + " of " + show_ranks(ranks) + " at θ = " + to_string(theta) +
                " is " + show(actual) + " (expected " + to_string(expected) + ")";
  check.shows = std::move(shows);
  check.passed = actual && *actual == expected;
  return check;
}

}  // namespace

std::vector<reference_check> run_reference_checks() {
  const rational minus_three_halves = rational(-3) / 2;
  const rational half = rational(1) / 2;
  const rational quarter = rational(1) / 4;
  const std::vector<std::vector<token>> unequal{{0}, {2, 2, 2}};
  const std::vector<std::vector<token>> equal{{0, 2}, {2, 2}};
  std::vector<reference_check> checks;

  checks.push_back(value_check(unequal, 0, strategy::global_mean, minus_three_halves,
                               "the objective: the mean derivative over all four valid tokens"));
  checks.push_back(value_check(unequal, 0, strategy::local_mean, -1,
                               "averaging per-rank means weights the ranks equally, not the tokens: it is not the objective"));
  checks.push_back(value_check(unequal, 0, strategy::scaled_sum, minus_three_halves,
                               "scaling each rank's loss sum by W/N cancels the reducer's division by W exactly"));
  checks.push_back(value_check(equal, 0, strategy::scaled_sum, minus_three_halves,
                               "the compensated gradient does not depend on how the tokens are dealt to ranks"));
  checks.push_back(value_check(equal, 0, strategy::local_mean, minus_three_halves,
                               "with equal counts the averaged local means agree: equal partitions are only a control"));
  checks.push_back(value_check({{}, {2, 2}}, 0, strategy::scaled_sum, -2,
                               "a rank without valid tokens contributes exactly zero and the result stays the token mean"));
  {
    const partition p = make_partition(unequal, 1);
    const std::optional<rational> compensated = gradient(p, strategy::scaled_sum);
    const std::optional<rational> objective = gradient(p, strategy::global_mean);
    reference_check check;
    check.claim = "at θ = 1 on " + show_ranks(unequal) + ", scaled_sum " + show(compensated) + " equals global_mean " +
                  show(objective);
    check.shows = "the agreement is not an accident of θ = 0";
    check.passed = compensated && objective && *compensated == *objective;
    checks.push_back(std::move(check));
  }
  {
    // One token with derivative 1 on rank 0, derivative 0 elsewhere: each gradient is that token's weight.
    const partition p = make_partition({{-1}, {0, 0, 0}}, 0);
    const std::optional<rational> rank_weight = gradient(p, strategy::local_mean);
    const std::optional<rational> token_weight = gradient(p, strategy::global_mean);
    reference_check check;
    check.claim = "the weight of rank 0's single token is " + show(rank_weight) + " in the averaged local means but " +
                  show(token_weight) + " in the token mean";
    check.shows = "averaging means gives each rank 1/W of the weight; the objective gives each token 1/N";
    check.passed = rank_weight && token_weight && *rank_weight == half &&
                   *token_weight == quarter && *rank_weight != *token_weight;
    checks.push_back(std::move(check));
  }
  {
    reference_check check;
    check.shows = "an update without valid tokens has no objective; all ranks must reject it together";
    try {
      const std::optional<rational> value = gradient(make_partition({{}, {}}, 0), strategy::scaled_sum);
      check.claim = "the all-empty update [[],[]] gave " + show(value) + " instead of being rejected";
    } catch (const error& e) {
      check.claim = "the all-empty update [[],[]] is rejected with " + std::string(code_name(e.code()));
      check.passed = e.code() == error_code::no_valid_tokens;
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace normcheck
