// Laws of the device mesh: the objective's gradient does not depend on how its tokens are dealt over a
// dp × cp × tp mesh, and the mesh's counts (over data dimensions only, over sequence dimensions only,
// before the sequences were split, with every replica) are what an independent reckoning over explicit
// coordinates gives. Under the sequence objectives, slices of whole sequences dealt over dp × cp are joined:
// the gradient is the one reckoned from the whole sequences, and the mistakes of a count taken per slice
// have the weights reckoned from the slices. Each law keeps a planted wrong input it catches.

#include "normcheck/core/gradients.hpp"
#include "normcheck/core/normalization.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <algorithm>
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

// Whole sequences of a dp × cp mesh and how their positions are dealt: sequences[d][s] the targets of
// sequence s of data coordinate d (nullopt: no valid token), holder[d][s][i] the cp rank holding position i.
struct sliced_layout {
  std::size_t dp = 1;
  std::size_t cp = 2;
  std::vector<std::vector<std::vector<token>>> sequences;
  std::vector<std::vector<std::vector<std::size_t>>> holder;
};

rc::Gen<sliced_layout> sliced_layouts() {
  return rc::gen::exec([] {
    sliced_layout layout;
    layout.dp = *rc::gen::inRange<std::size_t>(1, 4);
    layout.cp = *rc::gen::inRange<std::size_t>(2, 4);
    layout.sequences.resize(layout.dp);
    layout.holder.resize(layout.dp);
    for (std::size_t d = 0; d < layout.dp; ++d) {
      const auto count = *rc::gen::inRange<std::size_t>(1, 4);
      for (std::size_t s = 0; s < count; ++s) {
        const auto length = *rc::gen::inRange<std::size_t>(0, 7);
        std::vector<token> targets;
        std::vector<std::size_t> held;
        for (std::size_t i = 0; i < length; ++i) {
          const bool valid = *rc::gen::inRange(0, 4) > 0;
          targets.push_back(valid ? token(rational(*rc::gen::inRange(-30, 31)) / 10) : std::nullopt);
          held.push_back(*rc::gen::inRange<std::size_t>(0, layout.cp));
        }
        layout.sequences[d].push_back(std::move(targets));
        layout.holder[d].push_back(std::move(held));
      }
    }
    // At least one valid token, so that B > 0.
    layout.sequences[0][0].emplace_back(rational(1));
    layout.holder[0][0].push_back(0);
    return layout;
  });
}

// The layout as an update: rank d·cp + c lists, in one microbatch, its slice of every sequence of its data
// coordinate (an empty slice where it holds none of its positions), each slice with its sequence's ID.
// `planted`: the IDs left out, so that every slice counts as a sequence of its own.
partition sliced_update(const sliced_layout& layout, normcheck::objective_kind objective, reducer_kind reducer,
                        const rational& theta, bool planted = false) {
  partition p;
  p.objective = objective;
  p.reducer = reducer;
  p.theta = theta;
  p.mesh = {{"dp", layout.dp, mesh_role::data}, {"cp", layout.cp, mesh_role::sequence}};
  for (std::size_t d = 0; d < layout.dp; ++d)
    for (std::size_t c = 0; c < layout.cp; ++c) {
      normcheck::rank_stats rank;
      std::vector<normcheck::group_stats> slices;
      std::vector<std::uint64_t> ids;
      for (std::size_t s = 0; s < layout.sequences[d].size(); ++s) {
        std::vector<token> held;
        for (std::size_t i = 0; i < layout.sequences[d][s].size(); ++i)
          if (layout.holder[d][s][i] == c) held.push_back(layout.sequences[d][s][i]);
        slices.push_back(normcheck::summarize(held));
        ids.push_back(s + 1);
      }
      rank.microbatches.push_back(normcheck::make_sequenced_microbatch(std::move(slices)));
      if (!planted) p.sequence_ids.push_back({std::move(ids)});
      p.ranks.push_back(std::move(rank));
    }
  return p;
}

std::uint64_t valid_count(const std::vector<token>& tokens) {
  return static_cast<std::uint64_t>(std::count_if(tokens.begin(), tokens.end(), [](const token& t) { return t; }));
}

// The sequence objective's gradient from the whole sequences, no slice in sight.
rational whole_sequence_objective(const sliced_layout& layout, normcheck::objective_kind objective,
                                  const rational& theta) {
  rational sum = 0;
  std::uint64_t sequences = 0;
  for (const auto& data : layout.sequences)
    for (const auto& targets : data) {
      const std::uint64_t n = valid_count(targets);
      if (n == 0) continue;
      ++sequences;
      rational derivative = 0;
      for (const token& t : targets)
        if (t) derivative += theta - *t;
      sum += objective == normcheck::objective_kind::sequence_mean ? derivative / rational(n) : derivative;
    }
  rational mean = sum / rational(sequences);
  return mean;
}

