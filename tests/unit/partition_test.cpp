// The partition model (partition.hpp): counts, target sums and the teaching loss's derivative sums.

#include "normcheck/core/partition.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <vector>

namespace {

using normcheck::integer;
using normcheck::rational;
using normcheck::token;

rational ratio(long p, long q) { return rational(integer(p), integer(q)); }

}  // namespace

TEST_CASE("a microbatch counts valid tokens and padding separately") {
  const normcheck::microbatch_stats stats = normcheck::summarize({token{1}, std::nullopt, token{2}, std::nullopt});
  CHECK(stats.valid_tokens == 2);
  CHECK(stats.padding == 2);
  CHECK(stats.target_sum() == 3);
  CHECK(stats.target_abs_sum() == 3);
}

TEST_CASE("a microbatch keeps the sum and the absolute sum of signed targets") {
  const normcheck::microbatch_stats stats = normcheck::summarize({token{-1}, token{ratio(5, 2)}, token{-3}});
  CHECK(stats.valid_tokens == 3);
  CHECK(stats.padding == 0);
  CHECK(stats.target_sum() == ratio(-3, 2));
  CHECK(stats.target_abs_sum() == ratio(13, 2));
}

TEST_CASE("an empty microbatch and a padding-only microbatch hold no valid token") {
  // std::vector<token>{}, not {}: a bare {} also fits check.hpp's summarize of file reports, which a unity
  // batch-mate may have declared.
  const normcheck::microbatch_stats empty = normcheck::summarize(std::vector<token>{});
  CHECK(empty.valid_tokens == 0);
  CHECK(empty.padding == 0);
  CHECK(empty.target_sum() == 0);
  const normcheck::microbatch_stats padded = normcheck::summarize({std::nullopt, std::nullopt});
  CHECK(padded.valid_tokens == 0);
  CHECK(padded.padding == 2);
  CHECK(padded.target_sum() == 0);
}

TEST_CASE("literal tokens and rational tokens give the same microbatch") {
  normcheck::microbatch_builder from_literals;
  for (const char* text : {"0.1", "-0x1.8p+1", "1e-400", "-2/3"})
    from_literals.add_token(normcheck::parse_literal(text, normcheck::literal_form::json_string));
  from_literals.add_padding();
  normcheck::microbatch_builder from_rationals;
  for (const char* text : {"0.1", "-0x1.8p+1", "1e-400", "-2/3"})
    from_rationals.add_token(normcheck::read_number(text, normcheck::literal_form::json_string));
  from_rationals.add_padding();
  const normcheck::microbatch_stats a = from_literals.finish();
  const normcheck::microbatch_stats b = from_rationals.finish();
  CHECK(a.valid_tokens == 4);
  CHECK(a.padding == 1);
  CHECK(a.target_sum() == b.target_sum());
  CHECK(a.target_abs_sum() == b.target_abs_sum());
  CHECK(normcheck::is_canonical(a.target_sum()));
}

TEST_CASE("the derivative sum of a microbatch is n times theta minus the target sum") {
  const normcheck::microbatch_stats stats = normcheck::summarize({token{1}, token{2}, std::nullopt});
  CHECK(normcheck::loss_gradient_sum(stats, 0) == -3);
  CHECK(normcheck::loss_gradient_sum(stats, ratio(1, 2)) == -2);
  CHECK(normcheck::loss_gradient_sum(stats, 3) == 3);
  CHECK(normcheck::loss_gradient_sum(normcheck::summarize({std::nullopt}), 5) == 0);
}

TEST_CASE("a rank adds up its microbatches") {
  normcheck::rank_stats rank;
  rank.microbatches.push_back(normcheck::summarize({token{1}, std::nullopt}));
  rank.microbatches.push_back(normcheck::summarize(std::vector<token>{}));
  rank.microbatches.push_back(normcheck::summarize({token{3}, token{5}, std::nullopt, std::nullopt}));
  CHECK(rank.valid_tokens() == 3);
  CHECK(rank.padding() == 3);
  CHECK(rank.target_sum() == 9);
  // θ = 1: (1 - 1) + 0 + (2 - 8) = -6
  CHECK(normcheck::loss_gradient_sum(rank, 1) == -6);
}

TEST_CASE("a partition counts ranks and valid tokens") {
  const normcheck::partition p = normcheck::make_partition({{token{0}}, {}, {token{2}, token{2}, std::nullopt}});
  CHECK(p.world_size() == 3);
  CHECK(p.valid_tokens() == 3);
  CHECK(p.reducer == normcheck::reducer_kind::mean);
  CHECK(p.theta == 0);
  for (const normcheck::rank_stats& rank : p.ranks) CHECK(rank.microbatches.size() == 1);
}

TEST_CASE("an accumulated partition keeps each rank's microbatches") {
  const normcheck::partition p = normcheck::make_accumulated_partition(
      {{{token{1}}, {token{3}, token{5}}}, {{token{2}, token{6}}}}, ratio(1, 2), normcheck::reducer_kind::sum);
  REQUIRE(p.world_size() == 2);
  CHECK(p.ranks[0].microbatches.size() == 2);
  CHECK(p.ranks[1].microbatches.size() == 1);
  CHECK(p.valid_tokens() == 5);
  CHECK(p.reducer == normcheck::reducer_kind::sum);
  CHECK(p.theta == ratio(1, 2));
  CHECK(normcheck::loss_gradient_sum(p.ranks[0], p.theta) == ratio(-15, 2));
}

TEST_CASE("reducers have stable names") {
  CHECK(normcheck::reducer_name(normcheck::reducer_kind::mean) == "mean");
  CHECK(normcheck::reducer_name(normcheck::reducer_kind::sum) == "sum");
}
