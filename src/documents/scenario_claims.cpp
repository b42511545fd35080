// What a scenario injects and what it claims: the faults (checked against the whole document once it is
// read), and the expectations about the run (agreement, first divergence, the reference, a halt, the
// final parameters).

#include "scenario_reader.hpp"

namespace normcheck::detail {

void scenario_reader::read_faults() {
  if (json_.peek() != json_kind::array) json_.fail_type("faults", "an array of fault objects");
  json_.begin_array();
  while (json_.next_element()) faults_.push_back(read_fault());
}

pending_fault scenario_reader::read_fault() {
  pending_fault pending;
  pending.offset = json_.value_offset();
  if (json_.peek() != json_kind::object)
    json_.fail_type("each fault", "an object such as {\"kind\": \"scheduler_step\", \"rank\": 1, \"step\": 2}");
  auto read_fault_value = [&](std::string_view key) {
    if (pending.has_value)
      json_.fail(error_code::schema_error, "a fault sets one value: theta or momentum", json_.key_offset());
    pending.has_value = true;
    pending.value_key = std::string(key);
    pending.value = read_value(key);
  };
  json_.read_object({
      {
          {"kind",
           [&](std::string_view) {
             pending.item.kind = json_.named(
                 "fault", [](std::string_view name) { return fault_names.find(name); }, fault_names.alternatives());
           }},
          {"rank", [&](std::string_view) { pending.item.rank = json_.integer("rank", 0, scenario_max_world_size); }},
          {"step",
           [&](std::string_view) {
             pending.item.step = json_.integer("step", 1, scenario_max_steps);
             pending.has_step = true;
           }},
          {"theta", read_fault_value},
          {"momentum", read_fault_value},
      },
      "in a fault (a fault has kind, rank, step, theta or momentum)",
      {{{"kind", "rank"}, "a fault needs \"kind\" and \"rank\"", std::nullopt}}});
  return pending;
}

std::vector<std::size_t> scenario_reader::read_rank_list(std::string_view what) {
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

void scenario_reader::read_expect() {
  if (json_.peek() != json_kind::object) json_.fail_type("expect", "an object of claims about the run");
  result_.has_expect = true;
  scenario_expectations& expect = result_.expect;
  json_.read_object({
      {
          {"replicas_agree", [&](std::string_view key) { expect.replicas_agree = json_.flag(key); }},
          {"first_divergence", [&](std::string_view) { expect.first_divergence = read_divergence_claim(); }},
          {"equals_reference", [&](std::string_view key) { expect.equals_reference = json_.flag(key); }},
          {"first_reference_difference",
           [&](std::string_view) { expect.first_reference_difference = read_reference_claim(); }},
          {"halt", [&](std::string_view) { expect.halt = read_halt_claim(); }},
          {"final_theta", [&](std::string_view) { read_final_theta(); }},
      },
      "in expect (it has replicas_agree, first_divergence, equals_reference, first_reference_difference, halt, "
      "final_theta)",
      {}});
}

void scenario_reader::read_final_theta() {
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
}

std::optional<divergence_claim> scenario_reader::read_divergence_claim() {
  if (json_.peek() == json_kind::null) {
    json_.null_value();
    return std::nullopt;
  }
  if (json_.peek() != json_kind::object)
    json_.fail_type("first_divergence", "null or {\"step\": s, \"rank\": r, \"state\": \"theta\"}");
  divergence_claim claim;
  json_.read_object(
      {{
           {"step", [&](std::string_view) { claim.step = json_.integer("step", 0, scenario_max_steps); }},
           {"rank", [&](std::string_view) { claim.rank = json_.integer("rank", 0, scenario_max_world_size); }},
           {"state",
            [&](std::string_view) {
              claim.part = json_.named("state", state_part_from_name, part_names.alternatives());
            }},
       },
       "in first_divergence (it has step, rank, state)",
       {{{"step", "rank", "state"}, "first_divergence needs step, rank and state", std::nullopt}}});
  return claim;
}

std::optional<reference_claim> scenario_reader::read_reference_claim() {
  if (json_.peek() == json_kind::null) {
    json_.null_value();
    return std::nullopt;
  }
  if (json_.peek() != json_kind::object)
    json_.fail_type("first_reference_difference", "null or {\"step\": s, \"rank\": r}");
  reference_claim claim;
  json_.read_object({
      {
          {"step", [&](std::string_view) { claim.step = json_.integer("step", 0, scenario_max_steps); }},
          {"rank", [&](std::string_view) { claim.rank = json_.integer("rank", 0, scenario_max_world_size); }},
      },
      "in first_reference_difference (it has step and rank)",
      {{{"step", "rank"}, "first_reference_difference needs step and rank", std::nullopt}}});
  return claim;
}

std::optional<halt_claim> scenario_reader::read_halt_claim() {
  if (json_.peek() == json_kind::null) {
    json_.null_value();
    return std::nullopt;
  }
  if (json_.peek() != json_kind::object)
    json_.fail_type("halt", "null or {\"step\": s, \"cause\": \"skipped_collective\", ...}");
  halt_claim claim;
  json_.read_object({
      {
          {"step", [&](std::string_view) { claim.step = json_.integer("step", 1, scenario_max_steps); }},
          {"cause",
           [&](std::string_view) {
             claim.cause = json_.named("cause", halt_cause_from_name, cause_names.alternatives());
           }},
          {"waiting", [&](std::string_view key) { claim.waiting = read_rank_list(key); }},
          {"missing", [&](std::string_view key) { claim.missing = read_rank_list(key); }},
          {"ranks", [&](std::string_view key) { claim.ranks = read_rank_list(key); }},
      },
      "in halt (it has step, cause, waiting, missing, ranks)",
      {{{"step", "cause"}, "halt needs step and cause", std::nullopt}}});
  return claim;
}

}  // namespace normcheck::detail
