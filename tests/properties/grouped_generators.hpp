#pragma once
// Generators of grouped updates under a declared objective, and the transformations their laws talk about.
// Everything is valid by construction: sequences wherever a sequence objective has tokens, a positive
// normalizer under constant, weights beside every valid token under the weighted objective, and at least
// one unit of the objective where a law needs the objective to exist. Shrinks toward one rank, one
// microbatch, few tokens.

#include "generators.hpp"
#include "grouped.hpp"
#include "grouped_oracle.hpp"

#include <rapidcheck.h>

#include <string>
#include <vector>

namespace normcheck::properties {

/// The five objectives, in the order the laws run them.
inline const std::vector<objective_kind>& every_objective() {
  static const std::vector<objective_kind> all{objective_kind::token_mean, objective_kind::weighted_token_mean,
                                               objective_kind::sequence_mean, objective_kind::sequence_sum_mean,
                                               objective_kind::constant};
  return all;
}

/// Whether the objective is defined over sequences.
inline bool sequence_objective(objective_kind objective) {
  return objective == objective_kind::sequence_mean || objective == objective_kind::sequence_sum_mean;
}

/// A normalizer C: a positive integer (mostly) or a positive fraction.
inline rc::Gen<rational> gen_normalizer() {
  return weighted<rational>({
      {3, rc::gen::map(natural_below(64), [](std::uint64_t c) { return from_parts(false, c + 1); })},
      {1, rc::gen::apply([](std::uint64_t p, std::uint64_t q) { return from_parts(false, p + 1, q + 1); },
                         natural_below(100), natural_below(16))},
  });
}

/// The weights of a group's positions: one beside each valid token, nullopt beside padding.
inline std::vector<token> weights_for(const std::vector<token>& positions) {
  std::vector<token> weights;
  for (const token& t : positions) weights.push_back(t ? token(*gen_weight()) : token());
  return weights;
}

/// One group: a token array of 0 to 6 positions (padding one in ten) or, where `compact` is allowed, a
/// compact group of 0 to 6 tokens and 0 to 3 padded positions. Weighted groups are arrays with weights.
inline rc::Gen<group_tokens> gen_group(bool compact, bool weighted_tokens) {
  return rc::gen::exec([compact, weighted_tokens] {
    group_tokens g;
    if (compact && *uniform_index(3) == 0) {
      const std::uint64_t count = *rc::gen::inRange<std::uint64_t>(0, 7);
      g = compact_group(count, *gen_rational(), *rc::gen::inRange<std::uint64_t>(0, 4));
    } else {
      const std::size_t length = *rc::gen::inRange<std::size_t>(0, 7);
      for (std::size_t i = 0; i < length; ++i) g.positions.push_back(*gen_token());
    }
    if (weighted_tokens) g.weights = weights_for(g.positions);
    return g;
  });
}

/// A group without a valid token: [], padding only, or a compact group of count 0.
inline rc::Gen<group_tokens> gen_empty_group(bool compact, bool weighted_tokens) {
  return rc::gen::exec([compact, weighted_tokens] {
    const std::uint64_t padding = *rc::gen::inRange<std::uint64_t>(0, 4);
    group_tokens g;
    if (compact && *rc::gen::arbitrary<bool>()) g = compact_group(0, rational(0), padding);
    else g.positions.assign(padding, token());
    if (weighted_tokens) g.weights = weights_for(g.positions);
    return g;
  });
}

/// One microbatch under `objective`: under the sequence objectives mostly 1 to 4 sequences, otherwise a
/// group without tokens; under the others a group or sequences, half and half.
inline rc::Gen<microbatch_tokens> gen_grouped_microbatch(objective_kind objective) {
  return rc::gen::exec([objective] {
    const bool weighted_tokens = objective == objective_kind::weighted_token_mean;
    const bool compact = !weighted_tokens;
    microbatch_tokens m;
    const bool with_sequences = sequence_objective(objective) ? *uniform_index(5) != 0 : *rc::gen::arbitrary<bool>();
    if (!with_sequences) {
      m.groups.push_back(sequence_objective(objective) ? *gen_empty_group(compact, weighted_tokens)
                                                       : *gen_group(compact, weighted_tokens));
      return m;
    }
    m.sequences = true;
    const std::size_t count = 1 + *weighted<std::size_t>({{3, rc::gen::just(std::size_t{0})},
                                                           {2, rc::gen::inRange<std::size_t>(1, 4)}});
    for (std::size_t i = 0; i < count; ++i) m.groups.push_back(*gen_group(compact, weighted_tokens));
    return m;
  });
}

/// 1 to 4 microbatches, mostly 1.
inline rc::Gen<std::size_t> gen_grouped_microbatch_count() {
  return weighted<std::size_t>({{5, rc::gen::just(std::size_t{1})}, {4, rc::gen::inRange<std::size_t>(2, 5)}});
}

/// 1 to 8 ranks, mostly at most 3.
inline rc::Gen<std::size_t> gen_grouped_world_size() {
  return weighted<std::size_t>({{4, rc::gen::just(std::size_t{1})},
                                {8, rc::gen::inRange<std::size_t>(2, 4)},
                                {2, rc::gen::inRange<std::size_t>(4, 9)}});
}

/// The first valid token of the update, made to count: under the weighted objective its weight set to 1
/// when every weight is 0.
inline void give_mass(grouped_update& update) {
  if (update.objective != objective_kind::weighted_token_mean || oracle::mass(update) > 0) return;
  for (grouped_rank& rank : update.ranks)
    for (microbatch_tokens& m : rank)
      for (group_tokens& g : m.groups)
        for (std::size_t i = 0; i < g.positions.size(); ++i)
          if (g.positions[i]) {
            g.weights[i] = rational(1);
            return;
          }
}

/// Adds one valid token of value `value` at a generated place: under a sequence objective as a new
/// sequence of a generated microbatch (which then declares sequences), otherwise into a generated group.
inline rc::Gen<grouped_update> add_token(const grouped_update& update, rational value) {
  return rc::gen::exec([update, value] {
    grouped_update out = update;
    grouped_rank& rank = out.ranks[*uniform_index(out.ranks.size())];
    microbatch_tokens& m = rank[*uniform_index(rank.size())];
    const bool weighted_tokens = out.objective == objective_kind::weighted_token_mean;
    if (sequence_objective(out.objective)) {
      if (!m.sequences) m.sequences = true;  // its one group holds no token, so it may be a sequence
      group_tokens g{{token(value)}, false, {}};
      m.groups.insert(m.groups.begin() + static_cast<std::ptrdiff_t>(*uniform_index(m.groups.size() + 1)),
                      std::move(g));
      return out;
    }
    group_tokens& g = m.groups[*uniform_index(m.groups.size())];
    if (g.compact) {
      // A compact group keeps one value: the token takes it (or gives it, to a group of none).
      const std::uint64_t count = g.valid_tokens();
      const rational shared = count > 0 ? *g.positions.front() : value;
      g = compact_group(count + 1, shared, g.padding());
      return out;
    }
    const std::size_t at = *uniform_index(g.positions.size() + 1);
    g.positions.insert(g.positions.begin() + static_cast<std::ptrdiff_t>(at), token(value));
    if (weighted_tokens) g.weights.insert(g.weights.begin() + static_cast<std::ptrdiff_t>(at), token(rational(1)));
    return out;
  });
}

/// Any update under `objective` (ranks may be empty, so may the whole update), any θ and reducer.
inline rc::Gen<grouped_update> gen_any_grouped_update(objective_kind objective) {
  return rc::gen::exec([objective] {
    grouped_update update;
    update.objective = objective;
    const std::size_t world = *gen_grouped_world_size();
    for (std::size_t r = 0; r < world; ++r) {
      grouped_rank rank;
      const std::size_t count = *gen_grouped_microbatch_count();
      for (std::size_t m = 0; m < count; ++m) rank.push_back(*gen_grouped_microbatch(objective));
      update.ranks.push_back(std::move(rank));
    }
    update.theta = *gen_theta();
    update.reducer = *gen_reducer();
    if (objective == objective_kind::constant) update.normalizer = *gen_normalizer();
    return update;
  });
}

/// An update under `objective` on which the objective exists: any update with one more valid token (and,
/// under the weighted objective, a weight above 0).
inline rc::Gen<grouped_update> gen_grouped_update(objective_kind objective) {
  return rc::gen::exec([objective] {
    grouped_update out = *add_token(*gen_any_grouped_update(objective), *gen_rational());
    give_mass(out);
    return out;
  });
}

/// A rank without a valid token: 1 to 3 microbatches of empty groups, possibly as empty sequences.
inline rc::Gen<grouped_rank> gen_empty_grouped_rank(objective_kind objective) {
  return rc::gen::exec([objective] {
    const bool weighted_tokens = objective == objective_kind::weighted_token_mean;
    grouped_rank rank;
    const std::size_t count = 1 + *uniform_index(3);
    for (std::size_t i = 0; i < count; ++i) {
      microbatch_tokens m;
      m.sequences = *rc::gen::arbitrary<bool>();
      const std::size_t groups = m.sequences ? 1 + *uniform_index(2) : 1;
      for (std::size_t g = 0; g < groups; ++g) m.groups.push_back(*gen_empty_group(!weighted_tokens, weighted_tokens));
      rank.push_back(std::move(m));
    }
    return rank;
  });
}

/// An update under `objective` without any valid token: 1 to 8 ranks of empty groups.
inline rc::Gen<grouped_update> gen_all_empty_grouped(objective_kind objective) {
  return rc::gen::exec([objective] {
    grouped_update update;
    update.objective = objective;
    const std::size_t world = *gen_grouped_world_size();
    for (std::size_t r = 0; r < world; ++r) update.ranks.push_back(*gen_empty_grouped_rank(objective));
    update.theta = *gen_theta();
    update.reducer = *gen_reducer();
    if (objective == objective_kind::constant) update.normalizer = *gen_normalizer();
    return update;
  });
}

/// What the objective counts as one indivisible piece: a valid token (with its weight) under the token
/// objectives, a whole sequence under the sequence objectives.
struct atom {
  group_tokens tokens;  ///< one valid token, or a sequence
};

/// The atoms of an update, in order (padding and groups without a unit of the objective dropped).
inline std::vector<atom> atoms_of(const grouped_update& update) {
  std::vector<atom> atoms;
  const bool weighted_tokens = update.objective == objective_kind::weighted_token_mean;
  for (const grouped_rank& rank : update.ranks)
    for (const microbatch_tokens& m : rank)
      for (const group_tokens& g : m.groups) {
        if (sequence_objective(update.objective)) {
          if (m.sequences && g.valid_tokens() > 0) atoms.push_back({g});
          continue;
        }
        for (std::size_t i = 0; i < g.positions.size(); ++i)
          if (g.positions[i]) {
            group_tokens one{{g.positions[i]}, false, {}};
            if (weighted_tokens) one.weights = {g.weights[i]};
            atoms.push_back({std::move(one)});
          }
      }
  return atoms;
}

/// The objective's atoms dealt afresh, in a shuffled order, to 1 to 5 ranks (W itself may change) of 1 to
/// 3 microbatches each. Under the token objectives each microbatch is then a token array or cut into
/// sequences; under the sequence objectives a microbatch holds its sequences (a microbatch dealt none is
/// []), each sequence shuffled inside and written compactly when its tokens share one value.
inline rc::Gen<grouped_update> redeal(const grouped_update& update) {
  return rc::gen::exec([update] {
    const std::vector<atom> atoms = atoms_of(update);
    const std::vector<std::size_t> order = *gen_permutation(atoms.size());
    const std::size_t world = 1 + *uniform_index(5);
    std::vector<std::vector<std::vector<atom>>> dealt(world);
    for (auto& rank : dealt) rank.resize(1 + *uniform_index(3));
    for (std::size_t i : order) {
      auto& rank = dealt[*uniform_index(world)];
      rank[*uniform_index(rank.size())].push_back(atoms[i]);
    }
    grouped_update out = update;
    out.ranks.clear();
    const bool weighted_tokens = update.objective == objective_kind::weighted_token_mean;
    for (const auto& rank : dealt) {
      grouped_rank built;
      for (const std::vector<atom>& pieces : rank) {
        microbatch_tokens m;
        if (sequence_objective(update.objective)) {
          if (pieces.empty()) {
            built.push_back(plain_microbatch({}));
            continue;
          }
          m.sequences = true;
          for (const atom& a : pieces) {
            group_tokens g = a.tokens;
            std::vector<token> values;
            for (const token& t : g.positions)
              if (t) values.push_back(t);
            const std::vector<std::size_t> inside = *gen_permutation(values.size());
            g.positions.clear();
            for (std::size_t k : inside) g.positions.push_back(values[k]);
            if (weighted_tokens) g.weights = std::vector<token>(g.positions.size(), token(rational(1)));
            const bool shared = std::all_of(g.positions.begin(), g.positions.end(),
                                            [&](const token& t) { return *t == *g.positions.front(); });
            g.compact = !weighted_tokens && shared && *rc::gen::arbitrary<bool>();
            m.groups.push_back(std::move(g));
          }
          built.push_back(std::move(m));
          continue;
        }
        // Token objectives: one array, or the tokens cut in order into 1 to 3 sequences.
        const std::size_t cuts = *rc::gen::arbitrary<bool>() ? 1 : 1 + *uniform_index(3);
        m.sequences = cuts > 1 || *rc::gen::arbitrary<bool>();
        m.groups.resize(cuts);
        std::vector<std::size_t> owner(pieces.size());
        for (std::size_t& o : owner) o = *uniform_index(cuts);
        std::sort(owner.begin(), owner.end());
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          group_tokens& g = m.groups[owner[i]];
          g.positions.push_back(pieces[i].tokens.positions.front());
          if (weighted_tokens) g.weights.push_back(pieces[i].tokens.weights.front());
        }
        built.push_back(std::move(m));
      }
      out.ranks.push_back(std::move(built));
    }
    return out;
  });
}