rc::Gen<normcheck::objective_kind> sliced_objectives() {
  return rc::gen::element(normcheck::objective_kind::sequence_mean, normcheck::objective_kind::sequence_sum_mean);
}

// Whether the correct normalization (and the objective's own weights) give the whole sequences' objective
// however the sequences are split over cp and dealt over dp; `planted`: the slices not joined.
bool sliced_invariant(bool planted) {
  return rc::check("the sequence objectives' gradient does not depend on how sequences are split over dp × cp",
                   [planted] {
                     const sliced_layout layout = *sliced_layouts();
                     const auto objective = *sliced_objectives();
                     const auto reducer = *rc::gen::element(reducer_kind::mean, reducer_kind::sum);
                     const rational theta = rational(*rc::gen::inRange(-20, 21)) / 10;
                     const partition p = sliced_update(layout, objective, reducer, theta, planted);
                     const normcheck::objective_units units(p, objective);
                     const rational expected = whole_sequence_objective(layout, objective, theta);
                     for (const std::string_view name :
                          {std::string_view("global_mean"),
                           reducer == reducer_kind::mean ? std::string_view("scaled_sum") : "global_share"}) {
                       const auto g = normcheck::synchronized_gradient(units, *normcheck::find_normalization(name));
                       RC_ASSERT(g.has_value());
                       RC_ASSERT(*g == expected);
                     }
                   });
}

// How a reckoning of the sequence mistakes may be planted wrong: the slice's length taken from the whole
// sequence, every slice counted over dp (empty or not), or the count over dp × cp taken as B.
enum class sequence_reckoning { right, slice_is_sequence, empty_slices_counted, per_slice_once };

// The weight of every slice's tokens under the three sequence mistakes, in group order, reckoned from the
// layout: what each rank's code divides by, then the reducer.
std::map<std::string, std::optional<std::vector<rational>>> reckoned_sequences(const sliced_layout& layout,
                                                                              normcheck::objective_kind objective,
                                                                              reducer_kind reducer,
                                                                              sequence_reckoning how) {
  const rational w{layout.dp * layout.cp};
  const rational compensation = reducer == reducer_kind::mean ? w : rational(1);
  const rational reduction = reducer == reducer_kind::mean ? 1 / w : rational(1);
  const bool mean = objective == normcheck::objective_kind::sequence_mean;
  std::uint64_t b = 0;
  for (const auto& data : layout.sequences)
    for (const auto& targets : data) b += valid_count(targets) > 0 ? 1 : 0;
  // slice_tokens[d][c][s]: the valid tokens of sequence s that cp rank c of data coordinate d holds.
  std::vector<std::vector<std::vector<std::uint64_t>>> slice_tokens(layout.dp);
  for (std::size_t d = 0; d < layout.dp; ++d) {
    slice_tokens[d].assign(layout.cp, std::vector<std::uint64_t>(layout.sequences[d].size(), 0));
    for (std::size_t s = 0; s < layout.sequences[d].size(); ++s)
      for (std::size_t i = 0; i < layout.sequences[d][s].size(); ++i)
        if (layout.sequences[d][s][i]) ++slice_tokens[d][layout.holder[d][s][i]][s];
  }
  // The sequences a cp coordinate's ranks count over dp: those their slices hold a valid token of.
  auto over_dp = [&](std::size_t c) {
    std::uint64_t count = 0;
    for (std::size_t d = 0; d < layout.dp; ++d)
      for (std::size_t s = 0; s < layout.sequences[d].size(); ++s)
        if (slice_tokens[d][c][s] > 0 || how == sequence_reckoning::empty_slices_counted) ++count;
    return count;
  };
  std::map<std::string, std::optional<std::vector<rational>>> out;
  for (const char* name : {"slice_length", "sequences_over_data_dims", "sequences_counted_per_slice"})
    out[name].emplace();
  if (!mean) out["slice_length"].reset();
  if (layout.dp < 2) out["sequences_over_data_dims"].reset();
  const std::uint64_t per_slice = how == sequence_reckoning::per_slice_once ? b : layout.cp * b;
  for (std::size_t d = 0; d < layout.dp; ++d)
    for (std::size_t c = 0; c < layout.cp; ++c)
      for (std::size_t s = 0; s < layout.sequences[d].size(); ++s) {
        const std::uint64_t n_k = slice_tokens[d][c][s];
        const std::uint64_t n_s = valid_count(layout.sequences[d][s]);
        // The objective's own factor: 1/nₛ under the sequence mean (0 for a slice without tokens), 1 otherwise.
        const rational factor = !mean ? rational(1) : n_k == 0 ? rational(0) : 1 / rational(n_s);
        if (auto& table = out["slice_length"]) {
          const std::uint64_t length = how == sequence_reckoning::slice_is_sequence ? n_s : n_k;
          table->push_back(n_k == 0 ? rational(0) : compensation / rational(b) / rational(length) * reduction);
        }
        if (auto& table = out["sequences_over_data_dims"]) {
          const std::uint64_t count = over_dp(c);
          if (count == 0) table.reset();
          else table->push_back(compensation / rational(count) * factor * reduction);
        }
        out["sequences_counted_per_slice"]->push_back(compensation / rational(per_slice) * factor * reduction);
      }
  return out;
}

