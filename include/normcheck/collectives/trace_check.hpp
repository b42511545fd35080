#pragma once
/// \file collectives/trace_check.hpp
/// Checking a trace: every rank must issue the same collectives, in the same order, with the same
/// operation, group, reduce op, shape and dtype. Calls are compared step by step, position by position,
/// and the first disagreement is kept with each rank's call side by side.

#include "normcheck/collectives/trace.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// What a rank did at one position of one step.
struct rank_call {
  std::size_t rank = 0;
  std::optional<std::size_t> call;  ///< index into calls(); none when the rank issued no call there
};

/// The first place where the ranks disagree.
struct trace_problem {
  bool missing_call = false;            ///< some rank did not issue a call the others did (would hang)
  std::uint64_t step = 0;
  std::uint64_t position = 0;           ///< 0-based position of the call within the step
  std::vector<rank_call> side_by_side;  ///< every rank's call at (step, position)
  std::vector<std::size_t> waiting;     ///< ranks that issued the call and would wait for the others
  std::vector<std::size_t> missing;     ///< ranks that did not issue it
  std::vector<std::string> notes;       ///< what differs, and what each odd rank did instead
};

/// The verdict on a trace.
struct trace_verdict {
  std::size_t world_size = 0;
  std::uint64_t calls = 0;
  std::uint64_t steps = 0;              ///< distinct steps seen
  std::optional<trace_problem> first_problem;
};

/// Compares the ranks' sequences. W is `world_size` when given, else the largest rank + 1 (a rank
/// with no line then misses every call). Throws `error(schema_error)` for an inconsistent trace: a
/// seq repeated or skipped on a rank (a lost line), a step that goes backwards, a rank ≥ W.
trace_verdict check_trace(const collective_trace& trace, std::optional<std::size_t> world_size = std::nullopt);

}  // namespace normcheck
