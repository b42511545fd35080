#pragma once
/// \file collectives/trace_report.hpp
/// A trace's verdict for people (the first problem with each rank's call side by side) and for machines.

#include "normcheck/collectives/trace_check.hpp"

#include <ostream>

namespace normcheck {

/// Writes the verdict for people: the counts, then the first problem with each rank's call side by side.
void print_trace_verdict(std::ostream& out, const collective_trace& trace, const trace_verdict& verdict);
/// Writes the verdict as one JSON document.
void print_trace_verdict_json(std::ostream& out, const collective_trace& trace, const trace_verdict& verdict);

}  // namespace normcheck
