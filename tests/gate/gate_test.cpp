// The gate's pieces on hand-derived examples: the bound, each check, diagnosis, and suggest.

#include "normcheck/gate/gate.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/gate/suggest.hpp"

#include <doctest/doctest.h>

#include <algorithm>

namespace {

using namespace normcheck;

observed_result observed_value(const rational& value, dtype type) {
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
  const gate_result result = run_gate(p, observed_value(rational(-3) / 2, dtype::exact));
  CHECK(result.verdict == gate_verdict::pass);
  CHECK(result.diagnosis.empty());
  CHECK(result.could_hide.empty());
}

TEST_CASE("each classic mistake is named by the diagnosis") {
  const partition mean = make_partition({{0}, {2, 2, 2}});
  SUBCASE("local mean") {
    const gate_result r = run_gate(mean, observed_value(-1, dtype::float64));
    CHECK(r.verdict == gate_verdict::fail);
    CHECK(names(r.diagnosis) == std::vector<std::string>{"local_mean"});
  }
  SUBCASE("missing world-size factor") {
    const gate_result r = run_gate(mean, observed_value(rational(-3) / 4, dtype::float64));
    CHECK(names(r.diagnosis) == std::vector<std::string>{"global_share", "objective/W"});
  }
  SUBCASE("world-size factor under a summing reducer") {
    const partition sum = make_partition({{0}, {2, 2, 2}}, 0, reducer_kind::sum);
    const gate_result r = run_gate(sum, observed_value(-3, dtype::float64));
    CHECK(names(r.diagnosis) == std::vector<std::string>{"objective×W", "scaled_sum"});
  }
  SUBCASE("nothing fits: unexplained with the exact ratio") {
    const gate_result r = run_gate(mean, observed_value(rational(-7) / 5, dtype::float64));
    CHECK(r.verdict == gate_verdict::fail);
    CHECK(r.diagnosis.empty());
    REQUIRE(r.ratio);
    CHECK(*r.ratio == rational(14) / 15);
  }
}

TEST_CASE("equal counts make the local-mean bug indistinguishable: inconclusive") {
  const partition p = make_partition({{0, 2}, {2, 2}});
  const gate_result r = run_gate(p, observed_value(rational(-3) / 2, dtype::float32));
  CHECK(r.verdict == gate_verdict::inconclusive);
  CHECK(names(r.could_hide) == std::vector<std::string>{"local_mean"});
}

TEST_CASE("replica agreement names the first disagreeing rank") {
  const partition p = make_partition({{0}, {2, 2, 2}, {1}});
  observed_result observed = observed_value(rational(-5) / 4, dtype::exact);
  observed.from_per_rank = true;
  observed.per_rank = {rational(-5) / 4, rational(-5) / 4, rational(-1)};
  const gate_result r = run_gate(p, observed);
  CHECK(r.verdict == gate_verdict::fail);
  const gate_check& replicas = check_named(r, "replica_agreement");
  CHECK_FALSE(replicas.passed);
  CHECK(replicas.detail.find("rank 2 holds -1 but rank 0 holds -5/4") != std::string::npos);
}

TEST_CASE("the denominator check names padding and rank-local counts") {
  const partition p = make_partition({{0, std::nullopt}, {2, 2, 2, std::nullopt, std::nullopt}});
  observed_result observed = observed_value(rational(-3) / 2, dtype::exact);
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
  observed_result observed = observed_value(rational(-3) / 2 + rational(1) / 1000, dtype::float32);
  CHECK(run_gate(p, observed).verdict == gate_verdict::fail);
  observed.explicit_tolerance = tolerance{rational(1) / 100, 0};
  const gate_result r = run_gate(p, observed);
  CHECK(r.bound_is_explicit);
  CHECK(r.verdict == gate_verdict::pass);
}

TEST_CASE("suggest separates every named mistake by at least 100 float32 bounds") {
  for (std::uint64_t world = 2; world <= 8; ++world) {
    for (std::uint64_t microbatches = 1; microbatches <= 3; ++microbatches) {
      CAPTURE(world);
      CAPTURE(microbatches);
      const suggestion s = suggest_partition(world, microbatches, dtype::float32);
      CHECK(s.separation >= required_separation);
      CHECK(to_partition(s.tokens).world_size() == world);
    }
  }
}

TEST_CASE("suggest separates the weighted objective's mistakes too, count_denominator included") {
  for (std::uint64_t world = 2; world <= 8; ++world) {
    for (std::uint64_t microbatches = 1; microbatches <= 3; ++microbatches) {
      CAPTURE(world);
      CAPTURE(microbatches);
      const suggestion s =
          suggest_partition(world, microbatches, dtype::float32, objective_kind::weighted_token_mean);
      CHECK(s.separation >= required_separation);
      const partition update = to_partition(s.tokens);
      CHECK(update.objective == objective_kind::weighted_token_mean);
      CHECK(update.mass() != rational(update.valid_tokens()));  // else count_denominator would be invisible
    }
  }
}

TEST_CASE("suggest cannot separate the local mean with one rank and says so") {
  const suggestion s = suggest_partition(1, 1, dtype::float32);
  CHECK(s.separation == 0);
  CHECK(s.closest_pair.find("local_mean") != std::string::npos);
}
