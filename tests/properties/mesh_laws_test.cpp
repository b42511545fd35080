// Laws of the device mesh: the objective's gradient does not depend on how its tokens are dealt over a
// dp × cp × tp mesh, and the mesh's counts (over data dimensions only, over sequence dimensions only,
// before the sequences were split, with every replica) are what an independent reckoning over explicit
// coordinates gives. Each law
// keeps a planted wrong input it catches.

#include "normcheck/core/gradients.hpp"
#include "normcheck/core/normalization.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

using normcheck::mesh_dim;
using normcheck::mesh_role;
using normcheck::partition;
using normcheck::rational;
using normcheck::reducer_kind;
using normcheck::token;

// Tokens with targets k/10, each dealt to one of the W ranks of `mesh` (a rank may stay empty; replicas
// are the first of each set, W the data and sequence sizes' product); at least one token.
partition dealt(const std::vector<mesh_dim>& mesh, const std::vector<std::pair<int, std::size_t>>& tokens,
                reducer_kind reducer, const rational& theta) {
  std::size_t world = 1;
  for (const mesh_dim& dim : mesh)
    if (dim.role != mesh_role::replica) world *= dim.size;
  std::vector<std::vector<token>> ranks(world);
  for (const auto& [k, rank] : tokens) ranks[rank % world].emplace_back(rational(k) / 10);
  partition p = normcheck::make_partition(ranks, theta, reducer);
  p.mesh = mesh;
  return p;
}

rc::Gen<std::vector<std::pair<int, std::size_t>>> some_tokens() {
  return rc::gen::nonEmpty(rc::gen::container<std::vector<std::pair<int, std::size_t>>>(
      rc::gen::pair(rc::gen::inRange(-30, 31), rc::gen::inRange<std::size_t>(0, 64))));
}

rc::Gen<std::vector<mesh_dim>> meshes() {
  return rc::gen::exec([] {
    std::vector<mesh_dim> mesh;
    const auto dims = *rc::gen::inRange(1, 4);
    for (int d = 0; d < dims; ++d)
      mesh.push_back({"d" + std::to_string(d), *rc::gen::inRange<std::uint64_t>(1, 4),
                      *rc::gen::element(mesh_role::data, mesh_role::sequence, mesh_role::replica)});
    return mesh;
  });
}

// The objective's gradient from the tokens themselves: Σ(θ − y)/N over every token, wherever it lies.
rational token_mean(const std::vector<std::pair<int, std::size_t>>& tokens, const rational& theta) {
  rational sum = 0;
  for (const auto& [k, rank] : tokens) sum += theta - rational(k) / 10;
  rational mean = sum / rational(tokens.size());
  return mean;
}

// Whether the correct normalization for the reducer gives the token mean on every mesh and every dealing;
// `planted`: the count reduced over the data dimensions only, on meshes with dp and cp of size 2 or more.
bool mesh_invariant(bool planted) {
  return rc::check("the objective's gradient is the token mean on any dp × cp mesh", [planted] {
    auto mesh = *meshes();
    if (planted) {
      mesh.push_back({"dp", 2, mesh_role::data});
      mesh.push_back({"cp", 2, mesh_role::sequence});
    }
    const auto tokens = *some_tokens();
    const auto reducer = *rc::gen::element(reducer_kind::mean, reducer_kind::sum);
    const rational theta = rational(*rc::gen::inRange(-20, 21)) / 10;
    const partition p = dealt(mesh, tokens, reducer, theta);
    const std::string_view name = planted ? "count_over_data_dims"
                                  : reducer == reducer_kind::mean ? "scaled_sum"
                                                                  : "global_share";
    const normcheck::objective_units units(p, p.objective);
    const auto g = normcheck::synchronized_gradient(units, *normcheck::find_normalization(name));
    if (planted && !g) return;  // a rank group without tokens: its own count is 0
    RC_ASSERT(g.has_value());
    RC_ASSERT(*g == token_mean(tokens, theta));
  });
}

// The coordinates of every first replica, made by counting through the whole mesh (the last dimension
// fastest) and keeping the ranks whose replica coordinates are 0, not by dividing rank numbers.
std::vector<std::vector<std::uint64_t>> counted_coordinates(const std::vector<mesh_dim>& mesh, bool last_fastest) {
  std::vector<std::vector<std::uint64_t>> out;
  std::vector<std::uint64_t> at(mesh.size(), 0);
  std::size_t world = 1;
  for (const mesh_dim& dim : mesh) world *= dim.size;
  for (std::size_t r = 0; r < world; ++r) {
    bool first = true;
    for (std::size_t d = 0; d < mesh.size(); ++d) first = first && (mesh[d].role != mesh_role::replica || at[d] == 0);
    if (first) out.push_back(at);
    for (std::size_t step = 0; step < mesh.size(); ++step) {
      const std::size_t d = last_fastest ? mesh.size() - 1 - step : step;
      if (++at[d] < mesh[d].size) break;
      at[d] = 0;
    }
  }
  return out;
}

