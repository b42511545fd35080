#include "normcheck/documents/scenario.hpp"

#include "normcheck/core/names.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace normcheck {

namespace {

constexpr name_table fault_names{std::array<std::pair<fault_kind, std::string_view>, 5>{{
    {fault_kind::initial_parameters, "initial_parameters"},
    {fault_kind::optimizer_state, "optimizer_state"},
    {fault_kind::local_clipping, "local_clipping"},
    {fault_kind::scheduler_step, "scheduler_step"},
    {fault_kind::skipped_collective, "skipped_collective"},
}}};

constexpr name_table part_names{std::array<std::pair<state_part, std::string_view>, 4>{{
    {state_part::theta, "theta"},
    {state_part::momentum, "momentum"},
    {state_part::scheduler, "scheduler"},
    {state_part::gradient, "gradient"},
}}};

constexpr name_table cause_names{std::array<std::pair<halt_cause, std::string_view>, 2>{{
    {halt_cause::skipped_collective, "skipped_collective"},
    {halt_cause::undefined_local_loss, "undefined_local_loss"},
}}};

constexpr std::string_view top_level_keys =
    "format, description, world_size, theta, initial_sync, loss_scale, reducer, optimizer, steps, faults, "
    "expect, expect_error";

// A parameter value as written: a number (scalar form) or an array of numbers (vector form).
struct written_value {
  parameter_vector values;
  bool is_array = false;
  std::uint64_t offset = 0;
};

// What the reader must check once the whole document is known (the model's form and the bounds).
struct pending_fault {
  fault item;
  bool has_step = false;
  bool has_value = false;
  std::string value_key;  // "theta" or "momentum", as written
  written_value value;
  std::uint64_t offset = 0;
};

// Reads one document; each member's reader validates its value where it stands, and what depends on
// other members (the model's dimension, W, the number of steps) is checked at the end.
class scenario_reader {
public:
  scenario_reader(std::string_view text, std::string source, const reader_limits& limits)
      : json_(text, std::move(source), limits) {}

  scenario read() {
    if (json_.peek() != json_kind::object) json_.fail_type("a normcheck-scenario/1 document", "a JSON object");
    json_.begin_object();
    std::string_view key;
    bool saw_format = false;
    while (json_.next_member(key)) {
      if (key == "format") {
        json_.format(scenario_format_name);
        saw_format = true;
      } else if (key == "description") {
        result_.description = std::string(json_.text("description"));
      } else if (key == "world_size") {
        world_size_offset_ = json_.value_offset();
        declared_world_size_ = json_.integer("world_size", 1, scenario_max_world_size, error_code::limit_exceeded);
      } else if (key == "theta") {
        theta_ = read_value("theta");
      } else if (key == "initial_sync") {
        result_.initial_sync = json_.flag("initial_sync");
      } else if (key == "loss_scale") {
        read_loss_scale();
      } else if (key == "reducer") {
        result_.reducer = json_.named("reducer", reducer_from_name, reducer_alternatives());
      } else if (key == "optimizer") {
        optimizer_offset_ = json_.value_offset();
        read_optimizer();
      } else if (key == "steps") {
        steps_offset_ = json_.value_offset();
        read_steps();
      } else if (key == "faults") {
        read_faults();
      } else if (key == "expect") {
        read_expect();
      } else if (key == "expect_error") {
        result_.expect_error = json_.expected_error();
      } else {
        json_.fail_unknown_key(key, "(a normcheck-scenario/1 document has " + std::string(top_level_keys) + ")");
      }
    }
    json_.finish();
    if (!saw_format)
      fail_at(0, "missing key \"format\": a scenario declares \"format\": \"normcheck-scenario/1\"");
    if (!theta_) fail_at(0, "missing key \"theta\": the initial parameters (a number, or an array for a vector model)");
    if (!saw_optimizer_) fail_at(0, "missing key \"optimizer\": at least {\"lr\": ...}");
    if (result_.steps.empty()) fail_at(0, "missing key \"steps\": a non-empty array of steps");
    settle_model();
    settle_work();
    settle_world_size();
    settle_faults();
    settle_expectations();
    return std::move(result_);
  }

private:
  [[noreturn]] void fail_at(std::uint64_t offset, std::string message, error_code code = error_code::schema_error) {
    json_.fail(code, std::move(message), offset);
  }

