#include "normcheck/core/partition.hpp"

#include "normcheck/core/counts.hpp"
#include "normcheck/core/errors.hpp"
#include "normcheck/core/names.hpp"
#include "normcheck/core/sequence_join.hpp"

#include <algorithm>

namespace normcheck {

namespace {

// The exact product of two literals, still in parts: significands and denominators multiply, exponents add.
literal_parts product(const literal_parts& a, const literal_parts& b) {
  literal_parts p;
  p.negative = a.negative != b.negative;
  p.significand = a.significand * b.significand;
  p.denominator = a.denominator * b.denominator;
  p.exp2 = a.exp2 + b.exp2;
  p.exp5 = a.exp5 + b.exp5;
  return p;
}

}  // namespace

constexpr name_table reducer_names{std::array<std::pair<reducer_kind, std::string_view>, 2>{{
    {reducer_kind::mean, "mean"},
    {reducer_kind::sum, "sum"},
}}};

constexpr name_table objective_names{std::array<std::pair<objective_kind, std::string_view>, 5>{{
    {objective_kind::token_mean, "token_mean"},
    {objective_kind::weighted_token_mean, "weighted_token_mean"},
    {objective_kind::sequence_mean, "sequence_mean"},
    {objective_kind::sequence_sum_mean, "sequence_sum_mean"},
    {objective_kind::constant, "constant"},
}}};

std::string_view reducer_name(reducer_kind reducer) noexcept { return reducer_names.name(reducer); }

std::optional<reducer_kind> reducer_from_name(std::string_view name) noexcept { return reducer_names.find(name); }

std::string reducer_alternatives() { return reducer_names.alternatives(); }

std::vector<std::string_view> reducer_spellings() { return reducer_names.spellings(); }

std::string_view objective_name(objective_kind objective) noexcept { return objective_names.name(objective); }

std::optional<objective_kind> objective_from_name(std::string_view name) noexcept { return objective_names.find(name); }

std::string objective_alternatives() { return objective_names.alternatives(); }

std::vector<std::string_view> objective_spellings() { return objective_names.spellings(); }

rational group_stats::mass() const {
  // A group without weights is unweighted or holds no valid token: its mass is its count either way.
  return weighted() ? weighted_->mass.value() : rational(valid_tokens);
}

bool group_stats::same_tokens(const group_stats& other) const {
  if (valid_tokens != other.valid_tokens || !(sum_ == other.sum_) || !(abs_sum_ == other.abs_sum_) ||
      weighted_.has_value() != other.weighted_.has_value())
    return false;
  return !weighted_ ||
         (weighted_->mass == other.weighted_->mass && weighted_->target_sum == other.weighted_->target_sum &&
          weighted_->target_abs_sum == other.weighted_->target_abs_sum);
}

void group_stats::set_sums(const target_sums& values) {
  sum_ = compact_rational(values.sum);
  abs_sum_ = compact_rational(values.abs_sum);
  if (values.weighted)
    weighted_ = compact_weighted{compact_rational(values.weighted->mass), compact_rational(values.weighted->target_sum),
                                 compact_rational(values.weighted->target_abs_sum)};
  else weighted_ = boxed<compact_weighted>();
}

std::uint64_t microbatch_stats::sequence_count() const {
  if (!sequences) return 0;
  return static_cast<std::uint64_t>(
      std::count_if(sequences->begin(), sequences->end(), [](const group_stats& s) { return s.valid_tokens > 0; }));
}

microbatch_stats make_sequenced_microbatch(std::vector<group_stats> sequences) {
  microbatch_stats microbatch;
  tree_sum sum;
  tree_sum abs_sum;
  tree_sum mass;
  tree_sum weighted_sum;
  tree_sum weighted_abs_sum;
  bool weighted = false;
  for (const group_stats& s : sequences) {
    microbatch.valid_tokens = add_counts(microbatch.valid_tokens, s.valid_tokens);
    microbatch.padding = add_counts(microbatch.padding, s.padding);
    if (!s.has_sums()) continue;
    sum.add(s.target_sum());
    abs_sum.add(s.target_abs_sum());
    if (s.weighted()) {
      weighted = true;
      mass.add(s.mass());
      weighted_sum.add(s.weighted_target_sum());
      weighted_abs_sum.add(s.weighted_target_abs_sum());
    }
  }
  target_sums values{sum.value(), abs_sum.value(), {}};
  if (weighted) values.weighted = weighted_sums{mass.value(), weighted_sum.value(), weighted_abs_sum.value()};
  microbatch.set_sums(std::move(values));
  microbatch.sequences = std::move(sequences);
  return microbatch;
}

std::uint64_t rank_stats::sequence_count() const {
  std::uint64_t total = 0;
  for (const microbatch_stats& m : microbatches) total = add_counts(total, m.sequence_count());
  return total;
}

rational rank_stats::mass() const {
  if (std::none_of(microbatches.begin(), microbatches.end(), [](const microbatch_stats& m) { return m.weighted(); }))
    return rational(valid_tokens());
  tree_sum masses;
  for (const microbatch_stats& m : microbatches)
    if (m.weighted()) masses.add(m.mass());
  return masses.value();
}

rational partition::mass() const {
  if (objective != objective_kind::weighted_token_mean) return rational(valid_tokens());
  tree_sum masses;
  for (const rank_stats& r : ranks) masses.add(r.mass());
  return masses.value();
}

std::uint64_t rank_stats::valid_tokens() const {
  std::uint64_t total = 0;
  for (const microbatch_stats& m : microbatches) total = add_counts(total, m.valid_tokens);
  return total;
}

std::uint64_t rank_stats::padding() const {
  std::uint64_t total = 0;
  for (const microbatch_stats& m : microbatches) total = add_counts(total, m.padding);
  return total;
}

rational rank_stats::target_sum() const {
  tree_sum sums;
  for (const microbatch_stats& m : microbatches)
    if (m.has_sums()) sums.add(m.target_sum());
  return sums.value();
}

rational rank_stats::weighted_target_sum() const {
  tree_sum sums;
  for (const microbatch_stats& m : microbatches)
    if (m.has_sums()) sums.add(m.weighted_target_sum());
  return sums.value();
}

rational rank_stats::weighted_target_abs_sum() const {
  tree_sum sums;
  for (const microbatch_stats& m : microbatches)
    if (m.has_sums()) sums.add(m.weighted_target_abs_sum());
  return sums.value();
}

std::uint64_t partition::sequence_count() const {
  if (has_slices()) return sequence_join(*this).sequences();
  std::uint64_t total = 0;
  for (const rank_stats& r : ranks) total = add_counts(total, r.sequence_count());
  return total;
}

std::uint64_t partition::group_count() const {
  std::uint64_t total = 0;
  for (const rank_stats& r : ranks)
    for (const microbatch_stats& m : r.microbatches) total = add_counts(total, m.group_count());
  return total;
}

bool partition::has_slices() const {
  return !sequence_ids.empty();
}

bool partition::has_sequences() const {
  for (const rank_stats& r : ranks)
    for (const microbatch_stats& m : r.microbatches)
      if (m.sequences) return true;
  return false;
}

std::uint64_t partition::valid_tokens() const {
  std::uint64_t total = 0;
  for (const rank_stats& r : ranks) total = add_counts(total, r.valid_tokens());
  return total;
}

std::uint64_t partition::padding() const {
  std::uint64_t total = 0;
  for (const rank_stats& r : ranks) total = add_counts(total, r.padding());
  return total;
}

std::uint64_t partition::common_accumulation() const {
  if (ranks.empty()) return 0;
  const std::size_t g = ranks.front().microbatches.size();
  for (const rank_stats& rank : ranks)
    if (rank.microbatches.size() != g) return 0;
  return g;
}

std::uint64_t partition::mesh_extent(mesh_role role) const {
  if (mesh.empty()) return role == mesh_role::data ? world_size() : 1;
  std::uint64_t extent = 1;
  for (const mesh_dim& dim : mesh)
    if (dim.role == role) extent *= dim.size;  // a factor of W: it cannot wrap
  return extent;
}

std::uint64_t partition::mesh_index(std::size_t rank, mesh_role role) const {
  if (mesh.empty()) return role == mesh_role::data ? rank : 0;
  // Row-major: the last dimension varies fastest. The index keeps the dimensions' order.
  // `ranks` holds the first of each set of replicas: they are numbered row-major over the other dimensions.
  std::uint64_t index = 0;
  std::uint64_t scale = 1;
  std::uint64_t rest = rank;
  for (std::size_t d = mesh.size(); d-- > 0;) {
    if (mesh[d].role == mesh_role::replica) continue;
    const std::uint64_t coordinate = rest % mesh[d].size;
    rest /= mesh[d].size;
    if (mesh[d].role != role) continue;
    index += coordinate * scale;
    scale *= mesh[d].size;
  }
  return index;
}

std::uint64_t partition::listed_rank(std::size_t rank) const {
  // Rank `rank`'s coordinates over the dimensions that are not replicas, written row-major over all of
  // them with every replica coordinate 0.
  std::uint64_t listed = 0;
  std::uint64_t scale = 1;
  std::uint64_t rest = rank;
  for (std::size_t d = mesh.size(); d-- > 0;) {
    if (mesh[d].role != mesh_role::replica) {
      listed += (rest % mesh[d].size) * scale;
      rest /= mesh[d].size;
    }
    scale *= mesh[d].size;
  }
  return mesh.empty() ? rank : listed;
}

namespace {

constexpr name_table mesh_role_names{std::array<std::pair<mesh_role, std::string_view>, 3>{
    {{mesh_role::data, "data"}, {mesh_role::sequence, "sequence"}, {mesh_role::replica, "replica"}}}};

}  // namespace

std::string_view mesh_role_name(mesh_role role) noexcept { return mesh_role_names.name(role); }

std::optional<mesh_role> mesh_role_from_name(std::string_view name) noexcept { return mesh_role_names.find(name); }

std::string mesh_role_alternatives() { return mesh_role_names.alternatives(); }

bool is_identifier(std::string_view name) noexcept {
  if (name.empty() || name.front() < 'a' || name.front() > 'z') return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
}

std::uint64_t partition::first_replica(std::uint64_t listed) const {
  std::uint64_t first = 0;
  std::uint64_t scale = 1;
  for (std::size_t d = mesh.size(); d-- > 0;) {
    if (mesh[d].role != mesh_role::replica) first += (listed % mesh[d].size) * scale;
    listed /= mesh[d].size;
    scale *= mesh[d].size;
  }
  return mesh.empty() ? listed : first;
}

std::string partition::mesh_names(mesh_role role) const {
  std::string names;
  for (const mesh_dim& dim : mesh)
    if (dim.role == role && dim.size > 1) names += (names.empty() ? "" : " × ") + dim.name;
  return names;
}

std::uint64_t partition::positions() const { return add_counts(valid_tokens(), padding()); }

std::string loss_spelled(const partition& update) {
  return update.loss_name.empty() ? "the main loss" : "term " + update.loss_name;
}

rational loss_gradient_sum(const group_stats& group, const rational& theta) {
  rational sum = theta * group.mass();
  sum -= group.weighted_target_sum();
  return sum;
}

rational loss_gradient_sum(const rank_stats& rank, const rational& theta) {
  // θ once, not once per microbatch: a θ of many digits would otherwise cost that much per microbatch.
  rational sum = theta * rank.mass();
  sum -= rank.weighted_target_sum();
  return sum;
}

void microbatch_builder::add_token(const literal_parts& target) {
  ++valid_tokens_;
  if (target.negative) {
    literal_parts magnitude = target;
    magnitude.negative = false;
    negative_.add(magnitude);
  } else {
    positive_.add(target);
  }
}

void microbatch_builder::add_token(const rational& target) {
  ++valid_tokens_;
  if (target < 0) {
    rational magnitude = -target;
    negative_.add(magnitude);
  } else {
    positive_.add(target);
  }
}

void microbatch_builder::add_tokens(const rational& target, std::uint64_t count) {
  if (count == 0) return;
  valid_tokens_ = add_counts(valid_tokens_, count);
  rational total = target * count;
  if (total < 0) {
    rational magnitude = -total;
    negative_.add(magnitude);
  } else {
    positive_.add(total);
  }
}

void microbatch_builder::add_weighted_token(const literal_parts& target, const literal_parts& weight) {
  add_token(target);
  add_weight(weight);
  literal_parts term = product(target, weight);
  term.negative = false;
  (target.negative ? weighted_negative_ : weighted_positive_).add(term);
}

void microbatch_builder::add_weighted_token(const machine_literal& target, const machine_literal& weight) {
  add_token(target);
  add_weight(weight);
  __extension__ typedef unsigned __int128 wide;
  const wide significand = static_cast<wide>(target.significand) * weight.significand;
  exact_sum& sum = target.negative ? weighted_negative_ : weighted_positive_;
  // Exponents are bounded by the literal limits (far inside 32 bits), so their sums cannot overflow.
  const std::int64_t exp2 = std::int64_t{target.exp2} + weight.exp2;
  const std::int64_t exp5 = std::int64_t{target.exp5} + weight.exp5;
  if ((significand >> 64) == 0 && exp2 == static_cast<std::int32_t>(exp2) && exp5 == static_cast<std::int32_t>(exp5)) {
    machine_literal term;
    term.significand = static_cast<std::uint64_t>(significand);
    term.exp2 = static_cast<std::int32_t>(exp2);
    term.exp5 = static_cast<std::int32_t>(exp5);
    sum.add(term);
    return;
  }
  literal_parts term = product(to_parts(target), to_parts(weight));
  term.negative = false;
  sum.add(term);
}

void microbatch_builder::add_weighted_token(const rational& target, const rational& weight) {
  add_token(target);
  add_weight(weight);
  rational term = target * weight;
  if (term < 0) {
    rational magnitude = -term;
    weighted_negative_.add(magnitude);
  } else {
    weighted_positive_.add(term);
  }
}

microbatch_stats microbatch_builder::finish() const {
  microbatch_stats stats;
  stats.valid_tokens = valid_tokens_;
  stats.padding = padding_;
  if (weighted_tokens_ != (weighted_ ? valid_tokens_ : 0))
    throw error(error_code::schema_error,
                "a microbatch mixes weighted and unweighted tokens: give every valid token a weight");
  if (valid_tokens_ == 0) return stats;  // every sum is 0
  target_sums values;
  const rational positive = positive_.value();
  const rational negative = negative_.value();
  values.sum = positive - negative;
  values.abs_sum = positive + negative;
  if (weighted_) {
    weighted_sums weighted;
    weighted.mass = mass_.value();
    const rational weighted_positive = weighted_positive_.value();
    const rational weighted_negative = weighted_negative_.value();
    weighted.target_sum = weighted_positive - weighted_negative;
    weighted.target_abs_sum = weighted_positive + weighted_negative;
    values.weighted = std::move(weighted);
  }
  stats.set_sums(std::move(values));
  return stats;
}

microbatch_stats summarize(const std::vector<token>& tokens) {
  microbatch_builder builder;
  for (const token& t : tokens) {
    if (t) builder.add_token(*t);
    else builder.add_padding();
  }
  return builder.finish();
}

partition make_partition(const std::vector<std::vector<token>>& ranks, const rational& theta,
                         reducer_kind reducer) {
  partition p;
  p.theta = theta;
  p.reducer = reducer;
  for (const auto& tokens : ranks) p.ranks.push_back(rank_stats{{summarize(tokens)}});
  return p;
}

partition make_accumulated_partition(const std::vector<std::vector<std::vector<token>>>& ranks,
                                     const rational& theta, reducer_kind reducer) {
  partition p;
  p.theta = theta;
  p.reducer = reducer;
  for (const auto& microbatches : ranks) {
    rank_stats rank;
    for (const auto& tokens : microbatches) rank.microbatches.push_back(summarize(tokens));
    p.ranks.push_back(std::move(rank));
  }
  return p;
}

partition make_weighted_partition(const std::vector<std::vector<std::vector<token>>>& ranks,
                                  const std::vector<std::vector<std::vector<token>>>& weights, const rational& theta,
                                  reducer_kind reducer) {
  auto mismatch = [](const std::string& where) {
    throw error(error_code::schema_error, "weights must have the shape of the targets: " + where);
  };
  if (weights.size() != ranks.size()) mismatch("one list per rank");
  partition p;
  p.theta = theta;
  p.reducer = reducer;
  p.objective = objective_kind::weighted_token_mean;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (weights[r].size() != ranks[r].size())
      mismatch("rank " + std::to_string(r) + " has another number of microbatches");
    rank_stats rank;
    for (std::size_t m = 0; m < ranks[r].size(); ++m) {
      const std::vector<token>& tokens = ranks[r][m];
      const std::vector<token>& w = weights[r][m];
      if (w.size() != tokens.size())
        mismatch("rank " + std::to_string(r) + ", microbatch " + std::to_string(m) + " has another length");
      microbatch_builder builder(true);
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i].has_value() != w[i].has_value())
          mismatch("a weight stands beside each valid token and null beside each padded position");
        if (!tokens[i]) {
          builder.add_padding();
          continue;
        }
        if (*w[i] < 0)
          throw error(error_code::bad_number, "a token weight must not be negative, found " + to_string(*w[i]));
        builder.add_weighted_token(*tokens[i], *w[i]);
      }
      rank.microbatches.push_back(builder.finish());
    }
    p.ranks.push_back(std::move(rank));
  }
  return p;
}

}  // namespace normcheck
