// Nearby updates (gate/nearby.hpp): each is the given update with exactly the change its words name, and a
// change that would take the counts past what normcheck keeps exact is not offered.

#include "normcheck/core/counts.hpp"
#include "normcheck/gate/nearby.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using normcheck::make_accumulated_partition;
using normcheck::nearby_update;
using normcheck::nearby_updates;
using normcheck::partition;
using normcheck::rational;
using normcheck::token;

// Two ranks of two microbatches: G = W = 2.
partition square() {
  return make_accumulated_partition(
      {{{rational(1), rational(2)}, {rational(3)}}, {{rational(4)}, {rational(5), std::nullopt}}});
}

const nearby_update* find(const std::vector<nearby_update>& all, const std::string& starts) {
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const nearby_update& n) { return n.change.rfind(starts, 0) == 0; });
  return it == all.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("nearby updates change G, W or one count, and nothing else") {
  const partition update = square();
  const std::vector<nearby_update> all = nearby_updates(update);
  REQUIRE(all.size() == 3);

  const nearby_update* g = find(all, "G ≠ W");
  REQUIRE(g);
  CHECK(g->change == "G ≠ W (here G = W = 2)");
  CHECK(g->update.world_size() == 2);
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(g->update.ranks[r].microbatches.size() == 3);
    CHECK(g->update.ranks[r].microbatches[2].valid_tokens == update.ranks[r].microbatches[1].valid_tokens);
  }
  CHECK(g->update.valid_tokens() == update.valid_tokens() + 1 + 1);

  const nearby_update* w = find(all, "another number of ranks");
  REQUIRE(w);
  CHECK(w->update.world_size() == 3);
  CHECK(w->update.valid_tokens() == update.valid_tokens() + update.ranks[1].valid_tokens());

  const nearby_update* n = find(all, "uneven token counts");
  REQUIRE(n);
  CHECK(n->update.world_size() == 2);
  CHECK(n->update.ranks[0].microbatches[0].valid_tokens == 3);
  CHECK(n->update.ranks[0].microbatches[0].target_sum() == update.ranks[0].microbatches[0].target_sum());
  CHECK(n->update.ranks[1].valid_tokens() == update.ranks[1].valid_tokens());
}

TEST_CASE("another G is named as such where G differs from W") {
  const partition one_rank = make_accumulated_partition({{{rational(1)}, {rational(2)}}});
  const std::vector<nearby_update> all = nearby_updates(one_rank);
  const nearby_update* g = find(all, "another number of accumulation steps");
  REQUIRE(g);
  CHECK(g->change == "another number of accumulation steps (here G = 2)");
}

TEST_CASE("no nearby update takes the counts past 2^62") {
  partition update = square();
  // Rank 1's first microbatch holds all but a few of the positions normcheck counts.
  update.ranks[1].microbatches[0].valid_tokens = normcheck::max_count - update.positions() + 1;
  REQUIRE(update.positions() == normcheck::max_count);
  CHECK(nearby_updates(update).empty());
}
