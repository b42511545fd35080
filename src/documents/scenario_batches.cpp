// The steps of a scenario: each step's ranks (the same W in every step), each rank's microbatches, and
// their tokens: target values for the scalar model, {"x", "y"} samples for a vector model, null for padding.

#include "scenario_reader.hpp"

namespace normcheck::detail {

void add_sample(microbatch_moments& m, const parameter_vector& x, const rational& y) {
  const std::size_t d = x.size();
  if (m.gram.empty()) {
    m.gram.assign(d * d, rational(0));
    m.target_moment.assign(d, rational(0));
  }
  for (std::size_t i = 0; i < d; ++i) {
    rational yx = y * x[i];
    m.target_moment[i] += yx;
    for (std::size_t j = 0; j < d; ++j) {
      rational xx = x[i] * x[j];
      m.gram[i * d + j] += xx;
    }
  }
  ++m.valid_tokens;
}

void scenario_reader::read_steps() {
  if (json_.peek() != json_kind::array) json_.fail_type("steps", "an array of steps, each {\"ranks\": [...]}");
  json_.begin_array();
  while (json_.next_element()) read_step();
  if (result_.steps.empty()) fail_at(steps_offset_, "steps must not be empty");
}

void scenario_reader::read_step() {
  const std::uint64_t offset = json_.value_offset();
  if (json_.peek() != json_kind::object)
    json_.fail_type("each step", "an object {\"ranks\": [...]} with an optional \"repeat\"");
  step_batch step;
  std::uint64_t repeat = 1;
  std::uint64_t repeat_offset = 0;
  json_.read_object({
      {
          {"ranks",
           [&](std::string_view) {
             const std::uint64_t ranks_offset = json_.value_offset();
             if (json_.peek() != json_kind::array) json_.fail_type("ranks", "an array with one object per rank");
             json_.begin_array();
             while (json_.next_element()) {
               if (step.ranks.size() == scenario_max_world_size)
                 fail_at(json_.value_offset(),
                         "a step lists more than " + std::to_string(scenario_max_world_size) +
                             " ranks, the limit of a scenario",
                         error_code::limit_exceeded);
               step.ranks.push_back(read_rank());
             }
             if (step.ranks.empty()) fail_at(ranks_offset, "ranks must not be empty: list every rank of the step");
           }},
          {"repeat",
           [&](std::string_view) {
             repeat_offset = json_.value_offset();
             repeat = json_.integer("repeat", 1, scenario_max_steps, error_code::limit_exceeded);
           }},
      },
      "in a step (a step has ranks and repeat)",
      {{{"ranks"}, "a step needs \"ranks\": one object per rank", std::nullopt}}});
  if (!result_.steps.empty() && step.ranks.size() != result_.steps.front().ranks.size())
    fail_at(offset,
            "this step lists " + std::to_string(step.ranks.size()) + " ranks but step 1 lists " +
                std::to_string(result_.steps.front().ranks.size()) + ": every step has the same W ranks",
            error_code::world_size_mismatch);
  if (step.valid_tokens() == 0)
    fail_at(offset,
            "step " + std::to_string(result_.steps.size() + 1) +
                " holds no valid token on any rank (N = 0): its token-mean objective is undefined and every rank "
                "must skip it by one shared rule; leave it out of the scenario",
            error_code::no_valid_tokens);
  if (result_.steps.size() + repeat > scenario_max_steps)
    fail_at(repeat_offset != 0 ? repeat_offset : offset,
            "the scenario has more than " + std::to_string(scenario_max_steps) + " steps, the limit",
            error_code::limit_exceeded);
  for (std::uint64_t i = 1; i < repeat; ++i) result_.steps.push_back(step);
  result_.steps.push_back(std::move(step));
}

rank_batch scenario_reader::read_rank() {
  const std::uint64_t offset = json_.value_offset();
  if (json_.peek() != json_kind::object)
    json_.fail_type("each rank", "an object with \"targets\" or \"microbatches\", e.g. {\"targets\": [0, 2]}");
  rank_batch rank;
  const members_seen seen = json_.read_object({
      {
          {"targets", [&](std::string_view) { rank.microbatches.push_back(read_tokens("targets")); }},
          {"microbatches",
           [&](std::string_view) {
             const std::uint64_t list_offset = json_.value_offset();
             if (json_.peek() != json_kind::array) json_.fail_type("microbatches", "a non-empty array of token arrays");
             json_.begin_array();
             while (json_.next_element()) rank.microbatches.push_back(read_tokens("each microbatch"));
             if (rank.microbatches.empty())
               fail_at(list_offset, "microbatches must not be empty: a rank takes part with at least one microbatch "
                                    "(an empty one, [], if it holds no token)");
           }},
      },
      "in a rank (a rank has \"targets\" or \"microbatches\")",
      {}});
  const bool saw_targets = seen.has("targets");
  if (saw_targets == seen.has("microbatches"))
    fail_at(offset, saw_targets ? "a rank has both \"targets\" and \"microbatches\": give exactly one"
                                : "a rank needs \"targets\" (one microbatch) or \"microbatches\" (several)");
  return rank;
}

// The token's form fixes the model: a number is a scalar-model target, {"x": [...], "y": v} a
// vector-model sample. Every token of the document must have the form and dimension of the first.
void scenario_reader::note_token_form(bool scalar, std::size_t dimension, std::uint64_t offset) {
  if (!token_form_) {
    token_form_ = scalar;
    token_dimension_ = dimension;
    token_offset_ = offset;
    return;
  }
  if (*token_form_ != scalar)
    fail_at(offset, std::string("this token is ") + (scalar ? "a number" : "an {\"x\", \"y\"} object") +
                        " but the first token of the scenario is " +
                        (*token_form_ ? "a number" : "an {\"x\", \"y\"} object") + ": one model, one token form");
  if (dimension != token_dimension_)
    fail_at(offset, "this token has " + std::to_string(dimension) + " features but the first has " +
                        std::to_string(token_dimension_));
}

microbatch_moments scenario_reader::read_tokens(std::string_view what) {
  if (json_.peek() != json_kind::array)
    json_.fail_type(what, "an array of tokens (target values, {\"x\": [...], \"y\": v} samples, or null for padding)");
  json_.begin_array();
  microbatch_moments m;
  const parameter_vector unit{rational(1)};
  while (json_.next_element()) {
    const std::uint64_t offset = json_.value_offset();
    const json_kind kind = json_.peek();
    if (kind == json_kind::null) {
      json_.null_value();
      ++m.padding;
    } else if (kind == json_kind::object) {
      auto [x, y] = read_sample();
      note_token_form(false, x.size(), offset);
      add_sample(m, x, y);
    } else {
      rational y = json_.exact("a token value");
      note_token_form(true, 1, offset);
      add_sample(m, unit, y);
    }
  }
  return m;
}

std::pair<parameter_vector, rational> scenario_reader::read_sample() {
  std::optional<written_value> x;
  std::optional<rational> y;
  json_.read_object(
      {{
           {"x",
            [&](std::string_view) {
              if (json_.peek() != json_kind::array)
                json_.fail_type("x", "an array of exact numbers (the token's features)");
              x = read_value("x");
            }},
           {"y", [&](std::string_view) { y = json_.exact("y"); }},
       },
       "in a token (a vector-model token has x and y)",
       {{{"x", "y"}, "a vector-model token needs both \"x\" (features) and \"y\" (target)", std::nullopt}}});
  return {std::move(x->values), std::move(*y)};
}

}  // namespace normcheck::detail
