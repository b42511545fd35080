#include "normcheck/gate/consistency.hpp"

#include "normcheck/core/counts.hpp"
#include "normcheck/io/text.hpp"

#include <algorithm>

namespace normcheck {

namespace {

std::string positions(std::uint64_t count) {
  return count == 1 ? "the 1 position" : "the " + std::to_string(count) + " positions";
}

std::string count_difference(std::int64_t difference) {
  const std::uint64_t magnitude = static_cast<std::uint64_t>(difference < 0 ? -difference : difference);
  return std::to_string(magnitude) + (difference > 0 ? " more" : " fewer") +
         (magnitude == 1 ? " position than" : " positions than");
}

// What a rank's reported divisor is instead of the update's N (or M), when it is a count the code could
// have taken by mistake.
std::string divisor_mistake(const partition& update, std::size_t r, std::size_t m, const rational& divisor) {
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  const rank_stats& rank = update.ranks[r];
  const microbatch_stats& microbatch = rank.microbatches[m];
  const std::uint64_t padding = update.padding();
  const std::string n = weighted ? "mᵣ" : "nᵣ";
  if (divisor == rank.mass() && update.world_size() > 1)
    return "it is the rank's own " + std::string(weighted ? "weight mass" : "count") + " " + n + " = " +
           on_screen(rank.mass()) + ": counted right, but divided by its own " +
           (weighted ? "mass" : "count") + ", so every rank weighs the same whatever its " +
           (weighted ? "mass (local_mean)" : "count (local_mean)");
  if (divisor == microbatch.mass() && rank.microbatches.size() > 1)
    return "it is the microbatch's own " + std::string(weighted ? "mass" : "count") + " " +
           on_screen(microbatch.mass()) +
           ": every microbatch then weighs the same whatever its count (microbatch_mean)";
  if (!weighted && padding > 0 && divisor == rational(update.positions()))
    return "it counts the " + std::to_string(padding) + " padding positions of the update (count_padding)";
  if (!weighted && rank.padding() > 0 && divisor == rational(add_counts(rank.valid_tokens(), rank.padding())))
    return "it is the rank's own positions, padding included";
  if (weighted && divisor == rational(update.valid_tokens()))
    return "it is the valid-token count N, not the weight mass (count_denominator)";
  return "";
}

// `tokens.divided_by`: each rank's divisor must be the update's N (M under the weighted objective).
void check_divisors(const partition& update, const observed_result& observed, std::vector<std::string>& problems) {
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  const rational expected = update.mass();
  for (std::size_t r = 0; r < observed.divided_by.size(); ++r) {
    const std::vector<rational>& divisors = observed.divided_by[r];
    for (std::size_t m = 0; m < update.ranks[r].microbatches.size(); ++m) {
      const rational& divisor = divisors.size() == 1 ? divisors.front() : divisors[m];
      if (divisor == expected) continue;
      std::string problem = "rank " + std::to_string(update.listed_rank(r)) +
                            (divisors.size() == 1 ? "" : ", microbatch " + std::to_string(m)) + " divided by " +
                            on_screen(divisor) + ", not by the update's " + (weighted ? "M = " : "N = ") +
                            on_screen(expected);
      const std::string mistake = divisor_mistake(update, r, m, divisor);
      problems.push_back(mistake.empty() ? problem : problem + ": " + mistake);
      if (divisors.size() == 1) break;
    }
  }
}

}  // namespace

gate_check check_replicas(const observed_result& observed, std::uint64_t world_size) {
  gate_check check{"replica_agreement", true, ""};
  if (!observed.from_per_rank) {
    check.detail = "one synchronized value given (gradient): agreement between replicas not checked; dump "
                   "per_rank to check it";
    return check;
  }
  for (std::size_t r = 1; r < observed.per_rank.size(); ++r) {
    if (observed.per_rank[r] != observed.per_rank[0]) {
      check.passed = false;
      check.detail = "rank " + std::to_string(r) + " holds " + to_string(observed.per_rank[r]) + " but rank 0 holds " +
                     to_string(observed.per_rank[0]) +
                     ": after an all-reduce every replica holds the same value, so the replicas diverged";
      return check;
    }
  }
  check.detail = "all " + std::to_string(world_size) + " ranks hold the same value";
  return check;
}

gate_check check_denominators(const partition& update, const observed_result& observed) {
  gate_check check{"denominator", true, ""};
  const bool masses = observed.global_mass || !observed.rank_masses.empty();
  if (!observed.global_tokens && observed.rank_tokens.empty() && !masses && observed.divided_by.empty()) {
    check.detail = "no token counts, weight masses or divisors reported: denominators not checked";
    return check;
  }
  std::vector<std::string> problems;
  check_divisors(update, observed, problems);
  if (observed.global_mass && *observed.global_mass != update.mass()) {
    std::string problem = "the global mass is " + on_screen(*observed.global_mass) +
                          " but the update's weights sum to M = " + on_screen(update.mass());
    if (*observed.global_mass == rational(update.valid_tokens()))
      problem += ": it is the valid-token count N, not the sum of the weights";
    else
      for (std::size_t r = 0; r < update.ranks.size(); ++r)
        if (update.world_size() > 1 && update.ranks[r].mass() == *observed.global_mass) {
          problem += ": it is rank " + std::to_string(r) +
                     "'s local mass, not the mass of all ranks (all-reduce it before dividing)";
          break;
        }
    problems.push_back(problem);
  }
  for (std::size_t r = 0; r < observed.rank_masses.size(); ++r) {
    const rational mass = update.ranks[r].mass();
    if (observed.rank_masses[r] == mass) continue;
    problems.push_back("rank " + std::to_string(update.listed_rank(r)) + " summed its weights to " +
                       on_screen(observed.rank_masses[r]) + " but they sum to " + on_screen(mass));
  }
  const std::uint64_t valid_tokens = update.valid_tokens();
  if (observed.global_tokens && *observed.global_tokens != valid_tokens) {
    const std::uint64_t reported = *observed.global_tokens;
    const std::uint64_t padding = update.padding();
    const auto difference = static_cast<std::int64_t>(reported) - static_cast<std::int64_t>(valid_tokens);
    std::string problem = "the global denominator is " + std::to_string(reported) + " but the update holds N = " +
                          std::to_string(valid_tokens) + " valid tokens: ";
    const auto local = std::find_if(update.ranks.begin(), update.ranks.end(),
                                    [&](const rank_stats& r) { return r.valid_tokens() == reported; });
    if (difference > 0 && static_cast<std::uint64_t>(difference) == padding)
      problem += "it counts " + positions(padding) + " that hold no valid token (padding or ignored labels)";
    else if (local != update.ranks.end() && update.world_size() > 1)
      problem += "it is rank " +
                 std::to_string(update.listed_rank(static_cast<std::size_t>(local - update.ranks.begin()))) +
                 "'s local count, not the count of all ranks (all-reduce the count before dividing)";
    else
      problem += "it counts " + count_difference(difference) + " the file's valid tokens";
    problems.push_back(problem);
  }
  for (std::size_t r = 0; r < observed.rank_tokens.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    const std::uint64_t reported = observed.rank_tokens[r];
    if (reported == rank.valid_tokens()) continue;
    const auto difference = static_cast<std::int64_t>(reported) - static_cast<std::int64_t>(rank.valid_tokens());
    std::string problem = "rank " + std::to_string(update.listed_rank(r)) + " counted " + std::to_string(reported) +
                          " tokens but holds " + std::to_string(rank.valid_tokens()) + " valid ones: ";
    if (difference > 0 && static_cast<std::uint64_t>(difference) == rank.padding())
      problem += "its count includes " + positions(rank.padding()) + " that hold no valid token";
    else
      problem += "it counts " + count_difference(difference) + " it holds";
    problems.push_back(problem);
  }
  if (problems.empty()) {
    check.detail = std::string(masses ? "the reported token counts and weight masses match the file"
                                      : "the reported token counts match the file") +
                   (observed.divided_by.empty()
                        ? ""
                        : ", and every rank divided by the update's " +
                              std::string(update.objective == objective_kind::weighted_token_mean ? "M" : "N"));
    return check;
  }
  check.passed = false;
  for (const std::string& p : problems) check.detail += (check.detail.empty() ? "" : "; ") + p;
  return check;
}

}  // namespace normcheck
