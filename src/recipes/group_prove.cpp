#include "group_prove.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"

#include "core/deterministic_random.hpp"
#include "count_grid.hpp"
#include "counterexample.hpp"
#include "divisors.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <unordered_map>

namespace normcheck::detail {

// A recipe is evaluated at every group (a sequence, or a microbatch that declares none) and multiplies the
// group's loss sum. For the teaching loss every group's derivative sum is free, so the recipe gives the
// objective's gradient on every partition exactly when c/d equals the weight the objective gives a token of
// every group that holds one (1/N, 1/M, 1/(B·n_s), 1/B or 1/C; d = W under the mean reducer, 1 under sum) and
// c exists at every group, empty ones included.

namespace {

constexpr std::uint64_t scope_world_size = 4;
constexpr std::uint64_t scope_microbatches = 3;
constexpr std::uint64_t scope_tokens = 3;     // per microbatch
constexpr std::uint64_t scope_sequences = 3;  // per microbatch, sequences without a valid token included
// Under the weighted objective with sequences each group sees four token groups of their own weights: a smaller
// scope. Without sequences the group is its microbatch, and three token groups are weighed in the token scope.
constexpr std::uint64_t weighted_world_size = 3;
constexpr std::uint64_t weighted_microbatches = 2;
constexpr unsigned largest_decided_degree = 12;
constexpr std::uint64_t largest_grid = 1'000'000;
constexpr int random_configurations = 20000;
// Wrong configurations whose replay partition is tried for a clean counterexample before any is kept.
constexpr int replay_attempts = 256;

// Per-token weights of the weighted scope (twice each is an integer), and the normalizers of the constant scope.
const std::array<rational, 4> scope_weights{rational(0), fraction(1, 2), rational(1), rational(2)};
const std::array<rational, 6> scope_normalizers{fraction(1, 2), rational(1), rational(2),
                                                rational(3), fraction(7, 2), rational(12)};

bool reads_sequences(const recipe& r) {
  return r.scale.uses(count_variable::B) || r.scale.uses(count_variable::b_r) || r.scale.uses(count_variable::b_m) ||
         r.scale.uses(count_variable::n_s);
}

}  // namespace

group_scope scope_for(const recipe& r, objective_kind objective) {
  group_scope s;
  s.objective = objective;
  s.reducer = r.reducer;
  s.weighted = objective == objective_kind::weighted_token_mean;
  s.constant = objective == objective_kind::constant;
  s.required = counts_sequences(objective);
  s.sequences = s.required || reads_sequences(r);
  const bool four_token_groups = s.weighted && s.sequences;
  s.world_size = four_token_groups ? weighted_world_size : scope_world_size;
  s.microbatches = four_token_groups ? weighted_microbatches : scope_microbatches;
  s.mesh = r.scale.names().mesh();
  s.term = r.scale.names().term();
  return s;
}

namespace {

// The variables the objective's weight of a token reads: T in 1/T.
std::span<const count_variable> objective_variables(objective_kind objective) {
  static constexpr std::array token_mean{count_variable::N};
  static constexpr std::array weighted_token_mean{count_variable::M};
  static constexpr std::array sequence_mean{count_variable::B, count_variable::n_s};
  static constexpr std::array sequence_sum_mean{count_variable::B};
  static constexpr std::array constant{count_variable::C};
  switch (objective) {
    case objective_kind::token_mean: return token_mean;
    case objective_kind::weighted_token_mean: return weighted_token_mean;
    case objective_kind::sequence_mean: return sequence_mean;
    case objective_kind::sequence_sum_mean: return sequence_sum_mean;
    case objective_kind::constant: return constant;
  }
  return token_mean;
}

// Whether the judgement at a group can depend on each count variable (indexed by variable_index). On a mesh W
// is DP·CP, so the sizes matter where W does. Computed once per proof: the views ask it for every variable.
std::array<bool, all_count_variables.size()> relevant_variables(const group_scope& s, const recipe& r) {
  std::array<bool, all_count_variables.size()> relevant{};
  const bool world_size_read = s.reducer == reducer_kind::mean || r.scale.uses(count_variable::W);
  for (count_variable v : all_count_variables) relevant[variable_index(v)] = r.scale.uses(v);
  if (s.reducer == reducer_kind::mean) relevant[variable_index(count_variable::W)] = true;
  if (s.has(mesh_role::data) && world_size_read) relevant[variable_index(count_variable::data_size)] = true;
  if (s.has(mesh_role::sequence) && world_size_read) relevant[variable_index(count_variable::sequence_size)] = true;
  for (count_variable v : objective_variables(s.objective)) relevant[variable_index(v)] = true;
  return relevant;
}

// The group's sequence counts, or those of a microbatch that declares none.
sequence_counts sequences_of(const count_configuration& c) {
  return c.sequences.value_or(sequence_counts{false, c.microbatch_tokens, 0, 0, 0});
}

}  // namespace

count_values values_of(const count_configuration& c) {
  count_values v;
  const sequence_counts q = sequences_of(c);
  v[variable_index(count_variable::W)] = c.world_size;
  v[variable_index(count_variable::N)] = c.valid_tokens;
  v[variable_index(count_variable::n_r)] = c.rank_tokens;
  v[variable_index(count_variable::n_m)] = c.microbatch_tokens;
  v[variable_index(count_variable::G)] = c.microbatches;
  if (c.masses) {
    v[variable_index(count_variable::M)] = (*c.masses)[0];
    v[variable_index(count_variable::m_r)] = (*c.masses)[1];
    v[variable_index(count_variable::m_m)] = (*c.masses)[2];
  } else {
    v[variable_index(count_variable::M)] = c.valid_tokens;
    v[variable_index(count_variable::m_r)] = c.rank_tokens;
    v[variable_index(count_variable::m_m)] = c.microbatch_tokens;
  }
  v[variable_index(count_variable::B)] = q.sequences;
  v[variable_index(count_variable::b_r)] = q.rank_sequences;
  v[variable_index(count_variable::b_m)] = q.microbatch_sequences;
  v[variable_index(count_variable::n_s)] = q.group_tokens;
  if (c.normalizer) v[variable_index(count_variable::C)] = *c.normalizer;
  // Without a mesh the update is one data dimension; without a term the main loss is the loss judged.
  const mesh_counts m = c.mesh.value_or(mesh_counts{c.world_size, 1, 1, c.valid_tokens, c.rank_tokens});
  v[variable_index(count_variable::data_size)] = m.data;
  v[variable_index(count_variable::sequence_size)] = m.sequence;
  v[variable_index(count_variable::replica_size)] = m.replica;
  v[variable_index(count_variable::over_data)] = m.over_data;
  v[variable_index(count_variable::over_sequence)] = m.over_sequence;
  const main_loss_counts main =
      c.main_loss.value_or(main_loss_counts{c.valid_tokens, c.rank_tokens, c.microbatch_tokens});
  v[variable_index(count_variable::main_N)] = main.valid_tokens;
  v[variable_index(count_variable::main_n_r)] = main.rank_tokens;
  v[variable_index(count_variable::main_n_m)] = main.microbatch_tokens;
  return v;
}

namespace {

// Whether the group holds a token the objective weighs: a valid token, of positive weight under the weighted
// objective. Elsewhere only the scale's existence is judged.
bool weighs(const count_configuration& c) {
  if (c.masses) return (c.group_mass ? *c.group_mass : (*c.masses)[2]) > 0;
  return sequences_of(c).group_tokens > 0;
}

// T: what the objective divides a token's loss by at this group.
rational objective_units_at(objective_kind objective, const count_configuration& c) {
  const sequence_counts q = sequences_of(c);
  switch (objective) {
    case objective_kind::token_mean: return rational(c.valid_tokens);
    case objective_kind::weighted_token_mean: return (*c.masses)[0];
    case objective_kind::sequence_mean: return rational(q.sequences) * q.group_tokens;
    case objective_kind::sequence_sum_mean: return rational(q.sequences);
    case objective_kind::constant: return *c.normalizer;
  }
  return rational(c.valid_tokens);
}

}  // namespace

judged judge(const group_scope& s, const recipe& r, const count_configuration& c) {
  judged j;
  j.scale = r.scale.evaluate(values_of(c));
  if (!j.scale.value) {
    j.result = outcome::divides_by_zero;
    return j;
  }
  if (!weighs(c)) return j;
  rational effective = *j.scale.value * objective_units_at(s.objective, c);
  if (s.reducer == reducer_kind::mean) effective /= c.world_size;
  if (effective != 1) j.result = outcome::wrong;
  return j;
}

namespace {

// ---- the exhaustive scope ----

// One group's counts in the exhaustive scope, in integers.
struct group_view {
  std::uint64_t w = 1, g = 1, n = 0, n_r = 0, n_m = 0, n_s = 0, b = 0, b_r = 0, b_m = 0;
  bool declared = false;
  // On a mesh: its sizes, and the tokens of the other ranks of the group's sequence coordinate (along the data
  // dimension) and of its data coordinate (along the sequence dimension).
  std::uint64_t dp = 1, cp = 1, tp = 1, along_data = 0, along_sequence = 0;
  // Beside a term: the main loss's counts.
  std::uint64_t main_n = 0, main_n_r = 0, main_n_m = 0;
};

// The sizes of a mesh of w ranks (DP·CP = w), TP beside them.
struct mesh_shape {
  std::uint64_t dp = 1, cp = 1, tp = 1;
};

// The replica sizes of the scope: 3, 2 and 1 where the recipe reads TP (the judgement depends on nothing else of
// it), else 2.
std::vector<std::uint64_t> replica_sizes(const group_scope& s, bool reads_replicas) {
  if (!s.has(mesh_role::replica)) return {1};
  if (!reads_replicas) return {2};
  return {3, 2, 1};  // 3 first: a factor of TP then differs from a data or sequence size of 2
}

// The shapes of w ranks on the scope's mesh, a size above 1 only along a role it has. `full`: those whose every
// dimension has a size of 2 or more (tried first, so that a counterexample is on the mesh as declared where one
// exists there), else the others. Without a mesh, one shape, full.
std::vector<mesh_shape> shapes_of(const group_scope& s, std::uint64_t w, bool reads_replicas, bool full) {
  if (s.mesh.empty()) return full ? std::vector<mesh_shape>{{w, 1, 1}} : std::vector<mesh_shape>{};
  std::vector<mesh_shape> out;
  for (std::uint64_t dp = 1; dp <= w; ++dp) {
    if (w % dp != 0) continue;
    const std::uint64_t cp = w / dp;
    if ((dp > 1 && !s.has(mesh_role::data)) || (cp > 1 && !s.has(mesh_role::sequence))) continue;
    for (std::uint64_t tp : replica_sizes(s, reads_replicas)) {
      const bool is_full = (!s.has(mesh_role::data) || dp >= 2) && (!s.has(mesh_role::sequence) || cp >= 2) &&
                           (!s.has(mesh_role::replica) || tp >= 2);
      if (is_full == full) out.push_back({dp, cp, tp});
    }
  }
  return out;
}

// The fewest sequences that hold `tokens` valid tokens in microbatches of at most scope_tokens, when every
// microbatch with a token declares sequences; none otherwise.
std::uint64_t fewest_sequences(std::uint64_t tokens, bool required) {
  return required ? (tokens + scope_tokens - 1) / scope_tokens : 0;
}

// Every distinct view a group of a partition of the scope has, smallest N first: W ≤ world_size ranks of
// G ≤ microbatches microbatches of at most scope_tokens tokens, each microbatch either without sequences or
// with 1 to scope_sequences of them. A microbatch's sequences hold all its tokens, so the group's microbatch
// holds n_m − n_s more tokens in b_m − [n_s > 0] more sequences with tokens; any number of further sequences
// without tokens changes no count.
//
// On a mesh the views run over its shapes (W = DP·CP), each full shape before the others, and the other ranks'
// tokens are split between the group's sequence coordinate, its data coordinate and the rest where the recipe
// reads a count reduced over one role (`splits`). Beside a term, the main loss's counts run over every rank and
// microbatch of at most scope_tokens tokens where the recipe reads them (`main_counts`).
struct view_options {
  bool splits = false;
  bool main_counts = false;
  bool reads_replicas = false;
};

template <typename Visit>
void each_view_of_shapes(const group_scope& s, const view_options& options, bool full, Visit& visit) {
  const std::uint64_t per_rank = s.microbatches * scope_tokens;
  // The main loss's counts beside a view, or the view itself where the recipe does not read them.
  auto with_main = [&](group_view v) {
    if (!options.main_counts) {
      v.main_n = v.n;
      v.main_n_r = v.n_r;
      v.main_n_m = v.n_m;
      return visit(v);
    }
    for (std::uint64_t n_m = 0; n_m <= scope_tokens; ++n_m)
      for (std::uint64_t rest = 0; rest <= (v.g - 1) * scope_tokens; ++rest)
        for (std::uint64_t others = 0; others <= (v.w - 1) * per_rank; ++others) {
          if (n_m + rest + others == 0) continue;
          v.main_n_m = n_m;
          v.main_n_r = n_m + rest;
          v.main_n = n_m + rest + others;
          visit(v);
        }
  };
  // The other ranks' tokens split over the mesh.
  auto with_split = [&](group_view v) {
    const std::uint64_t others = v.n - v.n_r;
    if (!options.splits) {
      v.along_data = v.dp > 1 ? others : 0;  // without a sequence dimension every other rank is along the data one
      v.along_sequence = v.dp > 1 ? 0 : others;
      return with_main(v);
    }
    const std::uint64_t corner = (v.dp - 1) * (v.cp - 1) * per_rank;
    for (std::uint64_t a = 0; a <= std::min(others, (v.dp - 1) * per_rank); ++a)
      for (std::uint64_t b = 0; a + b <= others && b <= (v.cp - 1) * per_rank; ++b) {
        if (others - a - b > corner) continue;
        v.along_data = a;
        v.along_sequence = b;
        with_main(v);
      }
  };
  for (std::uint64_t n = 1; n <= s.world_size * per_rank; ++n)
    for (std::uint64_t w = 1; w <= s.world_size; ++w)
      for (const mesh_shape& shape : shapes_of(s, w, options.reads_replicas, full))
        for (std::uint64_t g = 1; g <= s.microbatches; ++g) {
          auto with_rest = [&](group_view v) {
            v.w = w;
            v.g = g;
            v.n = n;
            v.dp = shape.dp;
            v.cp = shape.cp;
            v.tp = shape.tp;
            for (std::uint64_t rest = 0; rest <= (g - 1) * scope_tokens; ++rest) {
              v.n_r = v.n_m + rest;
              if (v.n_r > n) break;
              const std::uint64_t others = n - v.n_r;
              if (others > (w - 1) * per_rank) continue;
              const std::uint64_t rest_most = s.sequences ? rest : 0;
              const std::uint64_t others_most = s.sequences ? others : 0;
              for (std::uint64_t rest_sequences = fewest_sequences(rest, s.required); rest_sequences <= rest_most;
                   ++rest_sequences)
                for (std::uint64_t other_sequences = fewest_sequences(others, s.required);
                     other_sequences <= others_most; ++other_sequences) {
                  v.b_r = v.b_m + rest_sequences;
                  v.b = v.b_r + other_sequences;
                  with_split(v);
                }
            }
          };
          // A microbatch without tokens and without sequences shows the counts of one whose sequences hold none.
          if (!s.required)
            for (std::uint64_t n_m = s.sequences ? 1 : 0; n_m <= scope_tokens; ++n_m) {
              group_view v;
              v.n_m = v.n_s = n_m;
              with_rest(v);
            }
          if (s.sequences)
            for (std::uint64_t n_s = 0; n_s <= scope_tokens; ++n_s)
              for (std::uint64_t more = 0; n_s + more <= scope_tokens; ++more)
                for (std::uint64_t more_sequences = std::min<std::uint64_t>(more, 1);
                     more_sequences <= std::min(more, scope_sequences - 1); ++more_sequences) {
                  group_view v;
                  v.declared = true;
                  v.n_s = n_s;
                  v.n_m = n_s + more;
                  v.b_m = (n_s > 0 ? 1 : 0) + more_sequences;
                  with_rest(v);
                }
        }
}

template <typename Visit>
void each_view(const group_scope& s, const view_options& options, Visit&& visit) {
  for (const bool full : {true, false}) each_view_of_shapes(s, options, full, visit);
}

// Partitions in the exhaustive scope: ordered ranks of ordered microbatches, each a token count or a list of
// sequences' token counts, with at least one valid token.
// On a mesh each W counts once per shape of the scope; beside a term, each rank holds the term's microbatches and as
// many of the main loss's, and both losses hold a valid token.
integer scope_partitions(const group_scope& s, bool reads_replicas) {
  // Shapes of one microbatch: without sequences (0 to scope_tokens tokens; only an empty one where every
  // microbatch with a token declares sequences), or k sequences sharing at most scope_tokens tokens.
  integer shapes = s.required ? 1 : scope_tokens + 1;
  integer empty_shapes = 1;
  if (s.sequences)
    for (std::uint64_t k = 1; k <= scope_sequences; ++k) {
      integer ways = 1;  // C(scope_tokens + k, k)
      for (std::uint64_t i = 1; i <= k; ++i) ways = ways * (scope_tokens + i) / i;
      shapes += ways;
      empty_shapes += 1;
    }
  const integer main_shapes = scope_tokens + 1;  // beside a term: the main loss's microbatches, without sequences
  integer ranks = 0;
  integer empty_ranks = 0;
  integer main_empty_ranks = 0;  // the term's tokens beside a main loss without any
  integer both_empty_ranks = 0;
  for (std::uint64_t g = 1; g <= s.microbatches; ++g) {
    const auto power = [g](const integer& x) { return boost::multiprecision::pow(x, static_cast<unsigned>(g)); };
    if (s.term.empty()) {
      ranks += power(shapes);
      empty_ranks += power(empty_shapes);
    } else {
      ranks += power(shapes * main_shapes);
      empty_ranks += power(empty_shapes * main_shapes);
      main_empty_ranks += power(shapes);
      both_empty_ranks += power(empty_shapes);
    }
  }
  integer total = 0;
  for (std::uint64_t w = 1; w <= s.world_size; ++w) {
    const auto power = [w](const integer& x) { return boost::multiprecision::pow(x, static_cast<unsigned>(w)); };
    integer of_w = power(ranks) - power(empty_ranks);
    if (!s.term.empty()) of_w += power(both_empty_ranks) - power(main_empty_ranks);
    const std::size_t shapes_of_w =
        shapes_of(s, w, reads_replicas, true).size() + shapes_of(s, w, reads_replicas, false).size();
    total += of_w * static_cast<unsigned>(shapes_of_w);
  }
  return total;
}

// The configuration of a view, with the per-token weights of its four token groups (the group, the rest of its
// microbatch, the rest of its rank, the other ranks) and a normalizer where the scope has them.
count_configuration configuration_of(const group_scope& s, const group_view& v, const std::array<rational, 4>* weights,
                                     const rational* normalizer) {
  count_configuration c{v.w, v.n, v.n_r, v.n_m, v.g, std::nullopt};
  if (s.sequences) c.sequences = sequence_counts{v.declared, v.n_s, v.b, v.b_r, v.b_m};
  if (weights) {
    const rational group = (*weights)[0] * v.n_s;
    const rational microbatch = group + (*weights)[1] * (v.n_m - v.n_s);
    const rational rank = microbatch + (*weights)[2] * (v.n_r - v.n_m);
    const rational update = rank + (*weights)[3] * (v.n - v.n_r);
    c.masses = std::array<rational, 3>{update, rank, microbatch};
    c.group_mass = group;
  }
  if (normalizer) c.normalizer = *normalizer;
  if (!s.mesh.empty()) c.mesh = mesh_counts{v.dp, v.cp, v.tp, v.n_r + v.along_data, v.n_r + v.along_sequence};
  if (!s.term.empty()) c.main_loss = main_loss_counts{v.main_n, v.main_n_r, v.main_n_m};
  return c;
}

// The judgement of a view depends only on the variables it can read: they key a memo, so that each distinct
// judgement is computed once however many partitions share it.
using view_key = std::array<std::uint64_t, all_count_variables.size() + 1>;

struct view_key_hash {
  std::size_t operator()(const view_key& key) const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    for (std::uint64_t part : key) h = (h ^ part) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }
};

}  // namespace

