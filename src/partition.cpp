#include "normcheck/partition.hpp"

namespace normcheck {

std::string_view reducer_name(reducer_kind reducer) noexcept {
  return reducer == reducer_kind::mean ? "mean" : "sum";
}

std::uint64_t rank_stats::valid_tokens() const {
  std::uint64_t total = 0;
  for (const microbatch_stats& m : microbatches) total += m.valid_tokens;
  return total;
}

std::uint64_t rank_stats::padding() const {
  std::uint64_t total = 0;
  for (const microbatch_stats& m : microbatches) total += m.padding;
  return total;
}

rational rank_stats::target_sum() const {
  rational total;
  for (const microbatch_stats& m : microbatches) total += m.target_sum;
  return total;
}

std::uint64_t partition::valid_tokens() const {
  std::uint64_t total = 0;
  for (const rank_stats& r : ranks) total += r.valid_tokens();
  return total;
}

rational loss_gradient_sum(const microbatch_stats& microbatch, const rational& theta) {
  rational sum = theta * microbatch.valid_tokens;
  sum -= microbatch.target_sum;
  return sum;
}

rational loss_gradient_sum(const rank_stats& rank, const rational& theta) {
  rational sum;
  for (const microbatch_stats& m : rank.microbatches) sum += loss_gradient_sum(m, theta);
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

microbatch_stats microbatch_builder::finish() const {
  microbatch_stats stats;
  stats.valid_tokens = valid_tokens_;
  stats.padding = padding_;
  rational positive = positive_.value();
  rational negative = negative_.value();
  stats.target_sum = positive - negative;
  stats.target_abs_sum = positive + negative;
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

}  // namespace normcheck
