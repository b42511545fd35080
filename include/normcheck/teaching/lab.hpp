#pragma once
/// \file teaching/lab.hpp
/// The optimization lab: plain gradient descent on the fixed objective f(x) = x²/2 (gradient x),
/// every iterate exact. A learner sets the step size and the start, predicts the next iterate and
/// steps; the lab says whether the prediction equals the exact iterate.

#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The most steps one `step K` takes.
inline constexpr std::uint64_t lab_max_steps = 1000;

/// What the lab holds; nothing is set until the learner sets it.
struct lab_state {
  std::optional<rational> learning_rate;  ///< η
  std::optional<rational> position;       ///< the current iterate x_t
  std::uint64_t iteration = 0;            ///< t: steps taken since x was set
  std::optional<rational> prediction;     ///< the learner's value for x_{t+1}
};

/// How a command went.
enum class lab_status {
  done,       ///< carried out
  refused,    ///< well formed but not possible in this state (stepping before lr and x are set)
  malformed,  ///< not a command the lab understands, or a value it cannot read
  quit,       ///< the session ends
};

/// The lab's answer to one command: its status and the lines to show.
struct lab_reply {
  lab_status status = lab_status::done;
  std::vector<std::string> lines;
};

/// The gradient of x²/2 at x: the teaching loss ½(θ − y)² of one token with target 0, by the library.
rational lab_gradient(const rational& x);

/// What the instrument does not model, said plainly.
std::string lab_limits();
/// The start-up lines: what the lab is, what it lacks, where to find the commands.
std::vector<std::string> lab_banner();
/// The list of commands, then the limits.
std::vector<std::string> lab_help();
/// "x1 = 9/5 (≈ 1.8)": an iterate, exact, with a decimal approximation unless it is an integer.
std::string lab_iterate(std::uint64_t iteration, const rational& value);

/// One lab session: a state and the commands that change it.
class lab_session {
public:
  /// Runs one command line ("set lr 0.1", "step 3", "# a comment"); blank lines and comments do nothing.
  lab_reply execute(std::string_view line);

  /// Clears lr, x, the iteration count and the prediction.
  lab_reply reset();
  /// Sets η from an exact literal (0.1, 1/10, 0x1.999999999999ap-4); η must be positive.
  lab_reply set_learning_rate(std::string_view text);
  /// Sets x₀ from an exact literal and restarts the count.
  lab_reply set_position(std::string_view text);
  /// Records a prediction of the next iterate.
  lab_reply predict(std::string_view text);
  /// Takes `count` steps (1 to lab_max_steps); refused until lr and x are set.
  lab_reply step(std::uint64_t count);
  /// Describes the state.
  lab_reply show() const;

  /// The state, for tests.
  const lab_state& state() const noexcept { return state_; }

private:
  lab_state state_;
};

}  // namespace normcheck