// ---- the replay partition of a configuration ----

namespace {

// Deals `tokens` valid tokens (target 0) in `sequences` sequences with tokens over the microbatches `slots`,
// round robin; without sequences, as plain tokens.
void deal(std::vector<std::vector<token>*> slots, std::vector<std::vector<std::size_t>*> lengths, std::uint64_t tokens,
          std::uint64_t sequences) {
  if (slots.empty()) return;
  if (sequences == 0) {
    for (std::uint64_t i = 0; i < tokens; ++i) slots[i % slots.size()]->emplace_back(rational(0));
    return;
  }
  for (std::uint64_t j = 0; j < sequences; ++j) {
    const std::uint64_t length = j == 0 ? tokens - (sequences - 1) : 1;
    slots[j % slots.size()]->insert(slots[j % slots.size()]->end(), length, token(rational(0)));
    lengths[j % slots.size()]->push_back(length);
  }
}

// The scope's mesh with the configuration's sizes.
std::vector<mesh_dim> mesh_of(const group_scope& s, const count_configuration& c) {
  std::vector<mesh_dim> dims = s.mesh;
  for (mesh_dim& dim : dims)
    dim.size = dim.role == mesh_role::data       ? c.mesh->data
               : dim.role == mesh_role::sequence ? c.mesh->sequence
                                                 : c.mesh->replica;
  return dims;
}

// Deals the other ranks' tokens (target `target`) on the mesh: `along_data` to the other ranks of rank 0's
// sequence coordinate, `along_sequence` to those of its data coordinate, the rest to the others.
void deal_on_the_mesh(std::vector<std::vector<std::vector<token>>>& ranks, const std::vector<mesh_dim>& mesh,
                      std::uint64_t others, std::uint64_t along_data, std::uint64_t along_sequence,
                      const rational& target) {
  partition shape;
  shape.mesh = mesh;
  shape.ranks.resize(ranks.size());
  std::array<std::vector<std::vector<token>*>, 3> slots;  // along data, along sequence, the rest
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    const bool same_sequence = shape.mesh_index(r, mesh_role::sequence) == 0;
    const bool same_data = shape.mesh_index(r, mesh_role::data) == 0;
    slots[same_sequence ? 0 : same_data ? 1 : 2].push_back(&ranks[r][0]);
  }
  const std::array<std::uint64_t, 3> counts{along_data, along_sequence, others - along_data - along_sequence};
  for (std::size_t k = 0; k < 3; ++k)
    for (std::uint64_t i = 0; i < counts[k]; ++i) slots[k][i % slots[k].size()]->emplace_back(target);
}

}  // namespace

