// write_document and read_partition are inverse on every generated update.

#include "generators.hpp"
#include "oracle.hpp"

#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using namespace normcheck::properties;

TEST_CASE("written documents read back") {
  CHECK(rc::check("writing an update and reading it back gives the same statistics and gradients", [] {
    const token_partition tokens = *gen_update();
    const std::string text = write_document(tokens);
    const partition written = to_partition(tokens);
    if (oracle::valid_tokens(tokens) == 0) {
      try {
        read_partition(text, "written.json");
        RC_FAIL("an update without valid tokens was read");
      } catch (const error& e) {
        RC_ASSERT(e.code() == error_code::no_valid_tokens);
      }
      return;
    }
    const partition read = read_partition(text, "written.json").update;
    RC_ASSERT(read.ranks.size() == written.ranks.size());
    RC_ASSERT(read.reducer == written.reducer);
    RC_ASSERT(read.theta == written.theta);
    for (std::size_t r = 0; r < written.ranks.size(); ++r) {
      RC_ASSERT(read.ranks[r].microbatches.size() == written.ranks[r].microbatches.size());
      for (std::size_t m = 0; m < written.ranks[r].microbatches.size(); ++m) {
        const microbatch_stats& a = written.ranks[r].microbatches[m];
        const microbatch_stats& b = read.ranks[r].microbatches[m];
        RC_ASSERT(a.valid_tokens == b.valid_tokens);
        RC_ASSERT(a.padding == b.padding);
        RC_ASSERT(a.target_sum() == b.target_sum());
        RC_ASSERT(a.target_abs_sum() == b.target_abs_sum());
      }
    }
    RC_ASSERT(compute_gradients(read) == compute_gradients(written));
  }));
}
