// The scenario document itself: its top-level members, θ and other parameter values, the loss scale and
// the optimizer, then what depends on the whole document (the model's form, the work, W, faults, claims).

#include "scenario_reader.hpp"

namespace normcheck::detail {

namespace {

constexpr std::string_view top_level_keys =
    "format, description, world_size, theta, initial_sync, loss_scale, reducer, optimizer, steps, faults, "
    "expect, expect_error";

}  // namespace

void scenario_reader::fail_at(std::uint64_t offset, std::string message, error_code code) {
  json_.fail(code, std::move(message), offset);
}

scenario scenario_reader::read() {
  if (json_.peek() != json_kind::object) json_.fail_type("a normcheck-scenario/1 document", "a JSON object");
  const object_shape document{
      {
          {"format", [&](std::string_view) { json_.format(scenario_format_name); }},
          {"description", [&](std::string_view) { result_.description = std::string(json_.text("description")); }},
          {"world_size",
           [&](std::string_view) {
             world_size_offset_ = json_.value_offset();
             declared_world_size_ = json_.integer("world_size", 1, scenario_max_world_size, error_code::limit_exceeded);
           }},
          {"theta", [&](std::string_view) { theta_ = read_value("theta"); }},
          {"initial_sync", [&](std::string_view) { result_.initial_sync = json_.flag("initial_sync"); }},
          {"loss_scale", [&](std::string_view) { read_loss_scale(); }},
          {"reducer",
           [&](std::string_view) {
             result_.reducer = json_.named("reducer", reducer_from_name, reducer_alternatives());
           }},
          {"optimizer",
           [&](std::string_view) {
             optimizer_offset_ = json_.value_offset();
             read_optimizer();
           }},
          {"steps",
           [&](std::string_view) {
             steps_offset_ = json_.value_offset();
             read_steps();
           }},
          {"faults", [&](std::string_view) { read_faults(); }},
          {"expect", [&](std::string_view) { read_expect(); }},
          {"expect_error", [&](std::string_view) { result_.expect_error = json_.expected_error(); }},
      },
      "(a normcheck-scenario/1 document has " + std::string(top_level_keys) + ")",
      {
          {{"format"}, "missing key \"format\": a scenario declares \"format\": \"normcheck-scenario/1\"", 0},
          {{"theta"}, "missing key \"theta\": the initial parameters (a number, or an array for a vector model)", 0},
          {{"optimizer"}, "missing key \"optimizer\": at least {\"lr\": ...}", 0},
          {{"steps"}, "missing key \"steps\": a non-empty array of steps", 0},
      }};
  const members_seen seen = json_.read_members(document);
  json_.finish();
  json_.require(document, seen, 0);
  settle_model();
  settle_work();
  settle_world_size();
  settle_faults();
  settle_expectations();
  return std::move(result_);
}

written_value scenario_reader::read_value(std::string_view what) {
  written_value value;
  value.offset = json_.value_offset();
  if (json_.peek() == json_kind::array) {
    value.is_array = true;
    json_.begin_array();
    while (json_.next_element()) {
      if (value.values.size() == scenario_max_dimension)
        fail_at(json_.value_offset(),
                std::string(what) + " has more than " + std::to_string(scenario_max_dimension) +
                    " coordinates, the limit of a scenario",
                error_code::limit_exceeded);
      value.values.push_back(json_.exact("each coordinate of " + std::string(what)));
    }
    if (value.values.empty()) fail_at(value.offset, std::string(what) + " must not be an empty array");
    return value;
  }
  if (json_.peek() != json_kind::number && json_.peek() != json_kind::string)
    json_.fail_type(what, "an exact number, or an array of exact numbers for a vector model");
  value.values.push_back(json_.exact(what));
  return value;
}

void scenario_reader::read_loss_scale() {
  const std::uint64_t offset = json_.value_offset();
  constexpr std::string_view allowed = "local_mean, local_sum, scaled_sum, global_share or microbatch_mean";
  if (json_.peek() != json_kind::string) json_.fail_type("loss_scale", "a strategy name");
  std::string_view value = json_.string_value();
  const std::optional<strategy> s = strategy_from_name(value);
  if (!s || *s == strategy::global_mean)
    fail_at(offset, "loss_scale \"" + std::string(value) +
                        "\" is not a local scalar a rank can backpropagate: expected " + std::string(allowed) +
                        (s ? " (global_mean is the objective itself, which needs every rank's losses)" : ""));
  result_.loss_scale = *s;
}

void scenario_reader::read_optimizer() {
  if (json_.peek() != json_kind::object)
    json_.fail_type("optimizer", "an object such as {\"lr\": \"1/10\", \"momentum\": \"9/10\"}");
  optimizer_config& config = result_.optimizer;
  std::uint64_t decay_offset = 0;
  const object_shape optimizer{
      {
          {"lr", [&](std::string_view) { read_learning_rate(); }},
          {"lr_decay",
           [&](std::string_view) {
             decay_offset = json_.value_offset();
             read_decay();
           }},
          {"momentum", [&](std::string_view key) { config.momentum = json_.non_negative(key); }},
          {"weight_decay", [&](std::string_view key) { config.weight_decay = json_.non_negative(key); }},
          {"clip_value", [&](std::string_view key) { config.clip_value = json_.non_negative(key); }},
          {"clip_norm", [&](std::string_view key) { config.clip_norm = json_.non_negative(key); }},
      },
      "in optimizer (it has lr, lr_decay, momentum, weight_decay, clip_value, clip_norm)",
      {{{"lr"}, "optimizer needs \"lr\": a learning rate, or a list of one per step", optimizer_offset_}}};
  json_.read_object(optimizer);
  if (config.schedule.decay_every && config.schedule.rates.size() > 1)
    fail_at(decay_offset, "lr_decay applies to a single lr, not to a list of rates: give one or the other");
}

void scenario_reader::read_learning_rate() {
  std::vector<rational>& rates = result_.optimizer.schedule.rates;
  const std::uint64_t lr_offset = json_.value_offset();
  if (json_.peek() != json_kind::array) {
    rates.push_back(json_.non_negative("lr"));
    return;
  }
  json_.begin_array();
  while (json_.next_element()) {
    if (rates.size() == scenario_max_steps)
      fail_at(json_.value_offset(), "lr lists more than " + std::to_string(scenario_max_steps) + " rates",
              error_code::limit_exceeded);
    rates.push_back(json_.non_negative("each learning rate"));
  }
  if (rates.empty()) fail_at(lr_offset, "lr must not be an empty list");
}

void scenario_reader::read_decay() {
  if (json_.peek() != json_kind::object) json_.fail_type("lr_decay", "an object {\"every\": k, \"gamma\": g} (StepLR)");
  lr_schedule& schedule = result_.optimizer.schedule;
  json_.read_object(
      {{
           {"every",
            [&](std::string_view) { schedule.decay_every = json_.integer("lr_decay.every", 1, scenario_max_steps); }},
           {"gamma", [&](std::string_view) { schedule.gamma = json_.non_negative("lr_decay.gamma"); }},
       },
       "in lr_decay (it has every and gamma)",
       {{{"every", "gamma"}, "lr_decay needs both \"every\" and \"gamma\"", std::nullopt}}});
}

// A written value must have the model's form: a number for the scalar model, d numbers otherwise.
void scenario_reader::require_model_form(const written_value& value, std::string_view what) {
  if (result_.scalar_model && value.is_array)
    fail_at(value.offset, std::string(what) + " must be a number: theta is a number, so the model is scalar");
  if (!result_.scalar_model && (!value.is_array || value.values.size() != result_.dimension))
    fail_at(value.offset, std::string(what) + " must be an array of " + std::to_string(result_.dimension) +
                              " numbers, like theta");
}

void scenario_reader::settle_model() {
  result_.scalar_model = !theta_->is_array;
  result_.dimension = theta_->values.size();
  result_.theta = theta_->values;
  if (token_form_) {
    if (*token_form_ != result_.scalar_model)
      fail_at(token_offset_, result_.scalar_model
                                 ? "theta is a number (a scalar model) but tokens are {\"x\", \"y\"} samples: write "
                                   "tokens as target values, or theta as an array"
                                 : "theta is an array (a vector model) but tokens are numbers: write each token as "
                                   "{\"x\": [...], \"y\": v}");
    if (token_dimension_ != result_.dimension)
      fail_at(token_offset_, "tokens have " + std::to_string(token_dimension_) + " features but theta has " +
                                 std::to_string(result_.dimension) + " coordinates");
  }
  const std::size_t d = result_.dimension;
  for (step_batch& step : result_.steps)
    for (rank_batch& rank : step.ranks)
      for (microbatch_moments& m : rank.microbatches)
        if (m.gram.empty()) {
          m.gram.assign(d * d, rational(0));
          m.target_moment.assign(d, rational(0));
        }
}

void scenario_reader::settle_work() {
  std::uint64_t microbatches = 0;
  for (const step_batch& step : result_.steps)
    for (const rank_batch& rank : step.ranks) microbatches += rank.microbatches.size();
  const std::uint64_t work = result_.steps.size() * microbatches * result_.dimension * result_.dimension;
  if (work > scenario_max_work)
    fail_at(steps_offset_,
            "the scenario asks for " + std::to_string(work) + " units of work (steps × microbatches over all steps × "
                "parameters²), more than the limit of " + std::to_string(scenario_max_work) +
                ": exact values grow with every step, so give fewer steps, ranks or parameters",
            error_code::limit_exceeded);
}

void scenario_reader::settle_world_size() {
  const std::size_t ranks = result_.world_size();
  if (declared_world_size_ && *declared_world_size_ != ranks)
    fail_at(world_size_offset_,
            "world_size is " + std::to_string(*declared_world_size_) + " but the steps list " + std::to_string(ranks) +
                " ranks: W must be the size of the group in the reduction",
            error_code::world_size_mismatch);
}

void scenario_reader::settle_faults() {
  const std::size_t world_size = result_.world_size();
  const std::uint64_t steps = result_.steps.size();
  const optimizer_config& optimizer = result_.optimizer;
  std::vector<bool> initial_seen(world_size, false);
  for (pending_fault& pending : faults_) {
    fault& item = pending.item;
    const std::string name(fault_name(item.kind));
    const std::string& value_key = pending.value_key;
    if (item.rank >= world_size)
      fail_at(pending.offset, "fault " + name + " names rank " + std::to_string(item.rank) + " but W = " +
                                  std::to_string(world_size) + " (ranks 0 to " + std::to_string(world_size - 1) + ")");
    const bool is_initial = item.kind == fault_kind::initial_parameters;
    if (is_initial && pending.has_step)
      fail_at(pending.offset, "initial_parameters acts at start-up and takes no \"step\"");
    if (!is_initial && !pending.has_step)
      fail_at(pending.offset, "fault " + name + " needs \"step\": the step (from 1) it acts at");
    if (item.step > steps)
      fail_at(pending.offset, "fault " + name + " acts at step " + std::to_string(item.step) +
                                  " but the scenario has " + std::to_string(steps) + " steps");
    const std::string wanted = is_initial ? "theta" : item.kind == fault_kind::optimizer_state ? "momentum" : "";
    if (wanted.empty() && pending.has_value)
      fail_at(pending.offset, "fault " + name + " sets no value: remove \"" + value_key + "\"");
    if (!wanted.empty() && (!pending.has_value || value_key != wanted))
      fail_at(pending.offset, "fault " + name + " needs \"" + wanted + "\": the value it sets");
    if (pending.has_value) {
      require_model_form(pending.value, "the fault's " + value_key);
      item.value = pending.value.values;
    }
    switch (item.kind) {
      case fault_kind::initial_parameters:
        if (initial_seen[item.rank])
          fail_at(pending.offset, "rank " + std::to_string(item.rank) + " has two initial_parameters faults");
        initial_seen[item.rank] = true;
        break;
      case fault_kind::optimizer_state:
        if (optimizer.momentum == 0)
          fail_at(pending.offset, "optimizer_state restores a momentum buffer, but momentum is 0: SGD without "
                                  "momentum keeps no state");
        break;
      case fault_kind::local_clipping:
        if (!optimizer.clip_value && !optimizer.clip_norm)
          fail_at(pending.offset, "local_clipping needs clipping: set optimizer.clip_value or optimizer.clip_norm");
        break;
      case fault_kind::scheduler_step:
        if (!optimizer.schedule.has_scheduler())
          fail_at(pending.offset, "scheduler_step needs a scheduler: give optimizer.lr as a list or set "
                                  "optimizer.lr_decay (a constant learning rate has none)");
        break;
      case fault_kind::skipped_collective: break;
    }
    result_.faults.push_back(std::move(item));
  }
}

void scenario_reader::settle_expectations() {
  if (!saw_final_theta_) return;
  if (final_theta_.size() != result_.world_size())
    fail_at(final_theta_offset_, "final_theta lists " + std::to_string(final_theta_.size()) + " values for " +
                                     std::to_string(result_.world_size()) + " ranks");
  std::vector<parameter_vector> values;
  for (const written_value& value : final_theta_) {
    require_model_form(value, "each final theta");
    values.push_back(value.values);
  }
  result_.expect.final_theta = std::move(values);
}

}  // namespace normcheck::detail