// A partition whose rank 0, microbatch 0, first group has the configuration's counts; that group's tokens have
// target 1 and all others 0 at θ = 0, so the group alone decides the gradient. On a mesh, rank 0 has every
// coordinate 0; beside a term, the group is the term's (`terms[0]`) and `ranks` the main loss's.
token_partition partition_for(const group_scope& s, const count_configuration& c) {
  const sequence_counts q = sequences_of(c);
  token_partition tokens;
  if (!s.weighted) tokens.objective = s.objective;
  if (c.normalizer) tokens.normalizer = *c.normalizer;
  std::vector<std::vector<token>> first(c.microbatches);
  std::vector<std::vector<std::size_t>> first_lengths(c.microbatches);
  first[0].assign(q.group_tokens, token(rational(1)));
  if (q.declared) {
    first_lengths[0].push_back(q.group_tokens);
    const std::uint64_t more_sequences = q.microbatch_sequences - (q.group_tokens > 0 ? 1 : 0);
    deal({&first[0]}, {&first_lengths[0]}, c.microbatch_tokens - q.group_tokens, more_sequences);
  }
  std::vector<std::vector<token>*> rest;
  std::vector<std::vector<std::size_t>*> rest_lengths;
  for (std::size_t m = 1; m < first.size(); ++m) {
    rest.push_back(&first[m]);
    rest_lengths.push_back(&first_lengths[m]);
  }
  deal(rest, rest_lengths, c.rank_tokens - c.microbatch_tokens, q.rank_sequences - q.microbatch_sequences);
  std::vector<std::vector<std::vector<token>>> ranks{std::move(first)};
  std::vector<std::vector<std::vector<std::size_t>>> lengths{std::move(first_lengths)};
  ranks.resize(c.world_size, std::vector<std::vector<token>>(1));
  lengths.resize(c.world_size, std::vector<std::vector<std::size_t>>(1));
  tokens.mesh = mesh_of(s, c);
  if (tokens.mesh.empty()) {
    std::vector<std::vector<token>*> others;
    std::vector<std::vector<std::size_t>*> other_lengths;
    for (std::size_t r = 1; r < ranks.size(); ++r) {
      others.push_back(&ranks[r][0]);
      other_lengths.push_back(&lengths[r][0]);
    }
    deal(others, other_lengths, c.valid_tokens - c.rank_tokens, q.sequences - q.rank_sequences);
  } else {
    deal_on_the_mesh(ranks, tokens.mesh, c.valid_tokens - c.rank_tokens, c.mesh->over_data - c.rank_tokens,
                     c.mesh->over_sequence - c.rank_tokens, rational(0));
  }
  if (c.main_loss) {
    // The main loss's tokens, target 1 (a loss the gate can judge), laid out as the term's: rank 0's first
    // microbatch, the rest of rank 0, the other ranks.
    const main_loss_counts& main = *c.main_loss;
    std::vector<std::vector<std::vector<token>>> main_ranks(c.world_size, std::vector<std::vector<token>>(1));
    main_ranks[0].resize(c.microbatches);
    main_ranks[0][0].assign(main.microbatch_tokens, token(rational(1)));
    for (std::uint64_t i = 0; i < main.rank_tokens - main.microbatch_tokens; ++i)
      main_ranks[0][1 + i % (c.microbatches - 1)].emplace_back(rational(1));
    for (std::uint64_t i = 0; i < main.valid_tokens - main.rank_tokens; ++i)
      main_ranks[1 + i % (c.world_size - 1)][0].emplace_back(rational(1));
    tokens.terms.push_back({s.term, std::move(ranks)});
    ranks = std::move(main_ranks);
  }
  // A microbatch with tokens but no sequence (a plain one) keeps no lengths; a sequenced microbatch whose
  // tokens fill no sequence cannot occur.
  tokens.ranks = std::move(ranks);
  const bool any = std::any_of(lengths.begin(), lengths.end(), [](const auto& rank) {
    return std::any_of(rank.begin(), rank.end(), [](const auto& m) { return !m.empty(); });
  });
  if (any) tokens.sequences = std::move(lengths);
  if (c.masses) {
    // Every token of a token group weighs the group's mass over its count, so the masses are the configuration's.
    const auto [mass, rank_mass, microbatch_mass] = *c.masses;
    const rational group_mass = c.group_mass.value_or(microbatch_mass);
    auto each = [](const rational& part, std::uint64_t count) {
      return count == 0 ? rational(0) : rational(part / count);
    };
    const rational own = each(group_mass, q.group_tokens);
    const rational rest_of_microbatch = each(microbatch_mass - group_mass, c.microbatch_tokens - q.group_tokens);
    const rational rest_of_rank = each(rank_mass - microbatch_mass, c.rank_tokens - c.microbatch_tokens);
    const rational other_ranks = each(mass - rank_mass, c.valid_tokens - c.rank_tokens);
    for (std::size_t r = 0; r < tokens.ranks.size(); ++r) {
      std::vector<std::vector<token>> rank_weights;
      for (std::size_t m = 0; m < tokens.ranks[r].size(); ++m) {
        std::vector<token> w;
        for (std::size_t i = 0; i < tokens.ranks[r][m].size(); ++i)
          w.emplace_back(r > 0 ? other_ranks : m > 0 ? rest_of_rank : i < q.group_tokens ? own : rest_of_microbatch);
        rank_weights.push_back(std::move(w));
      }
      tokens.weights.push_back(std::move(rank_weights));
    }
  }
  return tokens;
}

