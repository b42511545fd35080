// The normalization table (normalization.hpp): each objective's weights written out by hand, sequences
// and their counts, and the three ways the table is read (delivered weights, totals, the gradient) agreeing.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/core/normalization.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace {

using normcheck::group_stats;
using normcheck::integer;
using normcheck::objective_kind;
using normcheck::objective_units;
using normcheck::partition;
using normcheck::rational;
using normcheck::reducer_kind;
using normcheck::strategy;
using normcheck::token;

rational fraction_of(long p, long q) { return rational(integer(p), integer(q)); }

// A sequence of valid tokens with the given targets.
group_stats sequence(const std::vector<long>& targets) {
  std::vector<token> tokens;
  for (long y : targets) tokens.emplace_back(rational(y));
  return normcheck::summarize(tokens);
}

// Rank 0: one microbatch of sequences [1, 2] and [3]; rank 1: microbatch [5] and [] (empty) then a microbatch
// of the sequence [1, 1, 1, 1]. N = 8 valid tokens, B = 4 sequences with tokens, W = 2, at θ = 0.
partition sequenced(reducer_kind reducer = reducer_kind::mean) {
  partition p;
  p.reducer = reducer;
  p.ranks.resize(2);
  p.ranks[0].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({1, 2}), sequence({3})}));
  p.ranks[1].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({5}), sequence({})}));
  p.ranks[1].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({1, 1, 1, 1})}));
  return p;
}

std::vector<std::string> shown(const std::vector<rational>& values) {
  std::vector<std::string> out;
  for (const rational& v : values) out.push_back(normcheck::to_string(v));
  return out;
}

std::vector<std::string> objective_weights(const partition& p, objective_kind objective) {
  const objective_units units(p, objective);
  return shown(*normcheck::delivered_weights(units, normcheck::normalization_of(strategy::global_mean)));
}

using list = std::vector<std::string>;

}  // namespace

TEST_CASE("a microbatch of sequences keeps their totals and one group each") {
  const partition p = sequenced();
  const normcheck::microbatch_stats& m = p.ranks[1].microbatches[0];
  CHECK(m.valid_tokens == 1);
  CHECK(m.group_count() == 2);
  CHECK(m.sequence_count() == 1);  // the empty sequence holds no valid token
  CHECK(m.target_sum() == 5);
  CHECK(p.valid_tokens() == 8);
  CHECK(p.sequence_count() == 4);
  CHECK(p.group_count() == 5);
  CHECK(p.has_sequences());
}

TEST_CASE("each objective's weights, group by group") {
  partition p = sequenced();
  // Groups: [1, 2], [3], [5], [], [1, 1, 1, 1].
  CHECK(objective_weights(p, objective_kind::token_mean) == list{"1/8", "1/8", "1/8", "1/8", "1/8"});
  CHECK(objective_weights(p, objective_kind::sequence_mean) == list{"1/8", "1/4", "1/4", "0", "1/16"});  // 1/(B·nₛ)
  CHECK(objective_weights(p, objective_kind::sequence_sum_mean) == list{"1/4", "1/4", "1/4", "1/4", "1/4"});
  p.normalizer = 10;
  CHECK(objective_weights(p, objective_kind::constant) == list{"1/10", "1/10", "1/10", "1/10", "1/10"});
}

TEST_CASE("the report's strategies in sequence units") {
  const partition p = sequenced();
  const objective_units units(p, objective_kind::sequence_mean);
  auto weights = [&](strategy s) {
    return shown(*normcheck::delivered_weights(units, normcheck::normalization_of(s)));
  };
  // scaled_sum: W/(B·nₛ), halved by DDP's mean: the objective's weights.
  CHECK(weights(strategy::scaled_sum) == objective_weights(p, objective_kind::sequence_mean));
  // local_mean: 1/(bᵣ·nₛ) then ÷W; rank 0 has b = 2, rank 1 has b = 2.
  CHECK(weights(strategy::local_mean) == list{"1/8", "1/4", "1/4", "0", "1/16"});
  // local_sum: the sum of sequence means, ÷W.
  CHECK(weights(strategy::local_sum) == list{"1/4", "1/2", "1/2", "0", "1/8"});
  // microbatch_mean: rank 1 has two microbatches of one sequence each: 1/(Gᵣ·bᵣₘ·nₛ)/W.
  CHECK(weights(strategy::microbatch_mean) == list{"1/8", "1/4", "1/4", "0", "1/16"});
}

