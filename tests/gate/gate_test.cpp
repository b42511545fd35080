// The gate's pieces on hand-derived examples: the bound, each check, diagnosis, and suggest.

#include "normcheck/gate/gate.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/gate/suggest.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using namespace normcheck;

observed_result observed_at(const rational& value, dtype type) {
  observed_result observed;
  observed.per_rank.push_back(value);
  observed.type = type;
  return observed;
}

std::vector<std::string> names(const std::vector<explanation>& list) {
  std::vector<std::string> out;
  for (const explanation& e : list) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

const gate_check& check_named(const gate_result& result, std::string_view name) {
  return *std::find_if(result.checks.begin(), result.checks.end(), [&](const gate_check& c) { return c.name == name; });
}

struct suggest_shape {
  std::uint64_t world;
  std::uint64_t microbatches;
};

// The shapes suggest is asked for: W from 2 to 8 with 1, 2 and 3 microbatches. Under the sanitizers, where suggest
// runs ten to twenty times slower, one microbatch count per W, in turn, so that every W and every count is still
// asked for (the dev build asks for all 21).
std::vector<suggest_shape> suggest_shapes() {
  std::vector<suggest_shape> shapes;
  for (std::uint64_t world = 2; world <= 8; ++world)
    for (std::uint64_t microbatches = 1; microbatches <= 3; ++microbatches)
#ifdef NORMCHECK_SANITIZED
      if (microbatches == 1 + world % 3)
#endif
        shapes.push_back({world, microbatches});
  return shapes;
}

}  // namespace

TEST_CASE("unit roundoff of each dtype") {
  CHECK(unit_roundoff(dtype::float64) == rational(1) / (rational(integer(1) << 53)));
  CHECK(unit_roundoff(dtype::float32) == rational(1) / (1 << 24));
  CHECK(unit_roundoff(dtype::bfloat16) == rational(1) / (1 << 8));
  CHECK(unit_roundoff(dtype::float16) == rational(1) / (1 << 11));
  CHECK(unit_roundoff(dtype::exact) == 0);
}

TEST_CASE("the objective bound is gamma of K roundings times the magnitude over N") {
  // [[0],[2,2,2]] at θ = 0: K = 3 (longest microbatch) + 1 (microbatches) + 2 (W) + 3 = 9,
  // γ₉ = 9u/(1 − 9u) = 9/(2^24 − 9) for float32, Σ|θ − y| = 6, N = 4.
  const partition p = make_partition({{0}, {2, 2, 2}});
  const std::optional<rational> bound = objective_bound(p, dtype::float32);
  REQUIRE(bound);
  CHECK(*bound == rational(6) / 4 * 9 / ((1 << 24) - 9));
  CHECK(*objective_bound(p, dtype::exact) == 0);
  SUBCASE("a dtype that cannot resolve the computation has no bound") {
    std::vector<token> many(300, token(rational(1)));
    CHECK_FALSE(objective_bound(make_partition({many, {1}}), dtype::bfloat16).has_value());
  }
}

TEST_CASE("an exact observation of the objective passes on a separating partition") {
  const partition p = make_partition({{0}, {2, 2, 2}});
  const gate_result result = run_gate(p, observed_at(rational(-3) / 2, dtype::exact));
  CHECK(result.verdict == gate_verdict::pass);
  CHECK(result.diagnosis.empty());
  CHECK(result.could_hide.empty());
}

TEST_CASE("each classic mistake is named by the diagnosis") {
  const partition mean = make_partition({{0}, {2, 2, 2}});
  SUBCASE("local mean") {
    const gate_result r = run_gate(mean, observed_at(-1, dtype::float64));
    CHECK(r.verdict == gate_verdict::fail);
    CHECK(names(r.diagnosis) == std::vector<std::string>{"local_mean"});
  }
  SUBCASE("missing world-size factor") {
    const gate_result r = run_gate(mean, observed_at(rational(-3) / 4, dtype::float64));
    CHECK(names(r.diagnosis) == std::vector<std::string>{"global_share", "objective/W"});
  }
  SUBCASE("world-size factor under a summing reducer") {
    const partition sum = make_partition({{0}, {2, 2, 2}}, 0, reducer_kind::sum);
    const gate_result r = run_gate(sum, observed_at(-3, dtype::float64));
    CHECK(names(r.diagnosis) == std::vector<std::string>{"objective×W", "scaled_sum"});
  }
  SUBCASE("nothing fits: unexplained with the exact ratio") {
    const gate_result r = run_gate(mean, observed_at(rational(-7) / 5, dtype::float64));
    CHECK(r.verdict == gate_verdict::fail);
    CHECK(r.diagnosis.empty());
    REQUIRE(r.ratio);
    CHECK(*r.ratio == rational(14) / 15);
  }
}