recipe_counterexample expose(const group_scope& s, const recipe& r, const count_configuration& c, const judged& j) {
  return counterexample_at(r, c, j.scale, j.result == outcome::divides_by_zero, partition_for(s, c), s.objective);
}

namespace {

// "0 wherever N = 777" for a divisor in one name alone, whose zeros in the domain are then all of its roots.
std::string single_variable_zeros(const polynomial& numerator) {
  std::optional<count_variable> only;
  for (count_variable v : all_count_variables)
    if (numerator.uses(v)) {
      if (only) return "";
      only = v;
    }
  if (!only) return "";
  const std::vector<rational> roots = roots_in_domain(numerator.in_one_variable(*only, count_values{}), *only);
  if (roots.empty()) return "";
  std::string text = "0 wherever " + std::string(variable_name(*only)) + " = ";
  for (std::size_t i = 0; i < roots.size(); ++i) text += (i ? " or " : "") + to_string(roots[i]);
  return text;
}

std::string list_of(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

// One proof: the scopes in order, each finding kept until one refutes the recipe.
class group_prover {
public:
  group_prover(const recipe& r, objective_kind objective)
      : recipe_(r), scope_(scope_for(r, objective)), relevant_(relevant_variables(scope_, r)) {
    using cv = count_variable;
    view_options_.splits = r.scale.uses(cv::over_data) || r.scale.uses(cv::over_sequence);
    view_options_.main_counts = r.scale.uses(cv::main_N) || r.scale.uses(cv::main_n_r) || r.scale.uses(cv::main_n_m);
    view_options_.reads_replicas = r.scale.uses(cv::replica_size);
  }

  proof_result run() {
    exhaustive_scope();
    if (!first_wrong_) random_scope();
    if (!first_wrong_ && !first_zero_) divisors_beyond_the_scopes();
    if (!first_wrong_) decide_for_all_counts();
    if (first_wrong_) {
      result_.verdict = proof_verdict::wrong;
      result_.counterexample = expose(scope_, recipe_, first_wrong_->first, first_wrong_->second);
      if (first_zero_) result_.division_risk = expose(scope_, recipe_, first_zero_->first, first_zero_->second);
    } else if (first_zero_) {
      result_.verdict = proof_verdict::divides_by_zero;
      result_.counterexample = expose(scope_, recipe_, first_zero_->first, first_zero_->second);
    }
    return result_;
  }

private:
  // Keeps the first wrong and the first dividing configuration. A wrong one is kept when its replay partition
  // is defined everywhere (the file then shows two numbers that differ), or after enough tries.
  void note(const count_configuration& c, const judged& j) {
    if (j.result == outcome::wrong && !first_wrong_) {
      token_partition tokens = partition_for(scope_, c);
      tokens.reducer = recipe_.reducer;
      if (++replays_ > replay_attempts || judged_gradient(tokens, recipe_).value) first_wrong_.emplace(c, j);
    }
    if (j.result == outcome::divides_by_zero && !first_zero_) first_zero_.emplace(c, j);
  }

  bool settled(outcome result) const {
    return result == outcome::holds || (result == outcome::wrong && first_wrong_) ||
           (result == outcome::divides_by_zero && first_zero_);
  }

  // Judges a view under every weighting or normalizer of the scope; each distinct judgement once.
  void judge_view(const group_view& v, std::unordered_map<view_key, judged, view_key_hash>& memo) {
    view_key base{};
    auto set = [&](count_variable variable, std::uint64_t value) {
      if (relevant(variable)) base[variable_index(variable)] = value;
    };
    set(count_variable::W, v.w);
    set(count_variable::N, v.n);
    set(count_variable::n_r, v.n_r);
    set(count_variable::n_m, v.n_m);
    set(count_variable::G, v.g);
    set(count_variable::B, v.b);
    set(count_variable::b_r, v.b_r);
    set(count_variable::b_m, v.b_m);
    set(count_variable::n_s, v.n_s);
    set(count_variable::data_size, v.dp);
    set(count_variable::sequence_size, v.cp);
    set(count_variable::replica_size, v.tp);
    set(count_variable::over_data, v.n_r + v.along_data);
    set(count_variable::over_sequence, v.n_r + v.along_sequence);
    set(count_variable::main_N, v.main_n);
    set(count_variable::main_n_r, v.main_n_r);
    set(count_variable::main_n_m, v.main_n_m);
    auto once = [&](view_key key, const std::array<rational, 4>* weights, const rational* normalizer) {
      ++judged_configurations_;
      auto found = memo.find(key);
      if (found == memo.end())
        found = memo.emplace(key, judge(scope_, recipe_, configuration_of(scope_, v, weights, normalizer))).first;
      if (!settled(found->second.result)) note(configuration_of(scope_, v, weights, normalizer), found->second);
    };
    if (scope_.constant) {
      for (std::size_t i = 0; i < scope_normalizers.size(); ++i) {
        view_key key = base;
        if (relevant(count_variable::C)) key[variable_index(count_variable::C)] = i;
        key.back() = v.n_s > 0;
        once(key, nullptr, &scope_normalizers[i]);
      }
      return;
    }
    if (!scope_.weighted) {
      view_key key = base;
      key.back() = v.n_s > 0;
      once(key, nullptr, nullptr);
      return;
    }
    const std::array<std::uint64_t, 4> group_tokens{v.n_s, v.n_m - v.n_s, v.n_r - v.n_m, v.n - v.n_r};
    std::array<std::size_t, 4> choice{};
    for (std::size_t combination = 0; combination < 256; ++combination) {
      bool distinct = true;  // skip repeats that only change the weight of a token group without tokens
      for (std::size_t k = 0; k < 4; ++k) {
        choice[k] = (combination >> (2 * k)) & 3;
        if (group_tokens[k] == 0 && choice[k] != 0) distinct = false;
      }
      if (!distinct) continue;
      // Twice every mass is an integer: the weights are multiples of 1/2.
      std::array<std::uint64_t, 4> twice{};
      for (std::size_t k = 0; k < 4; ++k) twice[k] = (choice[k] == 3 ? 4 : choice[k]) * group_tokens[k];
      const std::uint64_t microbatch = twice[0] + twice[1];
      const std::uint64_t rank = microbatch + twice[2];
      const std::uint64_t update = rank + twice[3];
      if (update == 0) continue;  // M = 0 has no objective
      view_key key = base;
      if (relevant(count_variable::M)) key[variable_index(count_variable::M)] = update;
      if (relevant(count_variable::m_r)) key[variable_index(count_variable::m_r)] = rank;
      if (relevant(count_variable::m_m)) key[variable_index(count_variable::m_m)] = microbatch;
      key.back() = twice[0] > 0;
      const std::array<rational, 4> weights{scope_weights[choice[0]], scope_weights[choice[1]],
                                            scope_weights[choice[2]], scope_weights[choice[3]]};
      once(key, &weights, nullptr);
    }
  }

  void exhaustive_scope() {
    std::unordered_map<view_key, judged, view_key_hash> memo;
    std::uint64_t views = 0;
    each_view(scope_, view_options_, [&](const group_view& v) {
      ++views;
      judge_view(v, memo);
    });
    const std::string bounds = "W ≤ " + std::to_string(scope_.world_size) + ", G ≤ " +
                               std::to_string(scope_.microbatches) + " and at most " + std::to_string(scope_tokens) +
                               " tokens per microbatch";
    std::string text = "every partition with " + bounds;
    if (!scope_.sequences)
      text += " (sequences do not matter: neither the recipe nor the objective reads them)";
    else if (scope_.required)
      text += ", every microbatch with a valid token declaring 1 to " + std::to_string(scope_sequences) +
              " sequences (sequences without a valid token included)";
    else
      text += ", each microbatch declaring 1 to " + std::to_string(scope_sequences) +
              " sequences (sequences without a valid token included) or none";
    text += on_the_mesh() + beside_the_term();
    text += " (" + grouped(scope_partitions(scope_, view_options_.reads_replicas).str()) +
            (scope_.term.empty() ? " partitions" : " pairs of the two losses' partitions") + ", through the " +
            grouped(views) + " distinct " +
            (scope_.sequences ? "(W, G, N, n_r, n_m, n_s, B, b_r, b_m)" : "(" + view_names() + ")") +
            " a group of them can see";
    if (scope_.constant) {
      std::vector<std::string> values;
      for (const rational& c : scope_normalizers) values.push_back(to_string(c));
      text += ", each with C = " + list_of(values) + " (" + grouped(judged_configurations_) + " configurations)";
    }
    if (scope_.weighted)
      text += std::string(", each with the tokens of the ") +
              (scope_.sequences ? "group, of the rest of its microbatch," : "microbatch,") +
              " of the rest of its rank and of the other ranks weighing 0, 1/2, 1 or 2 each (" +
              grouped(judged_configurations_) + " configurations with M > 0)";
    result_.coverage = text + ")" + (scope_.mesh.empty() ? "" : ", every dimension of size 2 or more first") +
                       ", smallest " + names().spelling(count_variable::N) + " first";
  }

  const recipe_names& names() const { return recipe_.scale.names(); }

  // Whether the judgement at a group can depend on `v`.
  bool relevant(count_variable v) const { return relevant_[variable_index(v)]; }

  // "W, N, n_r, n_m, G", and the mesh's or the main loss's names the recipe reads.
  std::string view_names() const {
    std::vector<std::string> read;
    for (count_variable v :
         {count_variable::W, count_variable::N, count_variable::n_r, count_variable::n_m, count_variable::G})
      read.push_back(names().spelling(v));
    for (std::size_t i = update_variables; i < all_count_variables.size(); ++i)
      if (relevant(all_count_variables[i])) read.push_back(names().spelling(all_count_variables[i]));
    return list_of(read);
  }

  // ", laid out on dp (data) × cp (sequence) × tp (replica): W = DP·CP in every factorization, TP = 2".
  std::string on_the_mesh() const {
    if (scope_.mesh.empty()) return "";
    std::string dims;
    for (const mesh_dim& dim : scope_.mesh)
      dims += (dims.empty() ? "" : " × ") + dim.name + " (" + std::string(mesh_role_name(dim.role)) + ")";
    std::string sizes;
    const mesh_dim* data = names().dimension(mesh_role::data);
    const mesh_dim* sequence = names().dimension(mesh_role::sequence);
    const mesh_dim* replica = names().dimension(mesh_role::replica);
    auto size = [&](const mesh_dim* dim) {
      return names().spelling(dim == data       ? count_variable::data_size
                              : dim == sequence ? count_variable::sequence_size
                                                : count_variable::replica_size);
    };
    if (data && sequence)
      sizes = ": W = " + size(data) + "·" + size(sequence) + " in every factorization";
    else if (data || sequence)
      sizes = ": W = " + size(data ? data : sequence);
    if (replica)
      sizes += std::string(sizes.empty() ? ": " : ", ") + size(replica) +
               (view_options_.reads_replicas ? " from 1 to 3" : " = 2 (the recipe does not read it)");
    return ", laid out on the mesh " + dims + sizes + " (replicas counted once in N)";
  }

  // ", the term mtp's tokens beside the main loss's, each rank's microbatches of both holding at most 3 tokens".
  std::string beside_the_term() const {
    if (scope_.term.empty()) return "";
    return ", the term " + scope_.term + "'s tokens (" + names().spelling(count_variable::N) +
           ", …) beside the main loss's (" + names().spelling(count_variable::main_N) +
           ", …), each rank holding as many microbatches of both" +
           (view_options_.main_counts ? "" : " (the main loss's counts do not matter: the recipe does not read them)");
  }

  // A random configuration far beyond the exhaustive scope.
  count_configuration random_configuration(deterministic_random& random) const {
    const std::uint64_t most_tokens = 1000;     // per microbatch
    const std::uint64_t most_sequences = 64;    // per microbatch
    count_configuration c;
    c.world_size = 1 + random.below(64);
    c.microbatches = 1 + random.below(16);
    sequence_counts q;
    q.declared = scope_.sequences && (scope_.required || random.below(4) != 0);
    // The fewest sequences that hold these tokens in microbatches of at most most_tokens.
    auto fewest = [&](std::uint64_t tokens) {
      return scope_.required ? (tokens + most_tokens - 1) / most_tokens : std::uint64_t{0};
    };
    auto some_sequences = [&](std::uint64_t tokens, std::uint64_t microbatches) -> std::uint64_t {
      if (!scope_.sequences || tokens == 0) return 0;
      const std::uint64_t low = fewest(tokens);
      const std::uint64_t high = std::min(tokens, most_sequences * microbatches);
      return low + random.below(high - low + 1);
    };
    if (q.declared) {
      q.group_tokens = random.below(most_tokens + 1);
      const std::uint64_t more = random.below(most_tokens - q.group_tokens + 1);
      const std::uint64_t more_sequences = more == 0 ? 0 : 1 + random.below(std::min(more, most_sequences - 1));
      c.microbatch_tokens = q.group_tokens + more;
      q.microbatch_sequences = (q.group_tokens > 0 ? 1 : 0) + more_sequences;
    } else {
      c.microbatch_tokens = q.group_tokens = random.below(most_tokens + 1);
    }
    const std::uint64_t rest = c.microbatches > 1 ? random.below(most_tokens * (c.microbatches - 1) + 1) : 0;
    c.rank_tokens = c.microbatch_tokens + rest;
    q.rank_sequences = q.microbatch_sequences + some_sequences(rest, c.microbatches - 1);
    const std::uint64_t others = c.world_size > 1 ? random.below(16 * most_tokens * (c.world_size - 1) + 1) : 0;
    c.valid_tokens = c.rank_tokens + others;
    q.sequences = q.rank_sequences + some_sequences(others, 16 * (c.world_size - 1));
    if (c.valid_tokens == 0) {
      c.valid_tokens = c.rank_tokens = c.microbatch_tokens = q.group_tokens = 1;
      if (q.declared) q.sequences = q.rank_sequences = q.microbatch_sequences = 1;
    }
    if (scope_.sequences) c.sequences = q;
    if (!scope_.mesh.empty()) lay_out_on_a_mesh(c, random);
    if (!scope_.term.empty()) {
      main_loss_counts main;
      main.microbatch_tokens = random.below(most_tokens + 1);
      main.rank_tokens =
          main.microbatch_tokens + (c.microbatches > 1 ? random.below(most_tokens * (c.microbatches - 1) + 1) : 0);
      main.valid_tokens =
          main.rank_tokens + (c.world_size > 1 ? random.below(16 * most_tokens * (c.world_size - 1) + 1) : 0);
      if (main.valid_tokens == 0) main.valid_tokens = main.rank_tokens = main.microbatch_tokens = 1;
      c.main_loss = main;
    }
    if (scope_.weighted) {
      std::array<rational, 4> weights;
      for (rational& w : weights) w = fraction(random.below(17), 1 + random.below(8));
      group_view v{c.world_size, c.microbatches, c.valid_tokens, c.rank_tokens, c.microbatch_tokens,
                   q.group_tokens, q.sequences, q.rank_sequences, q.microbatch_sequences, q.declared};
      count_configuration weighted = configuration_of(scope_, v, &weights, nullptr);
      if ((*weighted.masses)[0] == 0) {
        const std::array<rational, 4> ones{rational(1), rational(1), rational(1), rational(1)};
        weighted = configuration_of(scope_, v, &ones, nullptr);
      }
      c.masses = weighted.masses;
      c.group_mass = weighted.group_mass;
    }
    if (scope_.constant) c.normalizer = fraction(1 + random.below(64), 1 + random.below(8));
    return c;
  }

  // A random mesh under a configuration drawn without one: each size up to 8 along a role the mesh has, W their
  // product, and the other ranks' tokens split at random between the group's sequence coordinate, its data
  // coordinate and the rest (sequences are not drawn: the mesh's scopes hold none).
  void lay_out_on_a_mesh(count_configuration& c, deterministic_random& random) const {
    mesh_counts m;
    m.data = scope_.has(mesh_role::data) ? 1 + random.below(8) : 1;
    m.sequence = scope_.has(mesh_role::sequence) ? 1 + random.below(8) : 1;
    m.replica = scope_.has(mesh_role::replica) ? 1 + random.below(8) : 1;
    c.world_size = m.data * m.sequence;
    if (c.world_size == 1) c.valid_tokens = c.rank_tokens;
    if (c.valid_tokens == 0) c.valid_tokens = c.rank_tokens = c.microbatch_tokens = 1;
    const std::uint64_t others = c.valid_tokens - c.rank_tokens;
    std::uint64_t along_data = 0;
    std::uint64_t along_sequence = 0;
    if (m.data > 1 && m.sequence > 1) {
      along_data = random.below(others + 1);
      along_sequence = random.below(others - along_data + 1);
    } else if (m.data > 1) {
      along_data = others;
    } else {
      along_sequence = others;
    }
    m.over_data = c.rank_tokens + along_data;
    m.over_sequence = c.rank_tokens + along_sequence;
    c.mesh = m;
  }

  void random_scope() {
    deterministic_random random(0x2545F4914F6CDD1Dull);
    for (int i = 0; i < random_configurations && !first_wrong_; ++i) {
      const count_configuration c = random_configuration(random);
      const judged j = judge(scope_, recipe_, c);
      if (!settled(j.result)) note(c, j);
    }
    result_.coverage += "; " + std::to_string(random_configurations) + " random configurations with " +
                        (scope_.mesh.empty() ? "W ≤ 64" : "each dimension's size ≤ 8") +
                        ", G ≤ 16, up to 1000 tokens per microbatch" +
                        (scope_.sequences ? " in up to 64 sequences" : "") +
                        (scope_.weighted ? " and per-group token weights p/q with p ≤ 16, q ≤ 8" : "") +
                        (scope_.constant ? " and C = p/q with p ≤ 64, q ≤ 8" : "");
  }

  // A divisor may vanish only beyond the scopes (C − 65, N − 777): each is shown nonzero on every configuration
  // of the objective's domain, or its zeros are sought (solved for one name at a time, the others those of
  // configurations drawn as in the random scope), and one that is found is a division by zero there. A divisor
  // neither shown nonzero nor found zero keeps the recipe from being proved.
  void divisors_beyond_the_scopes() {
    const count_domain domain{scope_.weighted,
                              scope_.sequences,
                              scope_.required,
                              scope_.constant,
                              scope_.mesh.empty() || scope_.has(mesh_role::data),
                              scope_.mesh.empty() || scope_.has(mesh_role::sequence)};
    std::vector<std::string> seen;
    for (const recipe_divisor& divisor : divisors_of(recipe_.scale)) {
      if (std::find(seen.begin(), seen.end(), divisor.text) != seen.end()) continue;
      seen.push_back(divisor.text);
      if (divisor.numerator && nonzero_on_every_configuration(*divisor.numerator, domain)) continue;
      if (divisor.numerator)
        if (const std::optional<count_configuration> zero = zero_of(*divisor.numerator)) {
          note(*zero, judge(scope_, recipe_, *zero));
          const std::string everywhere = single_variable_zeros(*divisor.numerator);
          result_.coverage += "; the divisor " + divisor.text + " is 0 at " + describe(*zero) +
                              (everywhere.empty() ? "" : " (" + everywhere + ")") + ", beyond the scopes";
          continue;
        }
      undecided_divisors_.push_back(divisor.text);
    }
  }

  // A configuration a partition can show at which `numerator` is 0 and the recipe divides by zero: solved for
  // each name it uses, the others those of the smallest configurations (one or two ranks and microbatches),
  // then of configurations drawn as in the random scope, then of one whose rank 0 holds no token (a mass
  // below every rank's).
  std::optional<count_configuration> zero_of(const polynomial& numerator) const {
    std::vector<count_configuration> bases;
    for (std::uint64_t w = 1; w <= 2; ++w)
      for (std::uint64_t g = 1; g <= 2; ++g) {
        count_configuration c{w, 1 + (g - 1) + (w - 1), 1 + (g - 1), 1, g, std::nullopt};
        if (scope_.sequences) c.sequences = sequence_counts{true, 1, c.valid_tokens, c.rank_tokens, 1};
        if (scope_.weighted) {
          c.masses = std::array<rational, 3>{rational(c.valid_tokens), rational(c.rank_tokens), rational(1)};
          c.group_mass = rational(1);
        }
        if (scope_.constant) c.normalizer = rational(1);
        bases.push_back(c);
      }
    deterministic_random random(0x9E3779B97F4A7C15ull);
    for (int i = 0; i < 256; ++i) bases.push_back(random_configuration(random));
    count_configuration empty_rank{2, 1, 0, 0, 1, std::nullopt};
    if (scope_.sequences) empty_rank.sequences = sequence_counts{false, 0, 1, 0, 0};
    if (scope_.weighted) {
      empty_rank.masses = std::array<rational, 3>{rational(1), rational(0), rational(0)};
      empty_rank.group_mass = rational(0);
    }
    if (scope_.constant) empty_rank.normalizer = rational(1);
    bases.push_back(empty_rank);
    for (const count_configuration& base : bases)
      for (count_variable v : all_count_variables) {
        if (!numerator.uses(v)) continue;
        for (const rational& root : roots_in_domain(numerator.in_one_variable(v, values_of(base)), v)) {
          const std::optional<count_configuration> at = with_value(base, v, root, numerator);
          if (at && judge(scope_, recipe_, *at).result == outcome::divides_by_zero) return at;
        }
      }
    return std::nullopt;
  }

  // `base` with `v` = `value` (the counts holding it, where `numerator` does not read them, grown with it),
  // when that is a configuration of the scope a partition of at most a million tokens shows; else nothing.
  std::optional<count_configuration> with_value(count_configuration c, count_variable v, const rational& value,
                                                const polynomial& numerator) const {
    constexpr std::uint64_t most_tokens = 1'000'000;
    constexpr std::uint64_t most_ranks_or_microbatches = 10'000;
    // On a mesh or beside a term the other counts would have to grow with the value: not solved for (a divisor
    // neither shown nonzero nor found 0 leaves the recipe checked, not proved).
    if (!scope_.mesh.empty() || !scope_.term.empty()) return std::nullopt;
    using cv = count_variable;
    if (v == cv::C) {
      if (!scope_.constant) return std::nullopt;
      c.normalizer = value;
    } else if (v == cv::M || v == cv::m_r || v == cv::m_m) {
      if (!c.masses) return std::nullopt;
      (*c.masses)[v == cv::M ? 0 : v == cv::m_r ? 1 : 2] = value;
    } else {
      if (denominator(value) != 1 || value < 0 || value > rational(static_cast<long long>(most_tokens)))
        return std::nullopt;
      const std::uint64_t n = value.convert_to<std::uint64_t>();
      sequence_counts q = sequences_of(c);
      const bool sequence_name = v == cv::B || v == cv::b_r || v == cv::b_m || v == cv::n_s;
      if (sequence_name && !c.sequences) return std::nullopt;
      if (variable_index(v) >= update_variables) return std::nullopt;  // a mesh's or the main loss's: not solved for
      std::uint64_t* slot[] = {
          &c.world_size, &c.valid_tokens, &c.rank_tokens,    &c.microbatch_tokens,    &c.microbatches, nullptr, nullptr,
          nullptr,       &q.sequences,    &q.rank_sequences, &q.microbatch_sequences, &q.group_tokens};
      static_assert(std::size(slot) + 1 == update_variables);
      std::uint64_t* at = slot[variable_index(v)];
      if (at == nullptr) return std::nullopt;
      // What holds the value grows with it: n_s, nₘ, nᵣ and N nest, and so do bₘ, bᵣ and B.
      const std::vector<cv> holders = v == cv::n_s ? std::vector<cv>{cv::n_m, cv::n_r, cv::N}
                                      : v == cv::n_m ? std::vector<cv>{cv::n_r, cv::N}
                                      : v == cv::n_r ? std::vector<cv>{cv::N}
                                      : v == cv::b_m ? std::vector<cv>{cv::b_r, cv::B}
                                      : v == cv::b_r ? std::vector<cv>{cv::B}
                                                     : std::vector<cv>{};
      if (n > *at)
        for (cv holder : holders)
          if (!numerator.uses(holder)) *slot[variable_index(holder)] += n - *at;
      *at = n;
      if (c.sequences) c.sequences = q;
      const bool masses_read = numerator.uses(cv::M) || numerator.uses(cv::m_r) || numerator.uses(cv::m_m);
      if (c.masses && !masses_read) {  // every token of weight 1
        c.masses = std::array<rational, 3>{rational(c.valid_tokens), rational(c.rank_tokens),
                                           rational(c.microbatch_tokens)};
        if (c.group_mass) c.group_mass = rational(sequences_of(c).group_tokens);
      }
    }
    const std::uint64_t w = c.world_size, g = c.microbatches, n = c.valid_tokens, n_r = c.rank_tokens,
                        n_m = c.microbatch_tokens;
    if (w < 1 || g < 1 || w > most_ranks_or_microbatches || g > most_ranks_or_microbatches) return std::nullopt;
    if (n < 1 || n > most_tokens || n_m > n_r || n_r > n || (n_r > n_m && g < 2) || (n > n_r && w < 2))
      return std::nullopt;
    if (c.sequences) {
      const sequence_counts q = *c.sequences;
      // Sequences hold their microbatch's tokens: each with a token holds at least one, and where every
      // microbatch with a token must declare sequences, tokens outside the group's are in some sequence.
      auto holds = [&](std::uint64_t tokens, std::uint64_t sequences) {
        return sequences <= tokens && (!scope_.required || tokens == 0 || sequences >= 1);
      };
      const std::uint64_t own = q.group_tokens > 0 ? 1 : 0;
      if (q.group_tokens > n_m || q.microbatch_sequences > q.rank_sequences || q.rank_sequences > q.sequences)
        return std::nullopt;
      if (q.declared) {
        if (q.microbatch_sequences < own || !holds(n_m - q.group_tokens, q.microbatch_sequences - own) ||
            (n_m > q.group_tokens && q.microbatch_sequences == own))
          return std::nullopt;
      } else if (q.group_tokens != n_m || q.microbatch_sequences != 0) {
        return std::nullopt;
      }
      if (!holds(n_r - n_m, q.rank_sequences - q.microbatch_sequences) ||
          !holds(n - n_r, q.sequences - q.rank_sequences))
        return std::nullopt;
    }
    if (c.masses) {
      const auto [mass, rank_mass, microbatch_mass] = *c.masses;
      const rational group = c.group_mass.value_or(microbatch_mass);
      const sequence_counts q = sequences_of(c);
      auto part = [](const rational& m, std::uint64_t count) { return m >= 0 && (count > 0 || m == 0); };
      if (!(mass > 0) || !part(group, q.group_tokens) || !part(microbatch_mass - group, n_m - q.group_tokens) ||
          !part(rank_mass - microbatch_mass, n_r - n_m) || !part(mass - rank_mass, n - n_r))
        return std::nullopt;
    }
    return c;
  }

  // F = c·T − d (T the objective's units at the group: N, M, B·n_s, B or C) is a rational function of the
  // variables; its numerator has total degree at most D, so if F vanishes on a product grid of D + 1 values of
  // each variable it depends on, inside the domain, the numerator is the zero polynomial and the identity holds
  // for all counts. The grid stands in the generic part of the domain (every group, microbatch, rank and
  // sequence holding tokens), which determines the polynomial.
  void decide_for_all_counts() {
    const auto [numerator_degree, denominator_degree] = recipe_.scale.degree_bound();
    const unsigned units_degree = scope_.objective == objective_kind::sequence_mean ? 2 : 1;
    // On a mesh of data and sequence dimensions W is DP·CP: written in the sizes, every degree at most doubles.
    const bool world_size_a_product = scope_.has(mesh_role::data) && scope_.has(mesh_role::sequence);
    const unsigned degree =
        (std::max(numerator_degree, denominator_degree) + units_degree) * (world_size_a_product ? 2 : 1);
    const std::string where_defined = first_zero_ ? " where it is defined" : "";
    if (degree > largest_decided_degree) {
      result_.coverage += "; the expression's degree bound " + std::to_string(degree) +
                          " is too large to decide for all counts, so this is checked, not proved" + where_defined;
      return;
    }
    const std::uint64_t d = degree;
    std::vector<count_axis> axes;
    auto add = [&](count_variable v, std::uint64_t low) {
      axes.push_back({v, low, relevant(v) ? low + d : low});
    };
    // Each range starts above the ranges of what it must hold: n_m holds the group's n_s tokens and b_m − 1 more
    // sequences of at least one token, n_r holds n_m and b_r − b_m sequences more, and so on.
    // On a mesh W is the product of the data and sequence sizes, which are the axes (TP beside them).
    if (scope_.mesh.empty()) add(count_variable::W, 2);
    if (scope_.has(mesh_role::data)) add(count_variable::data_size, 2);
    if (scope_.has(mesh_role::sequence)) add(count_variable::sequence_size, 2);
    if (scope_.has(mesh_role::replica)) add(count_variable::replica_size, 2);
    add(count_variable::G, 2);
    if (scope_.sequences) {
      add(count_variable::n_s, 1);
      add(count_variable::b_m, 2);
      add(count_variable::n_m, 2 * d + 2);
      add(count_variable::b_r, d + 3);
      add(count_variable::n_r, 5 * d + 3);
      add(count_variable::B, 2 * d + 4);
      add(count_variable::N, 8 * d + 4);
    } else if (world_size_a_product) {
      // N_dp and N_cp each hold n_r and more; N holds both: N ≥ N_dp + N_cp − n_r.
      add(count_variable::n_m, 1);
      add(count_variable::n_r, d + 2);
      add(count_variable::over_data, 2 * d + 3);
      add(count_variable::over_sequence, 3 * d + 4);
      add(count_variable::N, 6 * d + 6);
    } else {
      add(count_variable::n_m, 1);
      add(count_variable::n_r, d + 2);
      add(count_variable::N, 2 * d + 3);
    }
    if (!scope_.term.empty()) {
      add(count_variable::main_n_m, 1);
      add(count_variable::main_n_r, d + 2);
      add(count_variable::main_N, 2 * d + 3);
    }
    if (scope_.weighted) {
      add(count_variable::m_m, 1);
      add(count_variable::m_r, d + 2);
      add(count_variable::M, 2 * d + 3);
    }
    if (scope_.constant) add(count_variable::C, 1);
    std::uint64_t size = 1;
    for (const count_axis& a : axes) {
      size *= a.high - a.low + 1;
      if (size > largest_grid) {
        result_.coverage += "; the grid for the expression's degree bound " + std::to_string(degree) + " over its " +
                            "variables passes " + grouped(largest_grid) +
                            " configurations, so this is checked, not proved" + where_defined;
        return;
      }
    }
    std::vector<std::uint64_t> at;
    for (const count_axis& a : axes) at.push_back(a.low);
    auto value = [&](count_variable v) { return value_at(axes, at, v); };
    std::uint64_t points = 0;
    bool undefined_somewhere = false;
    for (;;) {
      count_configuration c{value(count_variable::W), value(count_variable::N), value(count_variable::n_r),
                            value(count_variable::n_m), value(count_variable::G), std::nullopt};
      if (scope_.sequences)
        c.sequences = sequence_counts{true, value(count_variable::n_s), value(count_variable::B),
                                      value(count_variable::b_r), value(count_variable::b_m)};
      if (scope_.weighted) {
        c.masses = std::array<rational, 3>{rational(value(count_variable::M)), rational(value(count_variable::m_r)),
                                           rational(value(count_variable::m_m))};
        if (scope_.sequences) c.group_mass = fraction(value(count_variable::m_m), 2);
      }
      if (scope_.constant) c.normalizer = rational(value(count_variable::C));
      if (!scope_.mesh.empty()) {
        // A size without an axis is 1; without a sequence dimension the count over the data one is N (and the
        // count over the sequence dimension nᵣ), and the reverse.
        auto extent = [&](mesh_role role, count_variable v) { return scope_.has(role) ? value(v) : std::uint64_t{1}; };
        mesh_counts m{extent(mesh_role::data, count_variable::data_size),
                      extent(mesh_role::sequence, count_variable::sequence_size),
                      extent(mesh_role::replica, count_variable::replica_size), c.rank_tokens, c.rank_tokens};
        if (world_size_a_product) {
          m.over_data = value(count_variable::over_data);
          m.over_sequence = value(count_variable::over_sequence);
        } else if (scope_.has(mesh_role::data)) {
          m.over_data = c.valid_tokens;
        } else {
          m.over_sequence = c.valid_tokens;
        }
        c.world_size = m.data * m.sequence;
        c.mesh = m;
      }
      if (!scope_.term.empty())
        c.main_loss = main_loss_counts{value(count_variable::main_N), value(count_variable::main_n_r),
                                       value(count_variable::main_n_m)};
      const judged j = judge(scope_, recipe_, c);
      if (j.result == outcome::divides_by_zero) undefined_somewhere = true;
      if (!settled(j.result)) note(c, j);
      if (first_wrong_) return;
      ++points;
      if (!next_point(axes, at)) break;
    }
    std::vector<std::string> read;
    for (count_variable v : objective_variables(scope_.objective)) read.emplace_back(names().spelling(v));
    const std::string units = read.size() == 1 ? read.front() : "(" + read[0] + "·" + read[1] + ")";
    if (undefined_somewhere) {
      result_.coverage += "; no grid point where it is defined refutes it, but some grid point divides by zero, so "
                          "this is checked, not proved, where it is defined";
      return;
    }
    if (!undecided_divisors_.empty()) {
      std::string divisors;
      for (const std::string& text : undecided_divisors_) divisors += (divisors.empty() ? "" : ", ") + text;
      result_.coverage += "; c·" + units + " − d vanishes on a grid large enough for its degree, but the divisor" +
                          (undecided_divisors_.size() > 1 ? "s " : " ") + divisors +
                          " could not be shown nonzero for every count, nor found 0, so where " +
                          (undecided_divisors_.size() > 1 ? "one of them is" : "it is") +
                          " 0 the scale may be undefined: this is checked, not proved";
      return;
    }
    result_.verdict = proof_verdict::proved;
    result_.coverage += std::string(first_zero_ ? "; wherever it is defined it gives the objective's gradient" : "") +
                        "; proved for all " + (scope_.weighted ? "counts and masses" : "counts") + ": c·" + units +
                        " − d has a numerator of degree at most " + std::to_string(degree) +
                        (world_size_a_product ? " once W is written as " + names().spelling(count_variable::data_size) +
                                                    "·" + names().spelling(count_variable::sequence_size)
                                              : std::string()) +
                        " and vanishes on a grid of " + grouped(points) + " configurations (" +
                        std::to_string(degree + 1) + " values of each variable it depends on)";
  }

  const recipe& recipe_;
  group_scope scope_;
  std::array<bool, all_count_variables.size()> relevant_;
  view_options view_options_;
  proof_result result_;
  std::optional<std::pair<count_configuration, judged>> first_wrong_;
  std::optional<std::pair<count_configuration, judged>> first_zero_;
  std::vector<std::string> undecided_divisors_;  // neither shown nonzero everywhere nor found 0
  std::uint64_t judged_configurations_ = 0;
  int replays_ = 0;
};

}  // namespace

proof_result prove_by_groups(const recipe& r, objective_kind objective) { return group_prover(r, objective).run(); }

}  // namespace normcheck::detail