TEST_CASE("the gradient, the totals and the delivered weights agree for every strategy and objective") {
  partition p = sequenced();
  p.theta = fraction_of(1, 3);
  p.normalizer = 7;
  for (objective_kind objective : {objective_kind::token_mean, objective_kind::sequence_mean,
                                   objective_kind::sequence_sum_mean, objective_kind::constant}) {
    REQUIRE(objective_units::applies(p, objective));
    const objective_units units(p, objective);
    for (strategy s : normcheck::all_strategies) {
      CAPTURE(normcheck::strategy_name(s));
      CAPTURE(normcheck::objective_name(objective));
      const std::optional<std::vector<rational>> weights =
          normcheck::delivered_weights(units, normcheck::normalization_of(s));
      const std::optional<rational> gradient = normcheck::synchronized_gradient(units, normcheck::normalization_of(s));
      REQUIRE(weights.has_value() == gradient.has_value());
      if (!weights) continue;
      rational total;
      std::size_t g = 0;
      for (const normcheck::rank_stats& rank : p.ranks)
        for (const normcheck::microbatch_stats& m : rank.microbatches)
          for (std::size_t i = 0; i < m.group_count(); ++i)
            total += (*weights)[g++] * normcheck::loss_gradient_sum(m.group(i), p.theta);
      CHECK(total == *gradient);
    }
  }
}

TEST_CASE("an empty microbatch makes microbatch_mean undefined but not its bound's totals") {
  const partition p = sequenced();
  const objective_units units(p, objective_kind::token_mean);
  const normcheck::normalization& n = normcheck::normalization_of(strategy::microbatch_mean);
  CHECK(normcheck::synchronized_gradient(units, n).has_value());  // rank 1's microbatches each hold a token
  partition empty = p;
  empty.ranks[0].microbatches.emplace_back();
  const objective_units empty_units(empty, objective_kind::token_mean);
  CHECK_FALSE(normcheck::synchronized_gradient(empty_units, n).has_value());
  CHECK(normcheck::totals(empty_units, n, true).has_value());
}

TEST_CASE("which objectives an update can be counted in") {
  partition p = sequenced();
  CHECK(objective_units::applies(p, objective_kind::sequence_mean));
  CHECK_FALSE(objective_units::applies(p, objective_kind::constant));  // no normalizer
  CHECK_FALSE(objective_units::applies(p, objective_kind::weighted_token_mean));
  p.ranks[0].microbatches.push_back(normcheck::summarize({token{rational(4)}}));  // a microbatch without sequences
  CHECK_FALSE(objective_units::applies(p, objective_kind::sequence_mean));
  CHECK(objective_units::applies(p, objective_kind::token_mean));
}

TEST_CASE("formulas name each objective's counts") {
  CHECK(normcheck::strategy_formula(strategy::scaled_sum) == "W·Sᵣ/N");
  CHECK(normcheck::strategy_formula(strategy::scaled_sum, objective_kind::weighted_token_mean) == "W·Sᵣ/M");
  CHECK(normcheck::strategy_formula(strategy::local_mean, objective_kind::sequence_mean) == "Sᵣ/bᵣ");
  CHECK(normcheck::strategy_formula(strategy::global_share, objective_kind::constant) == "Sᵣ/C");
  CHECK(normcheck::strategy_denominator(strategy::microbatch_mean, objective_kind::sequence_sum_mean) == "bᵣₘ");
  CHECK(normcheck::strategy_denominator(strategy::local_sum) == "none");
}

TEST_CASE("an update whose sequences hold no token has no sequence objective") {
  partition p;
  p.objective = objective_kind::sequence_mean;
  p.ranks.resize(1);
  p.ranks[0].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({})}));
  CHECK_THROWS_AS(normcheck::compute_gradients(p), normcheck::error);
}

TEST_CASE("every normalization but the objective's own carries its diagnosis words, under one name") {
  std::vector<std::string_view> names;
  for (const auto& list : {normcheck::report_normalizations(), normcheck::diagnosed_normalizations()})
    for (const normcheck::normalization& n : list) {
      CAPTURE(n.name);
      CHECK(std::count(names.begin(), names.end(), n.name) == 0);
      names.push_back(n.name);
      CHECK(normcheck::find_normalization(n.name) == &n);
      if (n.objective_itself) continue;
      CHECK(!n.computed.empty());
      CHECK(!n.why_wrong.empty());
      CHECK(normcheck::why_wrong(n, reducer_kind::mean).starts_with(n.why_wrong));
    }
  CHECK(names.size() == 21);
  const normcheck::normalization& local_sum = *normcheck::find_normalization("local_sum");
  CHECK(normcheck::why_wrong(local_sum, reducer_kind::sum) == local_sum.why_wrong_summed);
  const normcheck::normalization& shifted = *normcheck::find_normalization("count_before_shift");
  CHECK(normcheck::why_wrong(shifted, reducer_kind::mean) ==
        std::string(shifted.why_wrong) + ": " + std::string(shifted.remedy));
}