// Whether the sequence mistakes' tables are those reckoned from the layout (or wrong the planted way).
bool sequence_mistakes_reckoned(sequence_reckoning how) {
  return rc::check("the sequence mistakes' weights are those reckoned from the slices", [how] {
    const sliced_layout layout = *sliced_layouts();
    const auto objective = *sliced_objectives();
    const auto reducer = *rc::gen::element(reducer_kind::mean, reducer_kind::sum);
    const partition p = sliced_update(layout, objective, reducer, 0);
    const normcheck::objective_units units(p, objective);
    for (const auto& [name, weights] : reckoned_sequences(layout, objective, reducer, how))
      RC_ASSERT(normcheck::delivered_weights(units, *normcheck::find_normalization(name)) == weights);
  });
}

// Whether each sequence mistake gives every slice the objective's weight exactly when the layout hides it
// (so that a correct run is inconclusive there, never failed): slice_length where every slice with a valid
// token holds its whole sequence, sequences_over_data_dims where every cp coordinate counts B, and never
// sequences_counted_per_slice. `planted`: the count over dp taken to hide it always.
bool sequence_mistakes_hidden(bool planted) {
  return rc::check("a sequence mistake weighs every slice as the objective exactly where the split hides it",
                   [planted] {
                     const sliced_layout layout = *sliced_layouts();
                     const auto objective = *sliced_objectives();
                     const partition p = sliced_update(layout, objective, reducer_kind::mean, 0);
                     const normcheck::objective_units units(p, objective);
                     const auto reckoned = reckoned_sequences(layout, objective, reducer_kind::mean,
                                                              sequence_reckoning::right);
                     const auto objective_table =
                         normcheck::delivered_weights(units, *normcheck::find_normalization("global_mean"));
                     RC_ASSERT(objective_table.has_value());
                     bool whole_slices = true;  // every slice with a valid token holds its whole sequence
                     bool every_count_b = true;  // every cp coordinate's count over dp is B
                     std::uint64_t b = 0;
                     for (const auto& data : layout.sequences)
                       for (const auto& targets : data) b += valid_count(targets) > 0 ? 1 : 0;
                     for (std::size_t c = 0; c < layout.cp; ++c) {
                       std::uint64_t count = 0;
                       for (std::size_t d = 0; d < layout.dp; ++d)
                         for (std::size_t s = 0; s < layout.sequences[d].size(); ++s) {
                           std::uint64_t n_k = 0;
                           for (std::size_t i = 0; i < layout.sequences[d][s].size(); ++i)
                             if (layout.sequences[d][s][i] && layout.holder[d][s][i] == c) ++n_k;
                           if (n_k > 0) ++count;
                           if (n_k > 0 && n_k != valid_count(layout.sequences[d][s])) whole_slices = false;
                         }
                       if (count != b) every_count_b = false;
                     }
                     const std::map<std::string, bool> hidden = {
                         {"slice_length", whole_slices},
                         {"sequences_over_data_dims", planted || every_count_b},
                         {"sequences_counted_per_slice", false}};
                     for (const auto& [name, table] : reckoned) {
                       if (!table) continue;
                       RC_ASSERT((table == objective_table) == hidden.at(name));
                     }
                   });
}

}  // namespace

TEST_CASE("the sequence objectives' gradient on dp × cp does not depend on how sequences are split") {
  CHECK(sliced_invariant(false));
  // Planted: slices not joined, each counted as a sequence of its own.
  CHECK_FALSE(sliced_invariant(true));
}

TEST_CASE("the sequence mistakes on dp × cp weigh what the slices give them") {
  CHECK(sequence_mistakes_reckoned(sequence_reckoning::right));
  // Planted: each of the three reckoned wrong, the slice's length, the count over dp, the count over dp × cp.
  CHECK_FALSE(sequence_mistakes_reckoned(sequence_reckoning::slice_is_sequence));
  CHECK_FALSE(sequence_mistakes_reckoned(sequence_reckoning::empty_slices_counted));
  CHECK_FALSE(sequence_mistakes_reckoned(sequence_reckoning::per_slice_once));
}

TEST_CASE("a sequence mistake on dp × cp is hidden exactly where the split hides it") {
  CHECK(sequence_mistakes_hidden(false));
  // Planted: the count over dp said to be hidden on every layout.
  CHECK_FALSE(sequence_mistakes_hidden(true));
}

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
