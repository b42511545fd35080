// Laws 1, 5 and 8: what the objective and its compensation do not depend on (how tokens are dealt,
// ordered, padded, accumulated, or whether a rank is empty), and what the wrong ones do depend on.

#include "laws.hpp"

#include <doctest/doctest.h>

using namespace normcheck::properties;

TEST_CASE("partition invariance") {
  CHECK(rc::check("partition invariance: global_mean is unchanged by any repartition, rank permutation, microbatch "
                  "split or added padding",
                  partition_invariance()));
}

TEST_CASE("empty-rank handling") {
  CHECK(rc::check("empty-rank handling: an empty rank contributes nothing, the compensation stays correct for the "
                  "new W, local_mean is undefined",
                  empty_rank_handling()));
}

TEST_CASE("accumulation") {
  CHECK(rc::check("accumulation: the compensation with the update's N is invariant under re-splitting microbatches",
                  accumulation()));
  CHECK(rc::check("accumulation: microbatch_mean equals the token mean when all microbatches have equal counts",
                  equal_microbatches_control()));
  CHECK(rc::check("accumulation: microbatch_mean depends on how a rank's tokens are split into microbatches",
                  microbatch_split_exposes_bias()));
}
