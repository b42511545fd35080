#include "normcheck/documents/scenario.hpp"

#include "normcheck/core/counts.hpp"

#include "scenario_reader.hpp"

#include <algorithm>

namespace normcheck {

std::uint64_t rank_batch::valid_tokens() const {
  std::uint64_t total = 0;
  for (const microbatch_moments& m : microbatches) total = add_counts(total, m.valid_tokens);
  return total;
}

std::uint64_t step_batch::valid_tokens() const {
  std::uint64_t total = 0;
  for (const rank_batch& r : ranks) total = add_counts(total, r.valid_tokens());
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

std::string_view fault_name(fault_kind kind) noexcept { return detail::fault_names.name(kind); }

std::string_view state_part_name(state_part part) noexcept { return detail::part_names.name(part); }

std::optional<state_part> state_part_from_name(std::string_view name) noexcept { return detail::part_names.find(name); }

std::string_view halt_cause_name(halt_cause cause) noexcept { return detail::cause_names.name(cause); }

std::optional<halt_cause> halt_cause_from_name(std::string_view name) noexcept {
  return detail::cause_names.find(name);
}

scenario read_scenario(std::string_view text, std::string source, const reader_limits& limits) {
  return detail::scenario_reader(text, std::move(source), limits).read();
}

}  // namespace normcheck
