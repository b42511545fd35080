#pragma once
// The one place where what a command concluded, or how it failed, becomes an exit status.

#include <functional>
#include <iosfwd>

namespace normcheck::cli {

/// What a command concluded; main.cpp alone maps it to an exit status.
enum class outcome {
  holds,         ///< everything checked holds (exit 0)
  check_failed,  ///< a claim or check does not hold, or the verdict is inconclusive (exit 1)
  rejected,      ///< input rejected or the command misused (exit 2)
};

/// The exit statuses: 0 holds, 1 a check failed, 2 input rejected or misuse, 3 normcheck itself failed.
inline constexpr int exit_holds = 0;
inline constexpr int exit_check_failed = 1;
inline constexpr int exit_rejected = 2;
inline constexpr int exit_internal_error = 3;

/// The exit status of an outcome.
int exit_status(outcome result) noexcept;

/// Runs `command` and maps how it ends to an exit status: its outcome, or a `normcheck::error` (rejected
/// input or misuse: printed as `describe` prints it, exit 2), or any other exception, which is a defect in
/// normcheck and not a verdict on the input (a Boost division by zero, a logic error: printed as "internal
/// error: …, please report it", exit 3; exhausted memory is exit 3 too, said as such).
int run_mapped(const std::function<int()>& command, std::ostream& errors);

}  // namespace normcheck::cli