TEST_CASE("a per-microbatch global count is undefined, and reads nothing, where ranks accumulate differently") {
  // Rank 0 accumulates two microbatches, rank 1 three: rank 1's third microbatch has no counterpart on
  // rank 0, and its weight must not be computed from one (it was read past rank 0's microbatches).
  partition p;
  p.ranks.resize(2);
  for (int m = 0; m < 2; ++m) p.ranks[0].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({1})}));
  for (int m = 0; m < 3; ++m) p.ranks[1].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({2})}));
  const auto diagnosed = normcheck::diagnosed_normalizations();
  const auto n = std::find_if(diagnosed.begin(), diagnosed.end(),
                              [](const normcheck::normalization& d) { return d.name == "microbatch_global_count"; });
  REQUIRE(n != diagnosed.end());
  for (objective_kind objective : {objective_kind::token_mean, objective_kind::sequence_mean}) {
    const objective_units units(p, objective);
    CHECK_FALSE(normcheck::delivered_unit_weight(units, *n, {1, 2, 0}).has_value());
    CHECK_FALSE(normcheck::delivered_unit_weight(units, *n, {0, 0, 0}).has_value());
  }
}

namespace {

// A dp 2 × cp 2 mesh (row-major: rank 2·dp + cp) whose ranks hold 1, 3, 2 and 5 valid tokens, N = 11.
partition dp2_cp2(reducer_kind reducer = reducer_kind::mean) {
  partition p = normcheck::make_partition({{rational(1)}, {rational(2), rational(3), rational(4)},
                                           {rational(5), rational(6)},
                                           {rational(7), rational(8), rational(9), rational(10), rational(11)}},
                                          0, reducer);
  p.mesh = {{"dp", 2, normcheck::mesh_role::data}, {"cp", 2, normcheck::mesh_role::sequence}};
  return p;
}

std::vector<rational> delivered(const partition& p, std::string_view name) {
  const objective_units units(p, p.objective);
  return normcheck::delivered_weights(units, *normcheck::find_normalization(name)).value();
}

}  // namespace

TEST_CASE("a mesh numbers its ranks row-major, and without one every rank is a data coordinate") {
  partition p = dp2_cp2();
  CHECK(p.mesh_extent(normcheck::mesh_role::data) == 2);
  CHECK(p.mesh_extent(normcheck::mesh_role::sequence) == 2);
  CHECK(p.mesh_extent(normcheck::mesh_role::replica) == 1);
  for (std::size_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(p.mesh_index(r, normcheck::mesh_role::data) == r / 2);
    CHECK(p.mesh_index(r, normcheck::mesh_role::sequence) == r % 2);
  }
  CHECK(p.mesh_names(normcheck::mesh_role::data) == "dp");
  p.mesh.clear();
  CHECK(p.mesh_extent(normcheck::mesh_role::data) == 4);
  CHECK(p.mesh_extent(normcheck::mesh_role::sequence) == 1);
  CHECK(p.mesh_index(3, normcheck::mesh_role::data) == 3);
  CHECK(p.mesh_names(normcheck::mesh_role::sequence).empty());
}

TEST_CASE("the mesh's counts: over dp only, over cp only, and before the sequences were split") {
  const partition p = dp2_cp2();
  // Over dp only: cp 0 holds ranks 0 and 2 (3 tokens), cp 1 ranks 1 and 3 (8); W·Sᵣ/n then DDP's ÷W.
  CHECK(delivered(p, "count_over_data_dims") ==
        std::vector<rational>{fraction_of(1, 3), fraction_of(1, 8), fraction_of(1, 3), fraction_of(1, 8)});
  // Over cp only: dp 0 holds 4 tokens, dp 1 holds 7; CP·Sᵣ/n then ÷W.
  CHECK(delivered(p, "count_over_sequence_dims") ==
        std::vector<rational>{fraction_of(1, 8), fraction_of(1, 8), fraction_of(1, 14), fraction_of(1, 14)});
  // Every token counted on both CP ranks: W·Sᵣ/(2N), then ÷W.
  CHECK(delivered(p, "count_before_sequence_sharding") == std::vector<rational>(4, fraction_of(1, 22)));
  // The words name the mesh's dimensions.
  const normcheck::normalization& over_dp = *normcheck::find_normalization("count_over_data_dims");
  CHECK(normcheck::mesh_spelled(over_dp.remedy, p) ==
        "reduce the count over every data and sequence dimension (dp × cp)");
  CHECK(normcheck::spelled(over_dp.formula, objective_units(p, p.objective)) == "W·Sᵣ/(nᵣ summed over dp)");
}

