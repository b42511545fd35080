// The laws of every declared objective on updates with sequences, compact groups, padding and normalizers:
// partition invariance, the compensation law, the empty-rank law and all-empty rejection, one test per law
// and objective, and the round trip of the documents the laws print.

#include "capped.hpp"
#include "grouped_laws.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using namespace normcheck::properties;

namespace {

void partition_invariance_under(objective_kind objective) {
  check_costly_law(
      "partition invariance" + under(objective) +
          ": global_mean and the compensation equal the objective's "
          "gradient and do not change when its tokens (or whole sequences) are dealt afresh to any number of "
          "ranks and microbatches, the ranks permuted, padding and empty groups added",
      grouped_partition_invariance(objective));
}

void compensation_under(objective_kind objective) {
  check_costly_law("compensation" + under(objective) + ": scaled_sum under mean and global_share under sum equal the "
                   "objective's gradient on every update, empty ranks, microbatches and sequences included",
                   grouped_compensation(objective));
}

void empty_rank_under(objective_kind objective) {
  check_costly_law("empty-rank handling" + under(objective) + ": a rank without a valid token changes neither the "
                   "objective nor the compensation, and makes local_mean and microbatch_mean undefined",
                   grouped_empty_rank(objective));
}

void all_empty_under(objective_kind objective) {
  check_costly_law("all-empty rejection" + under(objective) + ": an update on which the objective does not exist is "
                   "rejected with no_valid_tokens by every gradient and by the reader",
                   grouped_all_empty_rejection(objective));
}

void round_trip_under(objective_kind objective) {
  check_costly_law("grouped documents read back" + under(objective) + ": the same groups, counts, sums and gradients",
                   grouped_round_trip(objective));
}

}  // namespace

TEST_CASE("partition invariance under token_mean") { partition_invariance_under(objective_kind::token_mean); }
TEST_CASE("partition invariance under weighted_token_mean") {
  partition_invariance_under(objective_kind::weighted_token_mean);
}
TEST_CASE("partition invariance under sequence_mean") { partition_invariance_under(objective_kind::sequence_mean); }
TEST_CASE("partition invariance under sequence_sum_mean") {
  partition_invariance_under(objective_kind::sequence_sum_mean);
}
TEST_CASE("partition invariance under constant") { partition_invariance_under(objective_kind::constant); }

TEST_CASE("compensation under token_mean") { compensation_under(objective_kind::token_mean); }
TEST_CASE("compensation under weighted_token_mean") { compensation_under(objective_kind::weighted_token_mean); }
TEST_CASE("compensation under sequence_mean") { compensation_under(objective_kind::sequence_mean); }
TEST_CASE("compensation under sequence_sum_mean") { compensation_under(objective_kind::sequence_sum_mean); }
TEST_CASE("compensation under constant") { compensation_under(objective_kind::constant); }

TEST_CASE("empty-rank handling under token_mean") { empty_rank_under(objective_kind::token_mean); }
TEST_CASE("empty-rank handling under weighted_token_mean") { empty_rank_under(objective_kind::weighted_token_mean); }
TEST_CASE("empty-rank handling under sequence_mean") { empty_rank_under(objective_kind::sequence_mean); }
TEST_CASE("empty-rank handling under sequence_sum_mean") { empty_rank_under(objective_kind::sequence_sum_mean); }
TEST_CASE("empty-rank handling under constant") { empty_rank_under(objective_kind::constant); }

TEST_CASE("all-empty rejection under token_mean") { all_empty_under(objective_kind::token_mean); }
TEST_CASE("all-empty rejection under weighted_token_mean") { all_empty_under(objective_kind::weighted_token_mean); }
TEST_CASE("all-empty rejection under sequence_mean") { all_empty_under(objective_kind::sequence_mean); }
TEST_CASE("all-empty rejection under sequence_sum_mean") { all_empty_under(objective_kind::sequence_sum_mean); }
TEST_CASE("all-empty rejection under constant") { all_empty_under(objective_kind::constant); }

TEST_CASE("grouped documents read back") {
  for (objective_kind objective : {objective_kind::token_mean, objective_kind::weighted_token_mean,
                                   objective_kind::sequence_mean, objective_kind::sequence_sum_mean,
                                   objective_kind::constant})
    round_trip_under(objective);
}
