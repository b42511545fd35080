#pragma once
// The reader of normcheck-scenario/1 documents (private to documents/scenario). Each object of the format
// is one `object_shape` (its keys, the reader of each, the keys it needs), read by the field reader; each
// member's reader validates its value where it stands, and what depends on other members (the model's
// dimension, W, the number of steps) is settled once the whole document is known. Its parts:
//   scenario_reader.cpp   the document, θ and values, the optimizer, and settling what depends on the whole
//   scenario_batches.cpp  the steps: ranks, microbatches and tokens (numbers, or {"x", "y"} samples)
//   scenario_claims.cpp   the faults and the expectations

#include "normcheck/core/names.hpp"
#include "normcheck/documents/field_reader.hpp"
#include "normcheck/documents/scenario.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace normcheck::detail {

inline constexpr name_table fault_names{std::array<std::pair<fault_kind, std::string_view>, 5>{{
    {fault_kind::initial_parameters, "initial_parameters"},
    {fault_kind::optimizer_state, "optimizer_state"},
    {fault_kind::local_clipping, "local_clipping"},
    {fault_kind::scheduler_step, "scheduler_step"},
    {fault_kind::skipped_collective, "skipped_collective"},
}}};

inline constexpr name_table part_names{std::array<std::pair<state_part, std::string_view>, 4>{{
    {state_part::theta, "theta"},
    {state_part::momentum, "momentum"},
    {state_part::scheduler, "scheduler"},
    {state_part::gradient, "gradient"},
}}};

inline constexpr name_table cause_names{std::array<std::pair<halt_cause, std::string_view>, 2>{{
    {halt_cause::skipped_collective, "skipped_collective"},
    {halt_cause::undefined_local_loss, "undefined_local_loss"},
}}};

/// A parameter value as written: a number (scalar form) or an array of numbers (vector form).
struct written_value {
  parameter_vector values;
  bool is_array = false;
  std::uint64_t offset = 0;
};

/// A fault as written, checked once the whole document is known (the model's form and the bounds).
struct pending_fault {
  fault item;
  bool has_step = false;
  bool has_value = false;
  std::string value_key;  ///< "theta" or "momentum", as written
  written_value value;
  std::uint64_t offset = 0;
};

/// Reads one scenario document.
class scenario_reader {
public:
  scenario_reader(std::string_view text, std::string source, const reader_limits& limits)
      : json_(text, std::move(source), limits) {}

  /// The scenario, or the first problem as an `error`.
  scenario read();

private:
  [[noreturn]] void fail_at(std::uint64_t offset, std::string message, error_code code = error_code::schema_error);

  // scenario_reader.cpp
  written_value read_value(std::string_view what);
  void read_loss_scale();
  void read_optimizer();
  void read_learning_rate();
  void read_decay();
  void require_model_form(const written_value& value, std::string_view what);
  void settle_model();
  void settle_work();
  void settle_world_size();
  void settle_faults();
  void settle_expectations();

  // scenario_batches.cpp
  void read_steps();
  void read_step();
  rank_batch read_rank();
  void note_token_form(bool scalar, std::size_t dimension, std::uint64_t offset);
  microbatch_moments read_tokens(std::string_view what);
  std::pair<parameter_vector, rational> read_sample();

  // scenario_claims.cpp
  void read_faults();
  pending_fault read_fault();
  std::vector<std::size_t> read_rank_list(std::string_view what);
  void read_expect();
  void read_final_theta();
  std::optional<divergence_claim> read_divergence_claim();
  std::optional<reference_claim> read_reference_claim();
  std::optional<halt_claim> read_halt_claim();

  field_reader json_;
  scenario result_;
  std::optional<written_value> theta_;
  std::optional<std::uint64_t> declared_world_size_;
  std::uint64_t world_size_offset_ = 0;
  std::uint64_t optimizer_offset_ = 0;
  std::uint64_t steps_offset_ = 0;
  std::optional<bool> token_form_;  // true: numbers (scalar model)
  std::size_t token_dimension_ = 0;
  std::uint64_t token_offset_ = 0;
  std::vector<pending_fault> faults_;
  std::vector<written_value> final_theta_;
  std::uint64_t final_theta_offset_ = 0;
  bool saw_final_theta_ = false;
};

/// Adds one {"x", "y"} sample (or, for the scalar model, x = 1 and the target y) to a microbatch's moments.
void add_sample(microbatch_moments& m, const parameter_vector& x, const rational& y);

}  // namespace normcheck::detail