TEST_CASE("without sequence dimensions the mesh's normalizations are undefined: old files judge as before") {
  partition p = dp2_cp2();
  p.mesh = {{"dp", 4, normcheck::mesh_role::data}};
  for (std::string_view name : {"count_over_data_dims", "count_over_sequence_dims", "count_before_sequence_sharding"}) {
    CAPTURE(name);
    const objective_units units(p, p.objective);
    CHECK_FALSE(normcheck::delivered_weights(units, *normcheck::find_normalization(name)).has_value());
    p.mesh.clear();
    const objective_units plain(p, p.objective);
    CHECK_FALSE(normcheck::delivered_weights(plain, *normcheck::find_normalization(name)).has_value());
    p.mesh = {{"dp", 4, normcheck::mesh_role::data}};
  }
  // A context-parallel mesh without data dimensions: a count over dp only or over cp only is not a mistake of
  // its own (the rank's own count, or the update's).
  p.mesh = {{"cp", 4, normcheck::mesh_role::sequence}};
  const objective_units units(p, p.objective);
  CHECK_FALSE(normcheck::delivered_weights(units, *normcheck::find_normalization("count_over_data_dims")).has_value());
  CHECK(normcheck::delivered_weights(units, *normcheck::find_normalization("count_before_sequence_sharding"))
            .has_value());
}

TEST_CASE("replicas: the update keeps the first of each, numbered as the whole mesh numbers them") {
  // dp 2 × tp 2 × cp 2 (tp replicas in the middle): the update's ranks are listed ranks 0, 1, 4 and 5.
  partition p = normcheck::make_partition({{rational(1)}, {rational(2)}, {rational(3)}, {rational(4), rational(5)}});
  p.mesh = {{"dp", 2, normcheck::mesh_role::data}, {"tp", 2, normcheck::mesh_role::replica},
            {"cp", 2, normcheck::mesh_role::sequence}};
  CHECK(p.listed_ranks() == 8);
  CHECK(std::vector<std::uint64_t>{p.listed_rank(0), p.listed_rank(1), p.listed_rank(2), p.listed_rank(3)} ==
        std::vector<std::uint64_t>{0, 1, 4, 5});
  // Listed rank 7 is (dp 1, tp 1, cp 1): its first replica is (dp 1, tp 0, cp 1), listed rank 5.
  CHECK(p.first_replica(7) == 5);
  CHECK(p.first_replica(2) == 0);
  CHECK(p.mesh_index(3, normcheck::mesh_role::data) == 1);
  CHECK(p.mesh_index(3, normcheck::mesh_role::sequence) == 1);
  CHECK(p.mesh_index(3, normcheck::mesh_role::replica) == 0);
  // Every token counted once per replica: W·Sᵣ/(TP·N), then DDP's ÷W over the 4 ranks that hold distinct tokens.
  CHECK(delivered(p, "count_with_replicas") == std::vector<rational>(4, fraction_of(1, 10)));
  p.mesh[1].size = 1;  // dp 2 × tp 1 × cp 2: no replicas, so nothing is counted twice
  CHECK_FALSE(normcheck::delivered_weights(objective_units(p, p.objective),
                                           *normcheck::find_normalization("count_with_replicas"))
                  .has_value());
}

TEST_CASE("one objective_units gives each normalization's signed and absolute totals in any order") {
  // The per-rank sums are kept on first use: a magnitude asked for after a signed sum (or before it) must
  // not be answered with the other. Negative targets make the two differ.
  partition p;
  p.ranks.resize(2);
  p.ranks[0].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({-1, 2}), sequence({-3})}));
  p.ranks[1].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({-5})}));
  p.ranks[1].microbatches.push_back(normcheck::make_sequenced_microbatch({sequence({4, -1, 1, -1})}));
  for (strategy s : normcheck::all_strategies) {
    CAPTURE(normcheck::strategy_name(s));
    const normcheck::normalization& n = normcheck::normalization_of(s);
    const std::optional<normcheck::weighted_totals> signed_alone =
        normcheck::totals(objective_units(p, objective_kind::token_mean), n, false);
    const std::optional<normcheck::weighted_totals> absolute_alone =
        normcheck::totals(objective_units(p, objective_kind::token_mean), n, true);
    REQUIRE(signed_alone.has_value());
    REQUIRE(absolute_alone.has_value());
    CHECK(signed_alone->value != absolute_alone->value);
    for (bool absolute_first : {false, true}) {
      const objective_units units(p, objective_kind::token_mean);
      const std::optional<normcheck::weighted_totals> first = normcheck::totals(units, n, absolute_first);
      const std::optional<normcheck::weighted_totals> second = normcheck::totals(units, n, !absolute_first);
      const normcheck::weighted_totals& signed_totals = absolute_first ? *second : *first;
      const normcheck::weighted_totals& absolute_totals = absolute_first ? *first : *second;
      CHECK(signed_totals.mass == signed_alone->mass);
      CHECK(signed_totals.value == signed_alone->value);
      CHECK(absolute_totals.mass == absolute_alone->mass);
      CHECK(absolute_totals.value == absolute_alone->value);
    }
  }
}
