#pragma once
// Generators of partitioned token sets for property-based tests, and the transformations the laws
// of normalization talk about. Every generator produces valid data by construction (nothing is
// filtered), and shrinks toward small, readable updates: few ranks, few tokens, values near zero.

#include "normcheck/core/partition.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace normcheck {

/// Shows a token partition in counterexamples: "mean θ=0 [[0] | [2, 2, null]]", microbatches split by ";".
inline void showValue(const token_partition& tokens, std::ostream& os) {
  os << reducer_name(tokens.reducer) << " θ=" << to_string(tokens.theta) << " [";
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r) {
    os << (r ? " | " : "");
    for (std::size_t m = 0; m < tokens.ranks[r].size(); ++m) {
      os << (m ? "; " : "") << "[";
      const std::vector<token>& microbatch = tokens.ranks[r][m];
      for (std::size_t i = 0; i < microbatch.size(); ++i)
        os << (i ? ", " : "") << (microbatch[i] ? to_string(*microbatch[i]) : std::string("null"));
      os << "]";
    }
  }
  os << "]";
}

}  // namespace normcheck

namespace normcheck::properties {

/// One rank's tokens: microbatches of token values (nullopt = padding).
using rank_tokens = std::vector<std::vector<token>>;

/// RapidCheck's nominal largest size: a generator resized to it ignores the run's size.
inline constexpr int full_size = 100;

/// A uniform index in [0, n) whatever the size, shrinking toward 0. `n` must be positive.
inline rc::Gen<std::size_t> uniform_index(std::size_t n) {
  return rc::gen::resize(full_size, rc::gen::inRange<std::size_t>(0, n));
}

/// One of several generators, picked by weight; shrinks toward the first, so list the simplest first.
template <typename T>
rc::Gen<T> weighted(std::vector<std::pair<std::size_t, rc::Gen<T>>> choices) {
  std::size_t total = 0;
  for (const auto& choice : choices) total += choice.first;
  return rc::gen::mapcat(uniform_index(total), [choices](std::size_t ticket) {
    for (const auto& choice : choices) {
      if (ticket < choice.first) return choice.second;
      ticket -= choice.first;
    }
    return choices.back().second;
  });
}

/// A natural number below `bound`, growing with the size, shrinking toward 0.
inline rc::Gen<std::uint64_t> natural_below(std::uint64_t bound) {
  return rc::gen::inRange<std::uint64_t>(0, bound);
}

/// A natural number of 1 to `max_words` 64-bit words (up to 64·max_words bits), shrinking toward 0.
inline rc::Gen<integer> big_natural(std::size_t max_words) {
  return rc::gen::mapcat(rc::gen::inRange<std::size_t>(1, max_words + 1), [](std::size_t words) {
    return rc::gen::map(
        rc::gen::container<std::vector<std::uint64_t>>(words, rc::gen::arbitrary<std::uint64_t>()),
        [](const std::vector<std::uint64_t>& limbs) {
          integer value = 0;
          for (std::uint64_t limb : limbs) value = (value << 64) + integer(limb);
          return value;
        });
  });
}

/// A literal's parts as a canonical rational, through the library's one constructor from parts.
inline rational from_parts(bool negative, const integer& significand, const integer& denominator = 1,
                           std::int64_t exp2 = 0, std::int64_t exp5 = 0) {
  literal_parts parts;
  parts.negative = negative;
  parts.significand = significand;
  parts.denominator = denominator;
  parts.exp2 = exp2;
  parts.exp5 = exp5;
  return to_rational(parts);
}

/// An exponent in [-bound, bound], shrinking toward 0.
inline rc::Gen<std::int64_t> signed_exponent(std::uint64_t bound) {
  return rc::gen::apply(
      [](bool negative, std::uint64_t magnitude) {
        const std::int64_t e = static_cast<std::int64_t>(magnitude);
        return negative ? -e : e;
      },
      rc::gen::arbitrary<bool>(), natural_below(bound + 1));
}

/// Exact rationals biased to the corners: zero, small integers and fractions of both signs, decimals
/// such as 0.1, binary fractions as a float holds them, long numerators and denominators, and powers
/// of ten far from 1 (10^±400). Shrinks toward small non-negative integers.
inline rc::Gen<rational> gen_rational() {
  using rc::gen::apply;
  using rc::gen::arbitrary;
  const rc::Gen<bool> sign = arbitrary<bool>();
  return weighted<rational>({
      {30, apply([](bool n, std::uint64_t m) { return from_parts(n, m); }, sign, natural_below(9))},
      {20, apply([](bool n, std::uint64_t p, std::uint64_t q) { return from_parts(n, p, q + 1); }, sign,
                 natural_below(31), natural_below(16))},
      {12, apply([](bool n, std::uint64_t m, std::uint64_t k) {
                   const std::int64_t e = -static_cast<std::int64_t>(k + 1);
                   return from_parts(n, m, 1, e, e);
                 },
                 sign, natural_below(1000000), natural_below(8))},
      {12, apply([](bool n, std::uint64_t m, std::int64_t e) { return from_parts(n, m, 1, e); }, sign,
                 natural_below(std::uint64_t{1} << 53), signed_exponent(70))},
      {4, apply([](bool n, const integer& p, const integer& q) { return from_parts(n, p, q + 1); }, sign,
                big_natural(4), big_natural(3))},
      {2, apply([](bool n, std::uint64_t m, std::int64_t e) { return from_parts(n, m + 1, 1, e, e); }, sign,
                natural_below(9), signed_exponent(400))},
  });
}

/// A token position: a valid value (9 in 10) or padding.
inline rc::Gen<token> gen_token() {
  return weighted<token>({
      {9, rc::gen::map(gen_rational(), [](const rational& value) { return token(value); })},
      {1, rc::gen::just(token())},
  });
}

/// One microbatch: 0 to about 12 positions (more with the size), padding included.
inline rc::Gen<std::vector<token>> gen_microbatch() {
  return rc::gen::withSize([](int size) {
    return rc::gen::resize(size / 8, rc::gen::container<std::vector<token>>(rc::gen::resize(size, gen_token())));
  });
}

/// A number of microbatches: mostly 1, sometimes 2 or 3, rarely up to 6.
inline rc::Gen<std::size_t> gen_microbatch_count() {
  return weighted<std::size_t>({
      {6, rc::gen::just(std::size_t{1})},
      {3, rc::gen::inRange<std::size_t>(2, 4)},
      {1, rc::gen::inRange<std::size_t>(4, 7)},
  });
}

/// One rank: its microbatches, each possibly empty (so the rank may hold no valid token).
inline rc::Gen<rank_tokens> gen_rank() {
  return rc::gen::mapcat(gen_microbatch_count(), [](std::size_t count) {
    return rc::gen::container<rank_tokens>(count, gen_microbatch());
  });
}

/// 1 to 64 ranks, mostly few: a first rank and up to 3, 15 or 63 more (more with the size).
inline rc::Gen<std::vector<rank_tokens>> gen_ranks(rc::Gen<rank_tokens> rank = gen_rank()) {
  const rc::Gen<std::size_t> more = weighted<std::size_t>({
      {5, rc::gen::just(std::size_t{3})},
      {3, rc::gen::just(std::size_t{15})},
      {2, rc::gen::just(std::size_t{63})},
  });
  return rc::gen::mapcat(more, [rank](std::size_t most) {
    return rc::gen::withSize([rank, most](int size) {
      const int longest = static_cast<int>(most) * size / full_size;
      return rc::gen::apply(
          [](rank_tokens first, std::vector<rank_tokens> rest) {
            rest.insert(rest.begin(), std::move(first));
            return rest;
          },
          rank, rc::gen::resize(longest, rc::gen::container<std::vector<rank_tokens>>(rc::gen::resize(size, rank))));
    });
  });
}

/// A number of ranks from `least` (1 or 2) to 64, mostly few (a quarter 1, 40% at most 4), more with the size.
/// One monotone draw, so shrinking walks it down toward `least` through every smaller count.
inline rc::Gen<std::size_t> gen_world_size(std::size_t least = 1) {
  constexpr std::uint64_t steps = 1000;
  return rc::gen::map(rc::gen::inRange<std::uint64_t>(0, steps), [least](std::uint64_t u) {
    const std::uint64_t skewed = u * u / steps * u / steps;  // (u/steps)^3, in units of 1/steps
    return least + static_cast<std::size_t>(skewed * (65 - least) / steps);
  });
}

/// θ: any exact rational.
inline rc::Gen<rational> gen_theta() { return gen_rational(); }

/// The reducer: mean (DDP's) or sum.
inline rc::Gen<reducer_kind> gen_reducer() { return rc::gen::element(reducer_kind::mean, reducer_kind::sum); }

/// An update from ranks, θ and reducer generators.
inline rc::Gen<token_partition> gen_update_of(rc::Gen<std::vector<rank_tokens>> ranks, rc::Gen<reducer_kind> reducer) {
  return rc::gen::apply(
      [](std::vector<rank_tokens> r, rational theta, reducer_kind kind) {
        token_partition tokens;
        tokens.ranks = std::move(r);
        tokens.theta = std::move(theta);
        tokens.reducer = kind;
        return tokens;
      },
      ranks, gen_theta(), reducer);
}

/// Any update: 1 to 64 ranks, any θ and reducer; it may hold no valid token at all.
inline rc::Gen<token_partition> gen_update(rc::Gen<reducer_kind> reducer = gen_reducer()) {
  return gen_update_of(gen_ranks(), reducer);
}

/// Inserts `value` at a generated position: rank, microbatch, place in it.
inline rc::Gen<token_partition> insert_somewhere(const token_partition& tokens, rc::Gen<token> value) {
  return rc::gen::exec([tokens, value] {
    token_partition out = tokens;
    rank_tokens& rank = out.ranks[*uniform_index(out.ranks.size())];
    std::vector<token>& microbatch = rank[*uniform_index(rank.size())];
    const std::size_t at = *uniform_index(microbatch.size() + 1);
    microbatch.insert(microbatch.begin() + static_cast<std::ptrdiff_t>(at), *value);
    return out;
  });
}

/// An update with at least one valid token (N > 0): any update with one more valid token inserted.
inline rc::Gen<token_partition> gen_update_with_tokens(rc::Gen<reducer_kind> reducer = gen_reducer()) {
  return rc::gen::mapcat(gen_update(reducer), [](const token_partition& tokens) {
    return insert_somewhere(tokens, rc::gen::map(gen_rational(), [](const rational& v) { return token(v); }));
  });
}

/// A rank that holds no valid token: 1 to 3 microbatches of padding only (possibly none).
inline rc::Gen<rank_tokens> gen_empty_rank() {
  return rc::gen::mapcat(rc::gen::inRange<std::size_t>(1, 4), [](std::size_t count) {
    return rc::gen::container<rank_tokens>(
        count, rc::gen::map(natural_below(6), [](std::uint64_t padding) { return std::vector<token>(padding); }));
  });
}

/// An update without any valid token (N = 0): 1 to 64 ranks with any amount of padding.
inline rc::Gen<token_partition> gen_all_empty() { return gen_update_of(gen_ranks(gen_empty_rank()), gen_reducer()); }

/// `count` valid values followed by up to 3 paddings, shuffled in by position.
inline rc::Gen<std::vector<token>> gen_tokens_with_count(std::size_t count) {
  return rc::gen::exec([count] {
    std::vector<token> tokens;
    for (std::size_t i = 0; i < count; ++i) tokens.emplace_back(*gen_rational());
    const std::size_t padding = *rc::gen::inRange<std::size_t>(0, 4);
    for (std::size_t i = 0; i < padding; ++i)
      tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(*uniform_index(tokens.size() + 1)), token());
    return tokens;
  });
}

