// The generators and transformations themselves: the laws are only as good as the data they see.

#include "generators.hpp"
#include "oracle.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace normcheck;
using namespace normcheck::properties;

namespace {

std::vector<rational> sorted(std::vector<rational> values) {
  std::sort(values.begin(), values.end());
  return values;
}

std::size_t padding_of(const token_partition& tokens) {
  std::size_t count = 0;
  for (const auto& rank : tokens.ranks)
    for (const auto& microbatch : rank)
      count += static_cast<std::size_t>(std::count(microbatch.begin(), microbatch.end(), token()));
  return count;
}

std::vector<rational> rank_values(const rank_tokens& rank) {
  std::vector<rational> values;
  for (const token& t : flatten(rank))
    if (t) values.push_back(*t);
  return values;
}

// n values of a generator at the largest size, outside any property.
template <typename T>
std::vector<T> sample(const rc::Gen<T>& gen, std::size_t n, std::uint64_t seed) {
  std::vector<T> values;
  rc::Random random(seed);
  for (std::size_t i = 0; i < n; ++i) values.push_back(gen(random.split(), full_size).value());
  return values;
}

bool power_of(integer n, unsigned base) {
  if (n <= 1) return false;
  while (n % base == 0) n /= base;
  return n == 1;
}

}  // namespace

TEST_CASE("generated updates are well formed") {
  CHECK(rc::check("every update has 1 to 64 ranks, each with a microbatch, and canonical values", [] {
    const token_partition tokens = *gen_update();
    RC_ASSERT(!tokens.ranks.empty());
    RC_ASSERT(tokens.ranks.size() <= 64u);
    for (const rank_tokens& rank : tokens.ranks) RC_ASSERT(!rank.empty());
    for (const rational& value : valid_values(tokens)) RC_ASSERT(is_canonical(value));
    RC_ASSERT(is_canonical(tokens.theta));
  }));
  CHECK(rc::check("updates with tokens hold at least one valid token",
                  [] { RC_ASSERT(oracle::valid_tokens(*gen_update_with_tokens()) > 0u); }));
  CHECK(rc::check("all-empty updates hold no valid token", [] {
    const token_partition tokens = *gen_all_empty();
    RC_ASSERT(!tokens.ranks.empty());
    RC_ASSERT(oracle::valid_tokens(tokens) == 0u);
  }));
}

TEST_CASE("transformations keep what the laws say they keep") {
  CHECK(rc::check("repartition keeps W and the multiset of valid values", [] {
    const token_partition tokens = *gen_update();
    const token_partition dealt = *repartition(tokens);
    RC_ASSERT(dealt.ranks.size() == tokens.ranks.size());
    RC_ASSERT(sorted(valid_values(dealt)) == sorted(valid_values(tokens)));
    RC_ASSERT(padding_of(dealt) == 0u);
  }));
  CHECK(rc::check("rank permutation keeps the ranks", [] {
    const token_partition tokens = *gen_update();
    const token_partition permuted = *permute_ranks(tokens);
    RC_ASSERT(permuted.ranks.size() == tokens.ranks.size());
    for (const rank_tokens& rank : tokens.ranks)
      RC_ASSERT(std::count(permuted.ranks.begin(), permuted.ranks.end(), rank) ==
                std::count(tokens.ranks.begin(), tokens.ranks.end(), rank));
  }));
  CHECK(rc::check("microbatch split keeps each rank's positions in order", [] {
    const token_partition tokens = *gen_update();
    const token_partition split = *split_microbatches(tokens);
    RC_ASSERT(split.ranks.size() == tokens.ranks.size());
    for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
      RC_ASSERT(flatten(split.ranks[r]) == flatten(tokens.ranks[r]));
  }));
  CHECK(rc::check("added padding keeps each rank's valid values and adds positions", [] {
    const token_partition tokens = *gen_update();
    const token_partition padded = *add_padding(tokens);
    RC_ASSERT(padding_of(padded) > padding_of(tokens));
    for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
      RC_ASSERT(rank_values(padded.ranks[r]) == rank_values(tokens.ranks[r]));
  }));
  CHECK(rc::check("an added empty rank holds no valid token and leaves the others in order", [] {
    const token_partition tokens = *gen_update();
    const with_empty_rank grown = *add_empty_rank(tokens);
    RC_ASSERT(grown.tokens.ranks.size() == tokens.ranks.size() + 1);
    RC_ASSERT(rank_values(grown.tokens.ranks[grown.position]).empty());
    std::vector<rank_tokens> others = grown.tokens.ranks;
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(grown.position));
    RC_ASSERT(others == tokens.ranks);
  }));
}

TEST_CASE("generated values reach the corners") {
  const std::vector<rational> values = sample(gen_rational(), 4000, 7);
  auto seen = [&](auto predicate) { return std::any_of(values.begin(), values.end(), predicate); };
  CHECK(seen([](const rational& v) { return v == 0; }));
  CHECK(seen([](const rational& v) { return v < 0; }));
  CHECK(seen([](const rational& v) {
    return denominator(v) != 1 && !power_of(denominator(v), 2) && !power_of(denominator(v), 10);
  }));
  CHECK(seen([](const rational& v) { return power_of(denominator(v), 10); }));
  CHECK(seen([](const rational& v) { return power_of(denominator(v), 2) && denominator(v) > integer(1) << 40; }));
  CHECK(seen([](const rational& v) { return numerator(v) > integer(1) << 128 && denominator(v) > integer(1) << 64; }));
  CHECK(seen([](const rational& v) { return abs(numerator(v)) > pow(integer(10), 300); }));
  CHECK(seen([](const rational& v) { return denominator(v) > pow(integer(10), 300); }));

  const std::vector<token_partition> updates = sample(gen_update(), 400, 11);
  std::vector<std::size_t> world_sizes;
  std::size_t with_padding = 0;
  std::size_t with_microbatches = 0;
  std::size_t with_empty_rank = 0;
  for (const token_partition& tokens : updates) {
    world_sizes.push_back(tokens.ranks.size());
    with_padding += padding_of(tokens) > 0;
    with_microbatches +=
        std::any_of(tokens.ranks.begin(), tokens.ranks.end(), [](const rank_tokens& r) { return r.size() > 1; });
    with_empty_rank += std::any_of(tokens.ranks.begin(), tokens.ranks.end(),
                                   [](const rank_tokens& r) { return rank_values(r).empty(); });
  }
  CHECK(*std::min_element(world_sizes.begin(), world_sizes.end()) == 1);
  CHECK(*std::max_element(world_sizes.begin(), world_sizes.end()) > 48);
  CHECK(with_padding > 0);
  CHECK(with_microbatches > 0);
  CHECK(with_empty_rank > 0);
}
