// The fit law of the per-group gate: a planted formula (exactly and in float32), and every mistake the gate
// knows on one update. The planted wrong fitters the laws catch are in mutation_test.cpp.

#include "capped.hpp"
#include "fit_law.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using namespace normcheck::properties;

TEST_CASE("the fit law") {
  check_costly_law("the fit law: for random updates and planted per-group weight formulas, exact and in float32, the "
                   "gate names the planted formula or one with its table, never passes a table other than the "
                   "objective's, and passes the objective's (or says what could hide)",
                   fit_law());
}

TEST_CASE("the fit law for each mistake") {
  check_costly_law("the fit law for each mistake: on random updates with sequences, every normalization whose table "
                   "differs from the objective's, dumped exactly, is named by the gate",
                   fit_each_mistake(), 150);
}

TEST_CASE("a measurement of zeros where the groups have tokens is unexplained, not a division by zero") {
  // Found by the fit law's wrong fitters: the unexplained table's "divided by ≈ total/factor" divided by
  // the factor 0.
  grouped_update update;
  update.ranks = {{plain_microbatch({token(rational(1)), token(rational(2))})},
                  {plain_microbatch({token(rational(3))})}};
  observation zeros;
  zeros.per_rank.assign(2, std::vector<rational>(2, rational(0)));
  const std::optional<gate_result> result = document_gate()(update, zeros);
  REQUIRE(result.has_value());
  CHECK(result->verdict == gate_verdict::fail);
  REQUIRE(result->diagnosis.size() == 1);
  CHECK(result->diagnosis.front().name == "unexplained");
}
