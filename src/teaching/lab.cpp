#include "normcheck/teaching/lab.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"

#include <charconv>

namespace normcheck {

namespace {

lab_reply reply(lab_status status, std::vector<std::string> lines) { return lab_reply{status, std::move(lines)}; }

lab_reply malformed(std::string message) { return reply(lab_status::malformed, {"malformed: " + message}); }

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
  std::string out = to_string(value);
  if (boost::multiprecision::denominator(value) != 1) out += " (≈ " + approximate(value) + ")";
  return out;
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

std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

}  // namespace

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
  return "x" + std::to_string(iteration) + " = " + value_with_approximation(value);
}

lab_reply lab_session::execute(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const std::vector<std::string_view> words = split_words(line);
  if (words.empty() || words.front().front() == '#') return reply(lab_status::done, {});
  const std::string_view command = words.front();
  const std::size_t arguments = words.size() - 1;
  if (command == "reset" || command == "show" || command == "help" || command == "quit") {
    if (arguments != 0) return malformed(std::string(command) + " takes no argument; found " + quoted(words[1]));
    if (command == "reset") return reset();
    if (command == "show") return show();
    if (command == "help") return reply(lab_status::done, lab_help());
    return reply(lab_status::quit, {});
  }
  if (command == "set") {
    if (arguments != 2 || (words[1] != "lr" && words[1] != "x"))
      return malformed("expected 'set lr VALUE' or 'set x VALUE'");
    return words[1] == "lr" ? set_learning_rate(words[2]) : set_position(words[2]);
  }
  if (command == "predict") {
    if (arguments != 1) return malformed("expected 'predict VALUE', one exact number");
    return predict(words[1]);
  }
  if (command == "step") {
    if (arguments > 1) return malformed("expected 'step' or 'step K'");
    std::uint64_t count = 1;
    if (arguments == 1) {
      const std::string_view text = words[1];
      const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), count);
      if (failure != std::errc() || end != text.data() + text.size() || count < 1 || count > lab_max_steps)
        return malformed("step takes a whole number of steps from 1 to " + std::to_string(lab_max_steps) +
                         "; found " + quoted(text));
    }
    return step(count);
  }
  return malformed("unknown command " + quoted(command) + "; help lists the commands");
}

lab_reply lab_session::reset() {
  state_ = lab_state{};
  return reply(lab_status::done, {"reset: lr, x and the prediction are cleared"});
}

lab_reply lab_session::set_learning_rate(std::string_view text) {
  lab_reply failure;
  std::optional<rational> value = read_value(text, failure);
  if (!value) return failure;
  if (*value <= 0) return malformed("the step size must be greater than 0; found " + to_string(*value));
  state_.learning_rate = std::move(value);
  return reply(lab_status::done, {"lr = " + value_with_approximation(*state_.learning_rate)});
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
  return reply(lab_status::done, {"prediction for x" + std::to_string(state_.iteration + 1) + ": " +
                                      value_with_approximation(*state_.prediction)});
}

lab_reply lab_session::step(std::uint64_t count) {
  std::vector<std::string> missing;
  if (!state_.learning_rate) missing.push_back("lr (set lr VALUE)");
  if (!state_.position) missing.push_back("x (set x VALUE)");
  if (!missing.empty()) {
    std::string message = "refused: cannot step before ";
    message += missing.size() == 2 ? missing[0] + " and " + missing[1] + " are set" : missing[0] + " is set";
    return reply(lab_status::refused, {message});
  }
  if (count < 1 || count > lab_max_steps)
    return malformed("step takes a whole number of steps from 1 to " + std::to_string(lab_max_steps));
  lab_reply out;
  for (std::uint64_t i = 0; i < count; ++i) {
    const rational& x = *state_.position;
    rational next = x - *state_.learning_rate * lab_gradient(x);
    state_.position = std::move(next);
    ++state_.iteration;
    out.lines.push_back(lab_iterate(state_.iteration, *state_.position));
    if (i == 0 && state_.prediction) {
      const rational& predicted = *state_.prediction;
      const std::string name = "x" + std::to_string(state_.iteration);
      if (predicted == *state_.position) {
        out.lines.push_back("prediction " + to_string(predicted) + " is right: it equals " + name + " exactly");
      } else {
        rational off = predicted - *state_.position;
        out.lines.push_back("prediction " + to_string(predicted) + " is wrong: " + name + " = " +
                            to_string(*state_.position) + ", the prediction is off by " + to_string(off));
      }
      state_.prediction.reset();
    }
  }
  return out;
}

lab_reply lab_session::show() const {
  std::vector<std::string> lines;
  lines.push_back("lr: " + (state_.learning_rate ? value_with_approximation(*state_.learning_rate)
                                                 : std::string("not set (set lr VALUE)")));
  lines.push_back("x: " + (state_.position ? lab_iterate(state_.iteration, *state_.position)
                                          : std::string("not set (set x VALUE)")));
  lines.push_back("prediction for x" + std::to_string(state_.iteration + 1) + ": " +
                  (state_.prediction ? value_with_approximation(*state_.prediction) : std::string("none")));
  return reply(lab_status::done, std::move(lines));
}

}  // namespace normcheck
