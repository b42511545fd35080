#include "normcheck/teaching/lab.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"

#include <charconv>

namespace normcheck {

namespace {

lab_reply reply(lab_status status, std::vector<std::string> lines) { return lab_reply{status, std::move(lines)}; }

lab_reply malformed(std::string message) {
  return reply(lab_status::malformed, {lab_say(lab_message::malformed, {message})});
}

// Reads a value through the one door; a bad literal becomes a malformed reply with the library's message.
std::optional<rational> read_value(std::string_view text, lab_reply& failure) {
  try {
    return read_number(text, literal_form::json_string);
  } catch (const error& e) {
    failure = malformed(describe(e));
    return std::nullopt;
  }
}

std::string value_with_approximation(const rational& value) {
  if (boost::multiprecision::denominator(value) == 1) return to_string(value);
  return lab_say(lab_message::approximated, {to_string(value), approximate(value, lab_significant_digits)});
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

}  // namespace

const std::vector<lab_message_text>& lab_messages() {
  static const std::vector<lab_message_text> messages{
      {lab_message::reset_done, "reset_done", "reset: lr, x and the prediction are cleared"},
      {lab_message::approximated, "approximated", "{0} (≈ {1})"},
      {lab_message::learning_rate_set, "learning_rate_set", "lr = {0}"},
      {lab_message::iterate, "iterate", "x{0} = {1}"},
      {lab_message::prediction_recorded, "prediction_recorded", "prediction for x{0}: {1}"},
      {lab_message::prediction_right, "prediction_right", "prediction {0} is right: it equals x{1} exactly"},
      {lab_message::prediction_wrong, "prediction_wrong",
       "prediction {0} is wrong: x{1} = {2}, the prediction is off by {3}"},
      {lab_message::refused_lr_and_x, "refused_lr_and_x",
       "refused: cannot step before lr (set lr VALUE) and x (set x VALUE) are set"},
      {lab_message::refused_lr, "refused_lr", "refused: cannot step before lr (set lr VALUE) is set"},
      {lab_message::refused_x, "refused_x", "refused: cannot step before x (set x VALUE) is set"},
      {lab_message::malformed, "malformed", "malformed: {0}"},
      {lab_message::takes_no_argument, "takes_no_argument", "{0} takes no argument; found '{1}'"},
      {lab_message::expected_set, "expected_set", "expected 'set lr VALUE' or 'set x VALUE'"},
      {lab_message::expected_predict, "expected_predict", "expected 'predict VALUE', one exact number"},
      {lab_message::expected_step, "expected_step", "expected 'step' or 'step K'"},
      {lab_message::bad_step_count, "bad_step_count", "step takes a whole number of steps from 1 to {0}; found '{1}'"},
      {lab_message::step_count_out_of_range, "step_count_out_of_range",
       "step takes a whole number of steps from 1 to {0}"},
      {lab_message::unknown_command, "unknown_command", "unknown command '{0}'; help lists the commands"},
      {lab_message::step_size_not_positive, "step_size_not_positive",
       "the step size must be greater than 0; found {0}"},
      {lab_message::show_lr, "show_lr", "lr: {0}"},
      {lab_message::show_lr_unset, "show_lr_unset", "lr: not set (set lr VALUE)"},
      {lab_message::show_x, "show_x", "x: {0}"},
      {lab_message::show_x_unset, "show_x_unset", "x: not set (set x VALUE)"},
      {lab_message::show_no_prediction, "show_no_prediction", "prediction for x{0}: none"},
  };
  return messages;
}

std::string lab_say(lab_message id, std::initializer_list<std::string_view> parts) {
  const std::string_view text = lab_messages()[static_cast<std::size_t>(id)].text;
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    // A gap is '{', one digit and '}'; the texts have fewer than ten parts.
    if (text[i] == '{' && i + 2 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '9' && text[i + 2] == '}') {
      const auto index = static_cast<std::size_t>(text[i + 1] - '0');
      if (index < parts.size()) out += *(parts.begin() + index);
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

rational lab_gradient(const rational& x) {
  const partition one_token = make_partition({{token{0}}}, x);
  return *gradient(one_token, strategy::global_mean);
}

std::string lab_limits() {
  return "The lab models one number and one update rule. It has no replicas, no all-reduce, no optimizer "
         "state, no data pipeline and no completion semantics: it shows how the step size scales an update, "
         "not how a distributed run computes one.";
}

std::vector<std::string> lab_banner() {
  return {"normcheck lab: gradient descent x ← x − lr·x on f(x) = x²/2, every value exact.", lab_limits(),
          "Type help for the commands."};
}

std::vector<std::string> lab_help() {
  return {
      "commands:",
      "  reset          clear lr, x, the iteration count and the prediction",
      "  set lr VALUE   set the step size, an exact number > 0 (0.1, 1/10, 0x1.999999999999ap-4)",
      "  set x VALUE    set the start x0 and count steps from there",
      "  predict VALUE  record your value for the next iterate",
      "  step [K]       take K steps (1 to " + std::to_string(lab_max_steps) +
          ", default 1), print each iterate exactly and judge the prediction",
      "  show           print lr, the current iterate and the prediction",
      "  help           print this list",
      "  quit           end the session",
      "Lines that start with # are ignored.",
      lab_limits(),
  };
}

std::string lab_iterate(std::uint64_t iteration, const rational& value) {
  return lab_say(lab_message::iterate, {std::to_string(iteration), value_with_approximation(value)});
}

lab_reply lab_session::execute(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<std::string_view> words = split_words(line);
  if (words.empty() || words.front().front() == '#') return reply(lab_status::done, {});
  const std::string_view command = words.front();
  const std::size_t arguments = words.size() - 1;
  if (command == "reset" || command == "show" || command == "help" || command == "quit") {
    if (arguments != 0) return malformed(lab_say(lab_message::takes_no_argument, {command, words[1]}));
    if (command == "reset") return reset();
    if (command == "show") return show();
    if (command == "help") return reply(lab_status::done, lab_help());
    return reply(lab_status::quit, {});
  }
  if (command == "set") {
    if (arguments != 2 || (words[1] != "lr" && words[1] != "x"))
      return malformed(lab_say(lab_message::expected_set));
    return words[1] == "lr" ? set_learning_rate(words[2]) : set_position(words[2]);
  }
  if (command == "predict") {
    if (arguments != 1) return malformed(lab_say(lab_message::expected_predict));
    return predict(words[1]);
  }
  if (command == "step") {
    if (arguments > 1) return malformed(lab_say(lab_message::expected_step));
    std::uint64_t count = 1;
    if (arguments == 1) {
      const std::string_view text = words[1];
      const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), count);
      if (failure != std::errc() || end != text.data() + text.size() || count < 1 || count > lab_max_steps)
        return malformed(lab_say(lab_message::bad_step_count, {std::to_string(lab_max_steps), text}));
    }
    return step(count);
  }
  return malformed(lab_say(lab_message::unknown_command, {command}));
}

lab_reply lab_session::reset() {
  state_ = lab_state{};
  return reply(lab_status::done, {lab_say(lab_message::reset_done)});
}

lab_reply lab_session::set_learning_rate(std::string_view text) {
  lab_reply failure;
  std::optional<rational> value = read_value(text, failure);
  if (!value) return failure;
  if (*value <= 0) return malformed(lab_say(lab_message::step_size_not_positive, {to_string(*value)}));
  state_.learning_rate = std::move(value);
  return reply(lab_status::done,
               {lab_say(lab_message::learning_rate_set, {value_with_approximation(*state_.learning_rate)})});
}

lab_reply lab_session::set_position(std::string_view text) {
  lab_reply failure;
  std::optional<rational> value = read_value(text, failure);
  if (!value) return failure;
  state_.position = std::move(value);
  state_.iteration = 0;
  return reply(lab_status::done, {lab_iterate(0, *state_.position)});
}

lab_reply lab_session::predict(std::string_view text) {
  lab_reply failure;
  std::optional<rational> value = read_value(text, failure);
  if (!value) return failure;
  state_.prediction = std::move(value);
  return reply(lab_status::done,
               {lab_say(lab_message::prediction_recorded,
                        {std::to_string(state_.iteration + 1), value_with_approximation(*state_.prediction)})});
}

lab_reply lab_session::step(std::uint64_t count) {
  if (!state_.learning_rate || !state_.position) {
    const lab_message refusal = !state_.learning_rate && !state_.position ? lab_message::refused_lr_and_x
                                : !state_.learning_rate                   ? lab_message::refused_lr
                                                                          : lab_message::refused_x;
    return reply(lab_status::refused, {lab_say(refusal)});
  }
  if (count < 1 || count > lab_max_steps)
    return malformed(lab_say(lab_message::step_count_out_of_range, {std::to_string(lab_max_steps)}));
  lab_reply out;
  for (std::uint64_t i = 0; i < count; ++i) {
    const rational& x = *state_.position;
    rational next = x - *state_.learning_rate * lab_gradient(x);
    state_.position = std::move(next);
    ++state_.iteration;
    out.lines.push_back(lab_iterate(state_.iteration, *state_.position));
    if (i == 0 && state_.prediction) {
      const rational& predicted = *state_.prediction;
      const std::string iteration = std::to_string(state_.iteration);
      if (predicted == *state_.position) {
        out.lines.push_back(lab_say(lab_message::prediction_right, {to_string(predicted), iteration}));
      } else {
        rational off = predicted - *state_.position;
        out.lines.push_back(lab_say(lab_message::prediction_wrong,
                                    {to_string(predicted), iteration, to_string(*state_.position), to_string(off)}));
      }
      state_.prediction.reset();
    }
  }
  return out;
}

lab_reply lab_session::show() const {
  std::vector<std::string> lines;
  lines.push_back(state_.learning_rate
                      ? lab_say(lab_message::show_lr, {value_with_approximation(*state_.learning_rate)})
                      : lab_say(lab_message::show_lr_unset));
  lines.push_back(state_.position ? lab_say(lab_message::show_x, {lab_iterate(state_.iteration, *state_.position)})
                                  : lab_say(lab_message::show_x_unset));
  const std::string next = std::to_string(state_.iteration + 1);
  lines.push_back(state_.prediction ? lab_say(lab_message::prediction_recorded,
                                              {next, value_with_approximation(*state_.prediction)})
                                    : lab_say(lab_message::show_no_prediction, {next}));
  return reply(lab_status::done, std::move(lines));
}

}  // namespace normcheck