/// The ranks in another order.
inline rc::Gen<grouped_update> permute_grouped_ranks(const grouped_update& update) {
  return rc::gen::map(gen_permutation(update.ranks.size()), [update](const std::vector<std::size_t>& order) {
    grouped_update out = update;
    for (std::size_t r = 0; r < order.size(); ++r) out.ranks[r] = update.ranks[order[r]];
    return out;
  });
}

/// 1 to 6 pieces without a valid token added anywhere: a padded position in a group, an empty sequence in a
/// microbatch that declares sequences, or an empty microbatch ([], a compact group of count 0, or one empty
/// sequence) in a rank.
inline rc::Gen<grouped_update> add_emptiness(const grouped_update& update) {
  return rc::gen::exec([update] {
    grouped_update out = update;
    const bool weighted_tokens = out.objective == objective_kind::weighted_token_mean;
    const std::size_t count = 1 + *uniform_index(6);
    for (std::size_t i = 0; i < count; ++i) {
      grouped_rank& rank = out.ranks[*uniform_index(out.ranks.size())];
      const std::size_t kind = *uniform_index(3);
      if (kind == 2) {
        microbatch_tokens m;
        m.sequences = *rc::gen::arbitrary<bool>();
        m.groups.push_back(*gen_empty_group(!weighted_tokens, weighted_tokens));
        rank.insert(rank.begin() + static_cast<std::ptrdiff_t>(*uniform_index(rank.size() + 1)), std::move(m));
        continue;
      }
      microbatch_tokens& m = rank[*uniform_index(rank.size())];
      if (kind == 1 && m.sequences) {
        m.groups.insert(m.groups.begin() + static_cast<std::ptrdiff_t>(*uniform_index(m.groups.size() + 1)),
                        *gen_empty_group(!weighted_tokens, weighted_tokens));
        continue;
      }
      group_tokens& g = m.groups[*uniform_index(m.groups.size())];
      if (g.compact) {
        g.positions.emplace_back();
        continue;
      }
      const std::size_t at = *uniform_index(g.positions.size() + 1);
      g.positions.insert(g.positions.begin() + static_cast<std::ptrdiff_t>(at), token());
      if (weighted_tokens) g.weights.insert(g.weights.begin() + static_cast<std::ptrdiff_t>(at), token());
    }
    return out;
  });
}

