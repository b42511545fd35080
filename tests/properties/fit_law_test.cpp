// The fit law of the per-group gate: a planted formula (exactly and in float32), and every mistake the gate
// knows on one update. The planted wrong fitters the laws catch are in mutation_test.cpp.

#include "capped.hpp"
#include "fit_law.hpp"

#include <doctest/doctest.h>

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
