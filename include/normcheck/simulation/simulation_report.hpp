#pragma once
/// \file simulation/simulation_report.hpp
/// A simulated run for people and machines: every step of every rank with the reference, the summary
/// lines `check` shows, and the whole run as one JSON document (exact values as "p/q" strings).

#include "normcheck/simulation/simulate.hpp"

#include <ostream>
#include <string>
#include <vector>

namespace normcheck {

/// A parameter vector as text: the value itself for the scalar model, "[a, b]" otherwise; long values
/// shortened for a screen unless `shortened` is false.
std::string vector_text(const parameter_vector& v, bool scalar, bool shortened = true);
/// Why a run stopped, in words.
std::string halt_text(const halt& h);
/// Whether the replicas agree, and where they first differ, in words.
std::string replicas_text(const scenario& s, const simulation& run);
/// Whether the run equals the single-process reference, in words.
std::string reference_text(const simulation& run);

/// The summary lines `check` shows for a scenario run.
std::vector<std::string> summarize_simulation(const scenario& s, const simulation& run);

/// Writes the full run: every step's exact values per rank and the reference, then the summary.
void print_simulation(std::ostream& out, const std::string& source, const scenario& s, const simulation& run);

/// Writes the run as one JSON document, with the claims that do not hold.
void print_simulation_json(std::ostream& out, const std::string& source, const scenario& s, const simulation& run,
                           const std::vector<std::string>& failures);

}  // namespace normcheck
