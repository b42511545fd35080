#pragma once
/// \file teaching/lab.hpp
/// The optimization lab: plain gradient descent on the fixed objective f(x) = x²/2 (gradient x),
/// every iterate exact. A learner sets the step size and the start, predicts the next iterate and
/// steps; the lab says whether the prediction equals the exact iterate.

#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The most steps one `step K` takes.
inline constexpr std::uint64_t lab_max_steps = 1000;
/// Significant digits of the decimal approximation shown beside an exact value ("9/5 (≈ 1.8)").
inline constexpr int lab_significant_digits = 6;

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

/// Every sentence the lab says that has a variable part or is built from parts. Each has one text
/// with numbered gaps {0}, {1}, … for its variable parts; the session fills them with `lab_say`, and
/// the teaching page embeds the same texts for its script, so both labs word everything alike.
enum class lab_message {
  reset_done,              ///< reset: lr, x and the prediction are cleared
  approximated,            ///< {0} (≈ {1}): an exact value and its decimal approximation
  learning_rate_set,       ///< lr = {0}
  iterate,                 ///< x{0} = {1}
  prediction_recorded,     ///< prediction for x{0}: {1}
  prediction_right,        ///< prediction {0} is right: it equals x{1} exactly
  prediction_wrong,        ///< prediction {0} is wrong: x{1} = {2}, the prediction is off by {3}
  refused_lr_and_x,        ///< stepping before either is set
  refused_lr,              ///< stepping before lr is set
  refused_x,               ///< stepping before x is set
  malformed,               ///< malformed: {0}
  takes_no_argument,       ///< {0} takes no argument; found '{1}'
  expected_set,            ///< set without lr or x and one value
  expected_predict,        ///< predict without exactly one value
  expected_step,           ///< step with more than one count
  bad_step_count,          ///< step takes a whole number of steps from 1 to {0}; found '{1}'
  step_count_out_of_range, ///< step takes a whole number of steps from 1 to {0}
  unknown_command,         ///< unknown command '{0}'; help lists the commands
  step_size_not_positive,  ///< the step size must be greater than 0; found {0}
  show_lr,                 ///< lr: {0}
  show_lr_unset,           ///< lr: not set (set lr VALUE)
  show_x,                  ///< x: {0}
  show_x_unset,            ///< x: not set (set x VALUE)
  show_no_prediction,      ///< prediction for x{0}: none
};

/// One message: its stable name (for the page's script) and its text with gaps.
struct lab_message_text {
  lab_message id;
  std::string_view name;
  std::string_view text;
};

/// Every message, in the order of `lab_message`.
const std::vector<lab_message_text>& lab_messages();
/// The text of `id` with each gap {i} replaced by parts[i], in one pass (a part is never searched for gaps).
std::string lab_say(lab_message id, std::initializer_list<std::string_view> parts = {});

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
