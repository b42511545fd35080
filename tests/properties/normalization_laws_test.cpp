// Laws 2 to 4: which normalization delivers the objective, by how much the others miss it, and why
// equal partitions cannot tell.

#include "laws.hpp"

#include <doctest/doctest.h>

using namespace normcheck::properties;

TEST_CASE("compensation") {
  CHECK(rc::check("compensation: scaled_sum under the mean reducer and global_share under the sum reducer equal "
                  "global_mean for every update with N > 0",
                  compensation()));
}

TEST_CASE("wrong scale is exactly an integer factor") {
  CHECK(rc::check("wrong scale: scaled_sum under sum is W times global_mean, global_share under mean is global_mean "
                  "over W, local_sum under mean is N/W times global_mean",
                  wrong_scale()));
}

TEST_CASE("equal-partition control") {
  CHECK(rc::check("equal-partition control: with equal non-zero counts local_mean equals global_mean",
                  equal_partition_control()));
  CHECK(rc::check("equal-partition control: with two different non-zero counts there are targets on which "
                  "local_mean differs from global_mean",
                  unequal_counts_expose_bias()));
}