  written_value read_value(std::string_view what) {
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


  void read_loss_scale() {
    const std::uint64_t offset = json_.value_offset();
    constexpr std::string_view allowed = "local_mean, local_sum, scaled_sum, global_share or microbatch_mean";
    if (json_.peek() != json_kind::string) json_.fail_type("loss_scale", "a strategy name");
    std::string_view value = json_.string_value();
    const std::optional<strategy> s = strategy_from_name(value);
    if (!s || *s == strategy::global_mean)
      fail_at(offset, "loss_scale \"" + std::string(value) + "\" is not a local scalar a rank can backpropagate: expected " +
                          std::string(allowed) +
                          (s ? " (global_mean is the objective itself, which needs every rank's losses)" : ""));
    result_.loss_scale = *s;
  }



  void read_optimizer() {
    if (json_.peek() != json_kind::object)
      json_.fail_type("optimizer", "an object such as {\"lr\": \"1/10\", \"momentum\": \"9/10\"}");
    json_.begin_object();
    saw_optimizer_ = true;
    optimizer_config& config = result_.optimizer;
    bool saw_lr = false;
    std::uint64_t decay_offset = 0;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "lr") {
        saw_lr = true;
        const std::uint64_t lr_offset = json_.value_offset();
        if (json_.peek() == json_kind::array) {
          json_.begin_array();
          while (json_.next_element()) {
            if (config.schedule.rates.size() == scenario_max_steps)
              fail_at(json_.value_offset(), "lr lists more than " + std::to_string(scenario_max_steps) + " rates",
                      error_code::limit_exceeded);
            config.schedule.rates.push_back(json_.non_negative("each learning rate"));
          }
          if (config.schedule.rates.empty()) fail_at(lr_offset, "lr must not be an empty list");
        } else {
          config.schedule.rates.push_back(json_.non_negative("lr"));
        }
      } else if (key == "lr_decay") {
        decay_offset = json_.value_offset();
        read_decay();
      } else if (key == "momentum") {
        config.momentum = json_.non_negative("momentum");
      } else if (key == "weight_decay") {
        config.weight_decay = json_.non_negative("weight_decay");
      } else if (key == "clip_value") {
        config.clip_value = json_.non_negative("clip_value");
      } else if (key == "clip_norm") {
        config.clip_norm = json_.non_negative("clip_norm");
      } else {
        json_.fail_unknown_key(key, "in optimizer (it has lr, lr_decay, momentum, weight_decay, clip_value, clip_norm)");
      }
    }
    if (!saw_lr) fail_at(optimizer_offset_, "optimizer needs \"lr\": a learning rate, or a list of one per step");
    if (config.schedule.decay_every && config.schedule.rates.size() > 1)
      fail_at(decay_offset, "lr_decay applies to a single lr, not to a list of rates: give one or the other");
  }