// The weights each rank's tokens get under the three mesh normalizations, reckoned from explicit
// coordinates: the ranks that agree with r on every dimension of the other role share its count.
std::map<std::string, std::optional<std::vector<rational>>> reckoned(const partition& p, bool last_fastest) {
  const auto coords = counted_coordinates(p.mesh, last_fastest);
  const rational w{p.world_size()};
  rational cp = 1;
  rational tp = 1;
  for (const mesh_dim& dim : p.mesh) {
    if (dim.role == mesh_role::sequence) cp *= dim.size;
    if (dim.role == mesh_role::replica) tp *= dim.size;
  }
  const rational compensation = p.reducer == reducer_kind::mean ? w : rational(1);
  const rational reduction = p.reducer == reducer_kind::mean ? 1 / w : rational(1);
  auto peers_count = [&](std::size_t r, mesh_role along) {
    rational n = 0;
    for (std::size_t q = 0; q < coords.size(); ++q) {
      bool same = true;
      for (std::size_t d = 0; d < p.mesh.size(); ++d)
        if (p.mesh[d].role != along && coords[q][d] != coords[r][d]) same = false;
      if (same) n += p.ranks[q].valid_tokens();
    }
    return n;
  };
  // A count of 0 leaves the whole table undefined, as the code that divides by it would.
  auto divided = [](const rational& numerator, const rational& count) -> std::optional<rational> {
    if (count == 0) return std::nullopt;
    rational q = numerator / count;
    return q;
  };
  std::map<std::string, std::optional<std::vector<rational>>> out;
  const char* names[] = {"count_over_data_dims", "count_over_sequence_dims", "count_before_sequence_sharding",
                         "count_with_replicas"};
  for (const char* name : names) out[name].emplace();
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    const std::optional<rational> weights[] = {divided(compensation, peers_count(r, mesh_role::data)),
                                               divided(cp, peers_count(r, mesh_role::sequence)),
                                               divided(compensation, cp * p.valid_tokens()),
                                               divided(compensation, tp * p.valid_tokens())};
    for (int i = 0; i < 4; ++i) {
      auto& table = out[names[i]];
      if (!weights[i]) table.reset();
      if (table) table->push_back(*weights[i] * reduction);
    }
  }
  return out;
}

// Whether the table's mesh weights agree with the reckoning wherever both are defined.
bool counts_reckoned(bool last_fastest) {
  return rc::check("the mesh's counts are those reckoned from explicit coordinates", [last_fastest] {
    const auto mesh = *meshes();
    const auto tokens = *some_tokens();
    const auto reducer = *rc::gen::element(reducer_kind::mean, reducer_kind::sum);
    const partition p = dealt(mesh, tokens, reducer, 0);
    const auto expected = reckoned(p, last_fastest);
    const normcheck::objective_units units(p, p.objective);
    const bool sliced = p.mesh_extent(mesh_role::sequence) > 1;
    const bool data = p.mesh_extent(mesh_role::data) > 1;
    const bool replicated = p.mesh_extent(mesh_role::replica) > 1;
    for (const auto& [name, weights] : expected) {
      const auto table = normcheck::delivered_weights(units, *normcheck::find_normalization(name));
      const bool defined = name == "count_with_replicas"              ? replicated
                           : name == "count_before_sequence_sharding" ? sliced
                                                                      : sliced && data;
      if (!defined) RC_ASSERT(!table.has_value());
      else RC_ASSERT(table == weights);
    }
  });
}

}  // namespace

TEST_CASE("the objective's gradient on a dp × cp mesh does not depend on how the tokens are dealt") {
  CHECK(mesh_invariant(false));
  // Planted: the count reduced over dp only is caught.
  CHECK_FALSE(mesh_invariant(true));
}

TEST_CASE("the mesh's counts agree with coordinates counted through the mesh") {
  CHECK(counts_reckoned(true));
  // Planted: coordinates counted with the first dimension fastest (column-major) disagree somewhere.
  CHECK_FALSE(counts_reckoned(false));
}