/// A grouped update after transformations that keep its objective, and their names in order.
struct regrouped {
  grouped_update update;
  std::vector<std::string> steps;
};

/// Shows a transformed update in counterexamples, with the transformations applied.
inline void showValue(const regrouped& changed, std::ostream& os) {
  for (const std::string& step : changed.steps) os << step << ", ";
  os << "giving ";
  showValue(changed.update, os);
}

/// 1 to 3 of: a fresh deal of the objective's atoms (W may change), a rank permutation, added pieces
/// without valid tokens.
inline rc::Gen<regrouped> regroup(const grouped_update& update) {
  return rc::gen::exec([update] {
    regrouped out{update, {}};
    const std::size_t count = 1 + *uniform_index(3);
    for (std::size_t i = 0; i < count; ++i) {
      switch (*uniform_index(3)) {
        case 0:
          out.update = *redeal(out.update);
          out.steps.emplace_back("a fresh deal to " + std::to_string(out.update.world_size()) + " ranks");
          break;
        case 1: out.update = *permute_grouped_ranks(out.update); out.steps.emplace_back("rank permutation"); break;
        default:
          out.update = *add_emptiness(out.update);
          out.steps.emplace_back("added padding and empty groups");
          break;
      }
    }
    return out;
  });
}

/// An update with one more rank that holds no valid token, and where it was inserted.
struct with_empty_grouped_rank {
  grouped_update update;
  std::size_t position = 0;
};

/// Shows the grown update in counterexamples, with where the empty rank went.
inline void showValue(const with_empty_grouped_rank& grown, std::ostream& os) {
  os << "empty rank at " << grown.position << ": ";
  showValue(grown.update, os);
}

/// Added empty rank, at any position.
inline rc::Gen<with_empty_grouped_rank> add_empty_grouped_rank(const grouped_update& update) {
  return rc::gen::exec([update] {
    with_empty_grouped_rank out{update, *uniform_index(update.ranks.size() + 1)};
    out.update.ranks.insert(out.update.ranks.begin() + static_cast<std::ptrdiff_t>(out.position),
                            *gen_empty_grouped_rank(update.objective));
    return out;
  });
}

}  // namespace normcheck::properties