TEST_CASE("equal counts make the local-mean bug indistinguishable: inconclusive") {
  const partition p = make_partition({{0, 2}, {2, 2}});
  const gate_result r = run_gate(p, observed_at(rational(-3) / 2, dtype::float32));
  CHECK(r.verdict == gate_verdict::inconclusive);
  CHECK(names(r.could_hide) == std::vector<std::string>{"local_mean"});
}

TEST_CASE("replica agreement names the first disagreeing rank") {
  const partition p = make_partition({{0}, {2, 2, 2}, {1}});
  observed_result observed = observed_at(rational(-5) / 4, dtype::exact);
  observed.from_per_rank = true;
  observed.per_rank = {rational(rational(-5) / 4), rational(rational(-5) / 4), rational(-1)};
  const gate_result r = run_gate(p, observed);
  CHECK(r.verdict == gate_verdict::fail);
  const gate_check& replicas = check_named(r, "replica_agreement");
  CHECK_FALSE(replicas.passed);
  CHECK(replicas.detail.find("rank 2 holds -1 but rank 0 holds -5/4") != std::string::npos);
}

TEST_CASE("the denominator check names padding and rank-local counts") {
  const partition p = make_partition({{0, std::nullopt}, {2, 2, 2, std::nullopt, std::nullopt}});
  observed_result observed = observed_at(rational(-3) / 2, dtype::exact);
  SUBCASE("padding counted") {
    observed.global_tokens = 7;
    const gate_result r = run_gate(p, observed);
    const gate_check& c = check_named(r, "denominator");
    CHECK_FALSE(c.passed);
    CHECK(c.detail.find("counts the 3 positions that hold no valid token") != std::string::npos);
  }
  SUBCASE("a rank's own count") {
    observed.global_tokens = 3;
    const gate_result r = run_gate(p, observed);
    const gate_check& c = check_named(r, "denominator");
    CHECK(c.detail.find("rank 1's local count") != std::string::npos);
  }
  SUBCASE("per-rank counts with padding") {
    observed.rank_tokens = {1, 5};
    const gate_result r = run_gate(p, observed);
    const gate_check& c = check_named(r, "denominator");
    INFO(c.detail);
    CHECK(c.detail.find("rank 1 counted 5 tokens but holds 3 valid ones: its count includes the 2 positions") !=
          std::string::npos);
  }
  SUBCASE("right counts pass") {
    observed.global_tokens = 4;
    observed.rank_tokens = {1, 3};
    const gate_result r = run_gate(p, observed);
    CHECK(check_named(r, "denominator").passed);
  }
}

TEST_CASE("an explicit tolerance replaces the derived bound") {
  const partition p = make_partition({{0}, {2, 2, 2}});
  observed_result observed = observed_at(rational(-3) / 2 + rational(1) / 1000, dtype::float32);
  CHECK(run_gate(p, observed).verdict == gate_verdict::fail);
  observed.explicit_tolerance = tolerance{rational(1) / 100, 0};
  const gate_result r = run_gate(p, observed);
  CHECK(r.bound_is_explicit);
  CHECK(r.verdict == gate_verdict::pass);
}

TEST_CASE("suggest separates every named mistake by at least 100 float32 bounds") {
  for (const suggest_shape& shape : suggest_shapes()) {
    CAPTURE(shape.world);
    CAPTURE(shape.microbatches);
    const suggestion s = suggest_partition(shape.world, shape.microbatches, dtype::float32);
    CHECK(s.separation >= required_separation);
    CHECK(to_partition(s.tokens).world_size() == shape.world);
  }
}

TEST_CASE("suggest separates the weighted objective's mistakes too, count_denominator included") {
  for (const suggest_shape& shape : suggest_shapes()) {
    CAPTURE(shape.world);
    CAPTURE(shape.microbatches);
    const suggestion s =
        suggest_partition(shape.world, shape.microbatches, dtype::float32, objective_kind::weighted_token_mean);
    CHECK(s.separation >= required_separation);
    const partition update = to_partition(s.tokens);
    CHECK(update.objective == objective_kind::weighted_token_mean);
    CHECK(update.mass() != rational(update.valid_tokens()));  // else count_denominator would be invisible
  }
}

