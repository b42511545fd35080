#include "normcheck/teaching/reference.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/core/normalization.hpp"
#include "normcheck/io/text.hpp"

namespace normcheck {

namespace {

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
                " is " + canonical_or_undefined(actual) + " (expected " + to_string(expected) + ")";
  check.shows = std::move(shows);
  check.passed = actual && *actual == expected;
  return check;
}


// An update of one microbatch per rank, each made of the given sequences, under `objective`.
partition sequenced(const std::vector<std::vector<std::vector<token>>>& ranks, objective_kind objective,
                    const rational& normalizer = 0) {
  partition p;
  p.objective = objective;
  p.normalizer = normalizer;
  for (const std::vector<std::vector<token>>& sequences : ranks) {
    std::vector<group_stats> groups;
    for (const std::vector<token>& sequence : sequences) groups.push_back(summarize(sequence));
    p.ranks.push_back(rank_stats{{make_sequenced_microbatch(std::move(groups))}});
  }
  return p;
}

std::string show_sequences(const std::vector<std::vector<std::vector<token>>>& ranks) {
  std::string out = "[";
  for (std::size_t r = 0; r < ranks.size(); ++r) out += (r ? "," : "") + show_ranks(ranks[r]);
  return out + "]";
}

// The gradient of normalization `name` on `p` counted in `objective`'s units: what code written for that
// objective computes on this update.
std::optional<rational> written_for(const partition& p, objective_kind objective, std::string_view name) {
  return synchronized_gradient(objective_units(p, objective), *find_normalization(name));
}

// A check that `value` is `expected` on `p` (shown as `shown`).
reference_check objective_check(std::string what, const std::optional<rational>& value, const rational& expected,
                                std::string shows) {
  reference_check check;
  check.claim = std::move(what) + " is " + canonical_or_undefined(value) + " (expected " + to_string(expected) + ")";
  check.shows = std::move(shows);
  check.passed = value && *value == expected;
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
  checks.push_back(
      value_check(unequal, 0, strategy::local_mean, -1,
                  "averaging per-rank means weights the ranks equally, not the tokens: it is not the objective"));
  checks.push_back(value_check(unequal, 0, strategy::scaled_sum, minus_three_halves,
                               "scaling each rank's loss sum by W/N cancels the reducer's division by W exactly"));
  checks.push_back(value_check(equal, 0, strategy::scaled_sum, minus_three_halves,
                               "the compensated gradient does not depend on how the tokens are dealt to ranks"));
  checks.push_back(
      value_check(equal, 0, strategy::local_mean, minus_three_halves,
                  "with equal counts the averaged local means agree: equal partitions are only a control"));
  checks.push_back(
      value_check({{}, {2, 2}}, 0, strategy::scaled_sum, -2,
                  "a rank without valid tokens contributes exactly zero and the result stays the token mean"));
  {
    const partition p = make_partition(unequal, 1);
    const std::optional<rational> compensated = gradient(p, strategy::scaled_sum);
    const std::optional<rational> objective = gradient(p, strategy::global_mean);
    reference_check check;
    check.claim = "at θ = 1 on " + show_ranks(unequal) + ", scaled_sum " + canonical_or_undefined(compensated) +
                  " equals global_mean " + canonical_or_undefined(objective);
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
    check.claim = "the weight of rank 0's single token is " + canonical_or_undefined(rank_weight) +
                  " in the averaged local means but " + canonical_or_undefined(token_weight) + " in the token mean";
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
      check.claim = "the all-empty update [[],[]] gave " + canonical_or_undefined(value) + " instead of being rejected";
    } catch (const error& e) {
      check.claim = "the all-empty update [[],[]] is rejected with " + std::string(code_name(e.code()));
      check.passed = e.code() == error_code::no_valid_tokens;
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

std::vector<reference_check> run_objective_checks() {
  // Three sequences of one, one and three tokens: their means are 0, −2 and −2 at θ = 0, their sums 0, −2, −6.
  const std::vector<std::vector<std::vector<token>>> uneven{{{0}, {2}}, {{2, 2, 2}}};
  const std::vector<std::vector<std::vector<token>>> dealt_again{{{2, 2, 2}}, {{0}, {2}}};
  const std::string on = " of " + show_sequences(uneven) + " at θ = 0";
  std::vector<reference_check> checks;

  const partition sequence_mean = sequenced(uneven, objective_kind::sequence_mean);
  checks.push_back(objective_check("sequence_mean: global_mean" + on, gradient(sequence_mean, strategy::global_mean),
                                   rational(rational(-4) / 3),
                                   "the objective: the mean over the update's B = 3 sequences of each sequence's mean "
                                   "derivative"));
  checks.push_back(objective_check("sequence_mean: scaled_sum" + on, gradient(sequence_mean, strategy::scaled_sum),
                                   rational(rational(-4) / 3),
                                   "dividing each sequence's sum by its nₛ and each rank's total by B/W cancels the "
                                   "reducer's division by W exactly"));
  {
    const std::optional<rational> token_code = written_for(sequence_mean, objective_kind::token_mean, "scaled_sum");
    const std::optional<rational> objective = gradient(sequence_mean, strategy::global_mean);
    reference_check check;
    check.claim = "sequence_mean: the token mean's W·Sᵣ/N" + on + " is " + canonical_or_undefined(token_code) +
                  ", the objective " + canonical_or_undefined(objective);
    check.shows = "code written for the token mean weighs every token 1/N, so the long sequence outweighs the short "
                  "ones: it is not the sequence mean";
    check.passed = token_code && objective && *token_code == rational(rational(-8) / 5) && *token_code != *objective;
    checks.push_back(std::move(check));
  }
  checks.push_back(objective_check(
      "sequence_mean: scaled_sum of " + show_sequences(dealt_again) + " at θ = 0",
      gradient(sequenced(dealt_again, objective_kind::sequence_mean), strategy::scaled_sum), rational(rational(-4) / 3),
      "the compensated sequence mean does not depend on how the sequences are dealt to "
      "ranks"));
  {
    const partition sums = sequenced(uneven, objective_kind::sequence_sum_mean);
    const std::optional<rational> compensated = gradient(sums, strategy::scaled_sum);
    reference_check check =
        objective_check("sequence_sum_mean: scaled_sum" + on, compensated, rational(rational(-8) / 3),
                        "the mean of sequence sums: W·Sᵣ/B gives every token 1/B, with or "
                        "without the sequences' lengths");
    check.passed = check.passed && gradient(sums, strategy::global_mean) == compensated;
    checks.push_back(std::move(check));
  }
  {
    // Dr. GRPO's normalizer: the update's sequences times the longest one, 3 · 3.
    const partition constant = sequenced(uneven, objective_kind::constant, rational(9));
    const std::optional<rational> compensated = gradient(constant, strategy::scaled_sum);
    const std::optional<rational> token_code = written_for(constant, objective_kind::token_mean, "scaled_sum");
    reference_check check = objective_check("constant C = 9: scaled_sum" + on, compensated, rational(rational(-8) / 9),
                                            "a declared normalizer C replaces N: W·Sᵣ/C, and the token mean's "
                                            "W·Sᵣ/N (here " + canonical_or_undefined(token_code) + ") is not it");
    check.passed = check.passed && gradient(constant, strategy::global_mean) == compensated && token_code &&
                   *token_code != *compensated;
    checks.push_back(std::move(check));
  }
  {
    reference_check check;
    check.shows = "an update whose every sequence is empty has no sequence mean; all ranks must reject it together";
    try {
      const std::optional<rational> value =
          gradient(sequenced({{{}}, {{}, {}}}, objective_kind::sequence_mean), strategy::scaled_sum);
      check.claim = "sequence_mean: the update of empty sequences [[[]],[[],[]]] gave " +
                    canonical_or_undefined(value) + " instead of being rejected";
    } catch (const error& e) {
      check.claim = "sequence_mean: the update of empty sequences [[[]],[[],[]]] is rejected with " +
                    std::string(code_name(e.code()));
      check.passed = e.code() == error_code::no_valid_tokens;
    }
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace normcheck
