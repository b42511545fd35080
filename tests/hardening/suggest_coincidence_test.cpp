// suggest --counts decides which mistakes coincide with the objective (and which wrong strategies with each
// other) whatever the targets, in one pass over the microbatches. Checked here against the definition, the
// slow way: every candidate the gate knows (the scalar gate's mistakes and the per-group gate's diagnosed
// normalizations) evaluated on each unit sum (one microbatch's targets summing to
// 1, every other 0), the candidates' values compared on all of them.

#include "normcheck/core/gradients.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/gate/suggest.hpp"
#include "normcheck/gate/weights.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace normcheck;

partition with_unit_sum(const update_counts& counts, std::size_t unit_r, std::size_t unit_m) {
  token_partition tokens;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    std::vector<std::vector<token>>& rank = tokens.ranks.emplace_back();
    for (std::size_t m = 0; m < counts[r].size(); ++m) {
      const bool unit = r == unit_r && m == unit_m;
      rank.emplace_back(static_cast<std::size_t>(counts[r][m]),
                        token(unit ? rational(1) / counts[r][m] : rational(0)));
    }
  }
  return to_partition(tokens);
}

struct coincidences {
  std::vector<std::string> inseparable;
  std::vector<std::string> ambiguous;
};

// The definition, evaluated: a candidate's profile is its value on every unit sum.
coincidences by_definition(const update_counts& counts) {
  std::map<std::string, std::vector<rational>> profiles;
  std::vector<std::string> order;
  std::vector<rational> objective;
  for (std::size_t r = 0; r < counts.size(); ++r)
    for (std::size_t m = 0; m < counts[r].size(); ++m) {
      if (counts[r][m] == 0) continue;
      const partition update = with_unit_sum(counts, r, m);
      objective.push_back(*gradient(update, strategy::global_mean));
      std::vector<std::string> scalar;
      for (const explanation& e : known_mistakes(update, dtype::exact)) {
        scalar.push_back(e.name);
        const rational* value = std::get_if<rational>(&e.value);
        if (!value) continue;
        if (!profiles.count(e.name)) order.push_back(e.name);
        profiles[e.name].push_back(*value);
      }
      // The per-group gate's diagnosed normalizations: each group's weight times its derivative sum.
      for (const weight_candidate& c : weight_candidates(update)) {
        if (std::find(scalar.begin(), scalar.end(), c.name) != scalar.end()) continue;
        rational value(0);
        std::size_t g = 0;
        for (const rank_stats& rank : update.ranks)
          for (const microbatch_stats& microbatch : rank.microbatches)
            for (std::size_t i = 0; i < microbatch.group_count(); ++i, ++g) {
              const group_stats& group = microbatch.group(i);
              value += c.weights[g] * (update.theta * group.mass() - group.weighted_target_sum());
            }
        if (!profiles.count(c.name)) order.push_back(c.name);
        profiles[c.name].push_back(value);
      }
    }
  coincidences found;
  for (const std::string& name : order)
    if (profiles[name] == objective) found.inseparable.push_back(name);
  for (std::size_t i = 0; i < order.size(); ++i)
    for (std::size_t j = i + 1; j < order.size(); ++j)
      if (strategy_from_name(order[i]) && strategy_from_name(order[j]) && profiles[order[i]] == profiles[order[j]])
        found.ambiguous.push_back(order[i] + " and " + order[j]);
  return found;
}

std::vector<update_counts> shapes() {
  std::vector<update_counts> all{
      {{4}, {4}},           {{3}, {5}},          {{2, 2}, {2, 2}},      {{3, 1}, {2, 2}},  {{1, 3}, {3, 1}},
      {{0}, {4}},           {{5, 0}, {2, 3}},    {{2, 2, 2}, {3, 3, 3}}, {{6}, {3, 3}},     {{4}, {4}, {4}},
      {{1}, {2}, {3}, {4}}, {{7}},               {{2, 5}},              {{3, 3}, {6}},     {{1, 1}, {1, 1}, {2}},
  };
  // Ragged and uneven, deterministic.
  std::uint64_t state = 0x243F6A8885A308D3ull;
  for (int i = 0; i < 40; ++i) {
    update_counts counts(1 + i % 4);
    for (std::vector<std::uint64_t>& rank : counts) {
      rank.resize(1 + (state >> 7) % 3);
      for (std::uint64_t& n : rank) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        n = (state >> 33) % 5;
      }
    }
    std::uint64_t total = 0;
    for (const std::vector<std::uint64_t>& rank : counts)
      for (std::uint64_t n : rank) total += n;
    if (total > 0) all.push_back(counts);
  }
  return all;
}

}  // namespace

TEST_CASE("suggest's coincidences are those of every candidate on every unit sum") {
  for (const update_counts& counts : shapes()) {
    const suggestion s = suggest_for_counts(counts, dtype::float32);
    const coincidences expected = by_definition(counts);
    std::string shown;
    for (const std::vector<std::uint64_t>& rank : counts) {
      shown += "[";
      for (std::uint64_t n : rank) shown += std::to_string(n) + " ";
      shown += "]";
    }
    CAPTURE(shown);
    CHECK(s.inseparable == expected.inseparable);
    CHECK(s.ambiguous == expected.ambiguous);
  }
}

TEST_CASE("the definition's check catches a suggestion that claims no coincidence") {
  // Equal counts make local_mean the objective: a suggest that found nothing would be caught above.
  const coincidences expected = by_definition({{4}, {4}});
  CHECK(std::find(expected.inseparable.begin(), expected.inseparable.end(), "local_mean") !=
        expected.inseparable.end());
}