TEST_CASE("suggest is asked for every world size and microbatch count") {
  std::vector<std::uint64_t> worlds, counts;
  for (const suggest_shape& shape : suggest_shapes()) {
    worlds.push_back(shape.world);
    counts.push_back(shape.microbatches);
  }
  for (std::uint64_t world = 2; world <= 8; ++world)
    CHECK(std::count(worlds.begin(), worlds.end(), world) >= 1);
  for (std::uint64_t microbatches = 1; microbatches <= 3; ++microbatches)
    CHECK(std::count(counts.begin(), counts.end(), microbatches) >= 1);
}

TEST_CASE("suggest cannot separate the local mean with one rank and says so") {
  const suggestion s = suggest_partition(1, 1, dtype::float32);
  CHECK(s.separation == 0);
  CHECK(s.closest_pair.find("local_mean") != std::string::npos);
}

TEST_CASE("a reduction in another dtype bounds the local roundings at u and the all-reduce's at its u") {
  // [[0],[2,2,2]]: 7 local roundings (3 + 1 + 3) in float32, then W + 2 = 4 in float16 (the conversion in
  // and out, W − 1 additions and the division by W): γ₇(2⁻²⁴) + γ₄(2⁻¹¹) + their product, times 6/4.
  const partition p = make_partition({{0}, {2, 2, 2}});
  const rational local = rational(7) / ((1 << 24) - 7);
  const rational reduction = rational(4) / ((1 << 11) - 4);
  const std::optional<rational> bound = objective_bound(p, dtype::float32, dtype::float16);
  REQUIRE(bound);
  CHECK(*bound == (local + reduction + local * reduction) * 6 / 4);
  CHECK(*objective_bound(p, dtype::float32, dtype::float32) == *objective_bound(p, dtype::float32));
  SUBCASE("a value off by a float16 rounding passes only when the reduction's dtype is declared") {
    observed_result observed = observed_at(rational(-3) / 2 * (1 + rational(1, 2048)), dtype::float32);
    CHECK(run_gate(p, observed).verdict == gate_verdict::fail);
    observed.reduction_type = dtype::float16;
    const gate_result declared = run_gate(p, observed);
    CHECK(declared.verdict == gate_verdict::pass);
    REQUIRE(declared.reduction_type);
    CHECK(*declared.reduction_type == dtype::float16);
  }
}

TEST_CASE("NaN after a mean over an empty microbatch is a failure that names where the mean was taken") {
  const partition with_hole = make_accumulated_partition({{{0, 2}, {std::nullopt}}, {{2}, {2}}});
  observed_result observed;
  observed.per_rank = {non_finite::nan, non_finite::nan};
  observed.from_per_rank = true;
  observed.type = dtype::float32;
  const gate_result result = run_gate(with_hole, observed);
  CHECK(result.verdict == gate_verdict::fail);
  CHECK(check_named(result, "replica_agreement").passed);  // every rank holds the same NaN
  CHECK_FALSE(check_named(result, "objective").passed);
  CHECK(names(result.diagnosis) == std::vector<std::string>{"mean_of_empty"});
  CHECK(result.diagnosis.front().computed.find("rank 0, microbatch 1") != std::string::npos);
  CHECK(to_string(result.observed) == "nan");
  SUBCASE("without an empty microbatch nothing explains it") {
    const gate_result unexplained = run_gate(make_accumulated_partition({{{0, 2}, {1}}, {{2}, {2}}}), observed);
    CHECK(unexplained.verdict == gate_verdict::fail);
    CHECK(unexplained.diagnosis.empty());
  }
  SUBCASE("an infinity is not a mean over nothing") {
    observed.per_rank = {non_finite::positive_infinity, non_finite::positive_infinity};
    const gate_result infinite = run_gate(with_hole, observed);
    CHECK(infinite.verdict == gate_verdict::fail);
    CHECK(infinite.diagnosis.empty());
  }
  SUBCASE("NaN on one rank and a number on another is a divergence too") {
    observed.per_rank = {non_finite::nan, rational(-1)};
    const gate_result diverged = run_gate(with_hole, observed);
    CHECK_FALSE(check_named(diverged, "replica_agreement").passed);
  }
}