  void read_decay() {
    if (json_.peek() != json_kind::object)
      json_.fail_type("lr_decay", "an object {\"every\": k, \"gamma\": g} (StepLR)");
    const std::uint64_t offset = json_.value_offset();
    json_.begin_object();
    bool saw_every = false;
    bool saw_gamma = false;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "every") {
        result_.optimizer.schedule.decay_every = json_.integer("lr_decay.every", 1, scenario_max_steps);
        saw_every = true;
      } else if (key == "gamma") {
        result_.optimizer.schedule.gamma = json_.non_negative("lr_decay.gamma");
        saw_gamma = true;
      } else {
        json_.fail_unknown_key(key, "in lr_decay (it has every and gamma)");
      }
    }
    if (!saw_every || !saw_gamma) fail_at(offset, "lr_decay needs both \"every\" and \"gamma\"");
  }

  void read_steps() {
    if (json_.peek() != json_kind::array) json_.fail_type("steps", "an array of steps, each {\"ranks\": [...]}");
    json_.begin_array();
    while (json_.next_element()) read_step();
    if (result_.steps.empty()) fail_at(steps_offset_, "steps must not be empty");
  }

  void read_step() {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("each step", "an object {\"ranks\": [...]} with an optional \"repeat\"");
    json_.begin_object();
    step_batch step;
    bool saw_ranks = false;
    std::uint64_t repeat = 1;
    std::uint64_t repeat_offset = 0;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "ranks") {
        saw_ranks = true;
        const std::uint64_t ranks_offset = json_.value_offset();
        if (json_.peek() != json_kind::array) json_.fail_type("ranks", "an array with one object per rank");
        json_.begin_array();
        while (json_.next_element()) {
          if (step.ranks.size() == scenario_max_world_size)
            fail_at(json_.value_offset(),
                    "a step lists more than " + std::to_string(scenario_max_world_size) + " ranks, the limit of a scenario",
                    error_code::limit_exceeded);
          step.ranks.push_back(read_rank());
        }
        if (step.ranks.empty()) fail_at(ranks_offset, "ranks must not be empty: list every rank of the step");
      } else if (key == "repeat") {
        repeat_offset = json_.value_offset();
        repeat = json_.integer("repeat", 1, scenario_max_steps, error_code::limit_exceeded);
      } else {
        json_.fail_unknown_key(key, "in a step (a step has ranks and repeat)");
      }
    }
    if (!saw_ranks) fail_at(offset, "a step needs \"ranks\": one object per rank");
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

  rank_batch read_rank() {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("each rank", "an object with \"targets\" or \"microbatches\", e.g. {\"targets\": [0, 2]}");
    json_.begin_object();
    rank_batch rank;
    bool saw_targets = false;
    bool saw_microbatches = false;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "targets") {
        saw_targets = true;
        rank.microbatches.push_back(read_tokens("targets"));
      } else if (key == "microbatches") {
        saw_microbatches = true;
        const std::uint64_t list_offset = json_.value_offset();
        if (json_.peek() != json_kind::array) json_.fail_type("microbatches", "a non-empty array of token arrays");
        json_.begin_array();
        while (json_.next_element()) rank.microbatches.push_back(read_tokens("each microbatch"));
        if (rank.microbatches.empty())
          fail_at(list_offset, "microbatches must not be empty: a rank takes part with at least one microbatch "
                               "(an empty one, [], if it holds no token)");
      } else {
        json_.fail_unknown_key(key, "in a rank (a rank has \"targets\" or \"microbatches\")");
      }
    }
    if (saw_targets == saw_microbatches)
      fail_at(offset, saw_targets ? "a rank has both \"targets\" and \"microbatches\": give exactly one"
                                  : "a rank needs \"targets\" (one microbatch) or \"microbatches\" (several)");
    return rank;
  }

  // The token's form fixes the model: a number is a scalar-model target, {"x": [...], "y": v} a
  // vector-model sample. Every token of the document must have the form and dimension of the first.
  void note_token_form(bool scalar, std::size_t dimension, std::uint64_t offset) {
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

  microbatch_moments read_tokens(std::string_view what) {
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

  std::pair<parameter_vector, rational> read_sample() {
    const std::uint64_t offset = json_.value_offset();
    json_.begin_object();
    std::optional<written_value> x;
    std::optional<rational> y;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "x") {
        if (json_.peek() != json_kind::array) json_.fail_type("x", "an array of exact numbers (the token's features)");
        x = read_value("x");
      } else if (key == "y") {
        y = json_.exact("y");
      } else {
        json_.fail_unknown_key(key, "in a token (a vector-model token has x and y)");
      }
    }
    if (!x || !y) fail_at(offset, "a vector-model token needs both \"x\" (features) and \"y\" (target)");
    return {std::move(x->values), std::move(*y)};
  }

  void read_faults() {
    if (json_.peek() != json_kind::array) json_.fail_type("faults", "an array of fault objects");
    json_.begin_array();
    while (json_.next_element()) faults_.push_back(read_fault());
  }

  pending_fault read_fault() {
    pending_fault pending;
    pending.offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("each fault", "an object such as {\"kind\": \"scheduler_step\", \"rank\": 1, \"step\": 2}");
    json_.begin_object();
    bool saw_kind = false;
    bool saw_rank = false;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "kind") {
        pending.item.kind =
            json_.named("fault", [](std::string_view name) { return fault_names.find(name); }, fault_names.alternatives());
        saw_kind = true;
      } else if (key == "rank") {
        pending.item.rank = json_.integer("rank", 0, scenario_max_world_size);
        saw_rank = true;
      } else if (key == "step") {
        pending.item.step = json_.integer("step", 1, scenario_max_steps);
        pending.has_step = true;
      } else if (key == "theta" || key == "momentum") {
        if (pending.has_value)
          json_.fail(error_code::schema_error, "a fault sets one value: theta or momentum", json_.key_offset());
        pending.has_value = true;
        pending.value_key = std::string(key);
        pending.value = read_value(key);
      } else {
        json_.fail_unknown_key(key, "in a fault (a fault has kind, rank, step, theta or momentum)");
      }
    }
    if (!saw_kind || !saw_rank) fail_at(pending.offset, "a fault needs \"kind\" and \"rank\"");
    return pending;
  }

  std::vector<std::size_t> read_rank_list(std::string_view what) {
    if (json_.peek() != json_kind::array) json_.fail_type(what, "an array of ranks");
    json_.begin_array();
    std::vector<std::size_t> ranks;
    while (json_.next_element()) {
      if (ranks.size() == scenario_max_world_size)
        fail_at(json_.value_offset(), std::string(what) + " lists more ranks than a scenario can have",
                error_code::limit_exceeded);
      ranks.push_back(json_.integer("each rank", 0, scenario_max_world_size));
    }
    return ranks;
  }

  void read_expect() {
    if (json_.peek() != json_kind::object) json_.fail_type("expect", "an object of claims about the run");
    json_.begin_object();
    result_.has_expect = true;
    scenario_expectations& expect = result_.expect;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "replicas_agree" || key == "equals_reference") {
        (key == "replicas_agree" ? expect.replicas_agree : expect.equals_reference) = json_.flag(key);
      } else if (key == "first_divergence") {
        expect.first_divergence = read_divergence_claim();
      } else if (key == "first_reference_difference") {
        expect.first_reference_difference = read_reference_claim();
      } else if (key == "halt") {
        expect.halt = read_halt_claim();
      } else if (key == "final_theta") {
        final_theta_offset_ = json_.value_offset();
        if (json_.peek() != json_kind::array) json_.fail_type("final_theta", "an array with one value per rank");
        json_.begin_array();
        while (json_.next_element()) {
          if (final_theta_.size() == scenario_max_world_size)
            fail_at(json_.value_offset(), "final_theta lists more ranks than a scenario can have",
                    error_code::limit_exceeded);
          final_theta_.push_back(read_value("each final theta"));
        }
        saw_final_theta_ = true;
      } else {
        json_.fail_unknown_key(key, "in expect (it has replicas_agree, first_divergence, equals_reference, first_reference_difference, halt, final_theta)");
      }
    }
  }

  std::optional<divergence_claim> read_divergence_claim() {
    if (json_.peek() == json_kind::null) {
      json_.null_value();
      return std::nullopt;
    }
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("first_divergence", "null or {\"step\": s, \"rank\": r, \"state\": \"theta\"}");
    json_.begin_object();
    divergence_claim claim;
    int seen = 0;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "step") {
        claim.step = json_.integer("step", 0, scenario_max_steps);
      } else if (key == "rank") {
        claim.rank = json_.integer("rank", 0, scenario_max_world_size);
      } else if (key == "state") {
        claim.part = json_.named("state", state_part_from_name, part_names.alternatives());
      } else {
        json_.fail_unknown_key(key, "in first_divergence (it has step, rank, state)");
      }
      ++seen;
    }
    if (seen != 3) fail_at(offset, "first_divergence needs step, rank and state");
    return claim;
  }

  std::optional<reference_claim> read_reference_claim() {
    if (json_.peek() == json_kind::null) {
      json_.null_value();
      return std::nullopt;
    }
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("first_reference_difference", "null or {\"step\": s, \"rank\": r}");
    json_.begin_object();
    reference_claim claim;
    int seen = 0;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "step") claim.step = json_.integer("step", 0, scenario_max_steps);
      else if (key == "rank") claim.rank = json_.integer("rank", 0, scenario_max_world_size);
      else
        json_.fail_unknown_key(key, "in first_reference_difference (it has step and rank)");
      ++seen;
    }
    if (seen != 2) fail_at(offset, "first_reference_difference needs step and rank");
    return claim;
  }

  std::optional<halt_claim> read_halt_claim() {
    if (json_.peek() == json_kind::null) {
      json_.null_value();
      return std::nullopt;
    }
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("halt", "null or {\"step\": s, \"cause\": \"skipped_collective\", ...}");
    json_.begin_object();
    halt_claim claim;
    bool saw_step = false;
    bool saw_cause = false;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "step") {
        claim.step = json_.integer("step", 1, scenario_max_steps);
        saw_step = true;
      } else if (key == "cause") {
        claim.cause = json_.named("cause", halt_cause_from_name, cause_names.alternatives());
        saw_cause = true;
      } else if (key == "waiting") {
        claim.waiting = read_rank_list("waiting");
      } else if (key == "missing") {
        claim.missing = read_rank_list("missing");
      } else if (key == "ranks") {
        claim.ranks = read_rank_list("ranks");
      } else {
        json_.fail_unknown_key(key, "in halt (it has step, cause, waiting, missing, ranks)");
      }
    }
    if (!saw_step || !saw_cause) fail_at(offset, "halt needs step and cause");
    return claim;
  }


  // A written value must have the model's form: a number for the scalar model, d numbers otherwise.
  void require_model_form(const written_value& value, std::string_view what) {
    if (result_.scalar_model && value.is_array)
      fail_at(value.offset, std::string(what) + " must be a number: theta is a number, so the model is scalar");
    if (!result_.scalar_model && (!value.is_array || value.values.size() != result_.dimension))
      fail_at(value.offset, std::string(what) + " must be an array of " + std::to_string(result_.dimension) +
                                " numbers, like theta");
  }

  void settle_model() {
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

  void settle_work() {
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

  void settle_world_size() {
    const std::size_t ranks = result_.world_size();
    if (declared_world_size_ && *declared_world_size_ != ranks)
      fail_at(world_size_offset_,
              "world_size is " + std::to_string(*declared_world_size_) + " but the steps list " + std::to_string(ranks) +
                  " ranks: W must be the size of the group in the reduction",
              error_code::world_size_mismatch);
  }

  void settle_faults() {
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

  void settle_expectations() {
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

  field_reader json_;
  scenario result_;
  std::optional<written_value> theta_;
  std::optional<std::uint64_t> declared_world_size_;
  std::uint64_t world_size_offset_ = 0;
  std::uint64_t optimizer_offset_ = 0;
  std::uint64_t steps_offset_ = 0;
  bool saw_optimizer_ = false;
  std::optional<bool> token_form_;  // true: numbers (scalar model)
  std::size_t token_dimension_ = 0;
  std::uint64_t token_offset_ = 0;
  std::vector<pending_fault> faults_;
  std::vector<written_value> final_theta_;
  std::uint64_t final_theta_offset_ = 0;
  bool saw_final_theta_ = false;
};

}  // namespace

std::uint64_t rank_batch::valid_tokens() const {
  std::uint64_t total = 0;
  for (const microbatch_moments& m : microbatches) total += m.valid_tokens;
  return total;
}

std::uint64_t step_batch::valid_tokens() const {
  std::uint64_t total = 0;
  for (const rank_batch& r : ranks) total += r.valid_tokens();
  return total;
}

bool lr_schedule::has_scheduler() const { return rates.size() > 1 || decay_every.has_value(); }

rational lr_schedule::rate(std::uint64_t position) const {
  rational value = rates[std::min<std::uint64_t>(position, rates.size() - 1)];
  if (decay_every) {
    const std::uint64_t decays = position / *decay_every;
    for (std::uint64_t i = 0; i < decays; ++i) value *= gamma;
  }
  return value;
}

std::string_view fault_name(fault_kind kind) noexcept { return fault_names.name(kind); }

std::string_view state_part_name(state_part part) noexcept { return part_names.name(part); }

std::optional<state_part> state_part_from_name(std::string_view name) noexcept { return part_names.find(name); }

std::string_view halt_cause_name(halt_cause cause) noexcept { return cause_names.name(cause); }

std::optional<halt_cause> halt_cause_from_name(std::string_view name) noexcept { return cause_names.find(name); }

scenario read_scenario(std::string_view text, std::string source, const reader_limits& limits) {
  return scenario_reader(text, std::move(source), limits).read();
}

}  // namespace normcheck