/// A permutation of 0..n-1, shrinking toward the identity.
inline rc::Gen<std::vector<std::size_t>> gen_permutation(std::size_t n) {
  return rc::gen::map(rc::gen::container<std::vector<std::uint64_t>>(
                          n, rc::gen::resize(full_size, rc::gen::arbitrary<std::uint64_t>())),
                      [](const std::vector<std::uint64_t>& keys) {
                        std::vector<std::size_t> order(keys.size());
                        std::iota(order.begin(), order.end(), std::size_t{0});
                        std::stable_sort(order.begin(), order.end(),
                                         [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
                        return order;
                      });
}

/// Every valid value of the update, rank by rank, microbatch by microbatch.
inline std::vector<rational> valid_values(const token_partition& tokens) {
  std::vector<rational> values;
  for (const rank_tokens& rank : tokens.ranks)
    for (const std::vector<token>& microbatch : rank)
      for (const token& t : microbatch)
        if (t) values.push_back(*t);
  return values;
}

/// Every position of one rank, microbatches concatenated.
inline std::vector<token> flatten(const rank_tokens& rank) {
  std::vector<token> all;
  for (const std::vector<token>& microbatch : rank) all.insert(all.end(), microbatch.begin(), microbatch.end());
  return all;
}

/// Repartition: the same multiset of valid tokens dealt afresh to the same number of ranks (one
/// microbatch each, padding dropped), in a shuffled order.
inline rc::Gen<token_partition> repartition(const token_partition& tokens) {
  return rc::gen::exec([tokens] {
    const std::vector<rational> values = valid_values(tokens);
    const std::vector<std::size_t> order = *gen_permutation(values.size());
    token_partition out = tokens;
    out.ranks.assign(tokens.ranks.size(), rank_tokens(1));
    for (std::size_t i : order) out.ranks[*uniform_index(out.ranks.size())].front().emplace_back(values[i]);
    return out;
  });
}

/// Permutation of ranks: the same ranks in another order.
inline rc::Gen<token_partition> permute_ranks(const token_partition& tokens) {
  return rc::gen::map(gen_permutation(tokens.ranks.size()), [tokens](const std::vector<std::size_t>& order) {
    token_partition out = tokens;
    for (std::size_t r = 0; r < order.size(); ++r) out.ranks[r] = tokens.ranks[order[r]];
    return out;
  });
}

/// Microbatch split: each rank's positions, in order, cut afresh into 1 to 4 microbatches (some may be empty).
inline rc::Gen<token_partition> split_microbatches(const token_partition& tokens) {
  return rc::gen::exec([tokens] {
    token_partition out = tokens;
    for (rank_tokens& rank : out.ranks) {
      const std::vector<token> all = flatten(rank);
      const std::size_t count = 1 + *uniform_index(4);
      std::vector<std::size_t> owner(all.size());
      for (std::size_t& m : owner) m = *uniform_index(count);
      std::sort(owner.begin(), owner.end());
      rank.assign(count, {});
      for (std::size_t i = 0; i < all.size(); ++i) rank[owner[i]].push_back(all[i]);
    }
    return out;
  });
}

/// Each rank's microbatches merged into one.
inline token_partition merge_microbatches(const token_partition& tokens) {
  token_partition out = tokens;
  for (rank_tokens& rank : out.ranks) rank = rank_tokens{flatten(rank)};
  return out;
}

/// Added padding: 1 to 8 padded positions inserted anywhere.
inline rc::Gen<token_partition> add_padding(const token_partition& tokens) {
  return rc::gen::exec([tokens] {
    token_partition out = tokens;
    const std::size_t count = 1 + *uniform_index(8);
    for (std::size_t i = 0; i < count; ++i) out = *insert_somewhere(out, rc::gen::just(token()));
    return out;
  });
}

/// An update with one more rank that holds no valid token, and where it was inserted.
struct with_empty_rank {
  token_partition tokens;
  std::size_t position = 0;
};

/// Added empty rank: a rank of padding only (or nothing), inserted at any position.
inline rc::Gen<with_empty_rank> add_empty_rank(const token_partition& tokens) {
  return rc::gen::exec([tokens] {
    with_empty_rank out{tokens, *uniform_index(tokens.ranks.size() + 1)};
    out.tokens.ranks.insert(out.tokens.ranks.begin() + static_cast<std::ptrdiff_t>(out.position), *gen_empty_rank());
    return out;
  });
}

/// Shows the grown update in counterexamples, with where the empty rank went.
inline void showValue(const with_empty_rank& grown, std::ostream& os) {
  os << "empty rank at " << grown.position << ": ";
  showValue(grown.tokens, os);
}

/// An update after transformations that keep its objective, and their names in order.
struct transformed {
  token_partition tokens;
  std::vector<std::string> steps;
};

/// Shows a transformed update in counterexamples, with the transformations applied.
inline void showValue(const transformed& changed, std::ostream& os) {
  for (const std::string& step : changed.steps) os << step << ", ";
  os << "giving ";
  showValue(changed.tokens, os);
}

/// 1 to 3 of: repartition, rank permutation, microbatch split, added padding.
inline rc::Gen<transformed> transform(const token_partition& tokens) {
  return rc::gen::exec([tokens] {
    transformed out{tokens, {}};
    const std::size_t count = 1 + *uniform_index(3);
    for (std::size_t i = 0; i < count; ++i) {
      switch (*uniform_index(4)) {
        case 0: out.tokens = *repartition(out.tokens); out.steps.emplace_back("repartition"); break;
        case 1: out.tokens = *permute_ranks(out.tokens); out.steps.emplace_back("rank permutation"); break;
        case 2: out.tokens = *split_microbatches(out.tokens); out.steps.emplace_back("microbatch split"); break;
        default: out.tokens = *add_padding(out.tokens); out.steps.emplace_back("added padding"); break;
      }
    }
    return out;
  });
}

/// A token weight: an exact non-negative rational, 0 one time in five.
inline rc::Gen<rational> gen_weight() {
  return weighted<rational>({
      {4, rc::gen::map(gen_rational(), [](const rational& value) { return rational(abs(value)); })},
      {1, rc::gen::just(rational(0))},
  });
}

/// `tokens` with a weight beside every valid token (nullopt beside padding), all from `weight`.
inline rc::Gen<token_partition> with_weights(const token_partition& tokens, rc::Gen<rational> weight = gen_weight()) {
  return rc::gen::exec([tokens, weight] {
    token_partition out = tokens;
    out.weights.clear();
    for (const rank_tokens& rank : tokens.ranks) {
      rank_tokens rank_weights;
      for (const std::vector<token>& microbatch : rank) {
        std::vector<token> w;
        for (const token& t : microbatch) w.push_back(t ? token(*weight) : token());
        rank_weights.push_back(std::move(w));
      }
      out.weights.push_back(std::move(rank_weights));
    }
    return out;
  });
}

/// A weighted update whose weights sum to more than 0 (M > 0): an update with tokens, weighted, and when
/// every weight came out 0 the first valid token's weight set to 1.
inline rc::Gen<token_partition> gen_weighted_update(rc::Gen<reducer_kind> reducer = gen_reducer()) {
  return rc::gen::mapcat(gen_update_with_tokens(reducer), [](const token_partition& tokens) {
    return rc::gen::map(with_weights(tokens), [](token_partition weighted_tokens) {
      rational mass;
      token* first = nullptr;
      for (rank_tokens& rank : weighted_tokens.weights)
        for (std::vector<token>& microbatch : rank)
          for (token& w : microbatch)
            if (w) {
              mass += *w;
              if (!first) first = &w;
            }
      if (mass == 0) *first = rational(1);
      return weighted_tokens;
    });
  });
}

}  // namespace normcheck::properties