TEST_CASE("count_padding is the objective scaled by N over the positions, and only when there is padding") {
  const partition padded = make_partition({{0, std::nullopt}, {2, 2, 2, std::nullopt, std::nullopt}});
  std::vector<explanation> mistakes = known_mistakes(padded, dtype::float32);
  const auto found =
      std::find_if(mistakes.begin(), mistakes.end(), [](const explanation& e) { return e.name == "count_padding"; });
  REQUIRE(found != mistakes.end());
  CHECK(std::get<rational>(found->value) == rational(-3) / 2 * rational(4, 7));
  const gate_result result = run_gate(padded, observed_at(rational(-3) / 2 * rational(4, 7), dtype::exact));
  CHECK(names(result.diagnosis) == std::vector<std::string>{"count_padding"});
  mistakes = known_mistakes(make_partition({{0}, {2, 2, 2}}), dtype::float32);
  CHECK(std::none_of(mistakes.begin(), mistakes.end(), [](const explanation& e) { return e.name == "count_padding"; }));
}

TEST_CASE("divided_by names a rank that divided by its own count or its microbatch's") {
  const partition p = make_accumulated_partition({{{0}, {2, 2}}, {{2}}});
  observed_result observed = observed_at(rational(-1), dtype::exact);
  SUBCASE("the update's N on every rank passes the denominator check") {
    observed.divided_by = {{rational(4)}, {rational(4)}};
    const gate_result result = run_gate(p, observed);
    CHECK(check_named(result, "denominator").passed);
  }
  SUBCASE("counted right, divided by its own count") {
    observed.divided_by = {{rational(3)}, {rational(4)}};
    const gate_result result = run_gate(p, observed);
    const gate_check& check = check_named(result, "denominator");
    CHECK_FALSE(check.passed);
    CHECK(check.detail.find("rank 0 divided by 3, not by the update's N = 4") != std::string::npos);
    CHECK(check.detail.find("counted right, but divided by its own count") != std::string::npos);
  }
  SUBCASE("one divisor per microbatch, the second the microbatch's own count") {
    observed.divided_by = {{rational(4), rational(2)}, {rational(4)}};
    const gate_result result = run_gate(p, observed);
    const gate_check& check = check_named(result, "denominator");
    CHECK_FALSE(check.passed);
    CHECK(check.detail.find("rank 0, microbatch 1 divided by 2") != std::string::npos);
    CHECK(check.detail.find("microbatch_mean") != std::string::npos);
  }
}

TEST_CASE("suggest for counts keeps the counts and finds what they cannot separate") {
  SUBCASE("equal rank counts hide local_mean whatever the targets") {
    const suggestion s = suggest_for_counts({{4}, {4}}, dtype::float32);
    // One microbatch a rank: the sum of microbatch means is the local mean.
    CHECK(s.inseparable == std::vector<std::string>{"local_mean", "sum_of_microbatch_means"});
    const partition update = to_partition(s.tokens);
    CHECK(update.ranks[0].valid_tokens() == 4);
    CHECK(update.ranks[1].valid_tokens() == 4);
  }
  SUBCASE("uneven counts separate every mistake by the required bounds") {
    const suggestion s = suggest_for_counts({{3, 1}, {2, 5}, {0, 4}}, dtype::float32);
    CHECK(s.inseparable.empty());
    CHECK(s.separation >= required_separation);
    const partition update = to_partition(s.tokens);
    const std::vector<std::vector<std::uint64_t>> expected{{3, 1}, {2, 5}, {0, 4}};
    for (std::size_t r = 0; r < expected.size(); ++r)
      for (std::size_t m = 0; m < expected[r].size(); ++m)
        CHECK(update.ranks[r].microbatches[m].valid_tokens == expected[r][m]);
  }
  SUBCASE("equal microbatch counts everywhere make the two means ambiguous") {
    const suggestion s = suggest_for_counts({{2, 2}, {2, 2}}, dtype::float32);
    CHECK(s.ambiguous == std::vector<std::string>{"local_mean and microbatch_mean"});
  }
}

TEST_CASE("a counts file is read with its errors located") {
  const update_counts counts = read_counts(R"({"counts": [[3, 0], [2]]})", "c.json");
  CHECK(counts == update_counts{{3, 0}, {2}});
  auto code_at = [](std::string_view text) {
    try {
      (void)read_counts(text, "c.json");
    } catch (const error& e) {
      return std::string(code_name(e.code())) + " at " + std::to_string(e.where()->column);
    }
    return std::string("accepted");
  };
  CHECK(code_at(R"({"counts": [[-1]]})") == "schema_error at 14");
  CHECK(code_at(R"({"counts": [[]]})") == "schema_error at 13");
  CHECK(code_at(R"({"counts": [[0], [0]]})") == "no_valid_tokens at 1");
  CHECK(code_at(R"({"counts": [[20000000]]})") == "limit_exceeded at 14");
  CHECK(code_at(R"({"count": [[1]]})") == "schema_error at 2");
}
