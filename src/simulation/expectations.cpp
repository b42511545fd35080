#include "normcheck/simulation/expectations.hpp"

#include "normcheck/io/text.hpp"
#include "normcheck/simulation/simulation_report.hpp"

#include <algorithm>

namespace normcheck {

namespace {

std::string divergence_claim_text(std::uint64_t step, std::size_t rank, state_part part) {
  return "step " + std::to_string(step) + ", rank " + std::to_string(rank) + ", " + std::string(state_part_name(part));
}

bool same_ranks(const std::optional<std::vector<std::size_t>>& claimed, const std::vector<std::size_t>& actual) {
  if (!claimed) return true;
  std::vector<std::size_t> sorted = *claimed;
  std::sort(sorted.begin(), sorted.end());
  return sorted == actual;
}

std::string actual_halt_text(const simulation& run) {
  if (!run.stopped) return "the run completes every step";
  const halt& h = *run.stopped;
  std::string out = "step " + std::to_string(h.step) + ", " + std::string(halt_cause_name(h.cause));
  if (h.cause == halt_cause::skipped_collective)
    out += ", waiting [" + join_ranks(h.waiting) + "], missing [" + join_ranks(h.missing) + "]";
  else
    out += ", ranks [" + join_ranks(h.ranks) + "]";
  return out;
}

std::string claimed_halt_text(const halt_claim& claim) {
  std::string out = "step " + std::to_string(claim.step) + ", " + std::string(halt_cause_name(claim.cause));
  if (claim.waiting) out += ", waiting [" + join_ranks(*claim.waiting) + "]";
  if (claim.missing) out += ", missing [" + join_ranks(*claim.missing) + "]";
  if (claim.ranks) out += ", ranks [" + join_ranks(*claim.ranks) + "]";
  return out;
}

}  // namespace

std::vector<std::string> unmet_expectations(const scenario& s, const simulation& run) {
  std::vector<std::string> failures;
  scenario_expectations expect = s.expect;
  if (!s.has_expect) {
    expect.replicas_agree = true;
    expect.equals_reference = true;
  }
  auto verdict = [](bool value) { return value ? std::string("true") : std::string("false"); };
  if (expect.replicas_agree && *expect.replicas_agree != run.replicas_agree())
    failures.push_back("expect replicas_agree = " + verdict(*expect.replicas_agree) + ", but " + replicas_text(s, run) +
                       (run.stopped ? "; " + halt_text(*run.stopped) : ""));
  if (expect.first_divergence) {
    const std::optional<divergence_claim>& claim = *expect.first_divergence;
    const std::optional<divergence>& actual = run.first_divergence;
    const bool held = claim ? actual && actual->step == claim->step && actual->rank() == claim->rank &&
                                  actual->part == claim->part
                            : !actual;
    if (!held)
      failures.push_back("expect first_divergence = " +
                         (claim ? divergence_claim_text(claim->step, claim->rank, claim->part) : std::string("null")) +
                         ", but it is " +
                         (actual ? divergence_claim_text(actual->step, actual->rank(), actual->part)
                                 : std::string("null (replicas never differ)")));
  }
  if (expect.equals_reference && *expect.equals_reference != run.equals_reference())
    failures.push_back("expect equals_reference = " + verdict(*expect.equals_reference) + ", but " +
                       reference_text(run) + (run.stopped ? "; " + halt_text(*run.stopped) : ""));
  if (expect.first_reference_difference) {
    const std::optional<reference_claim>& claim = *expect.first_reference_difference;
    const std::optional<reference_difference>& actual = run.first_reference_difference;
    const bool held = claim ? actual && actual->step == claim->step && actual->ranks.front() == claim->rank : !actual;
    auto text = [](std::uint64_t step, std::size_t rank) {
      return "step " + std::to_string(step) + ", rank " + std::to_string(rank);
    };
    if (!held)
      failures.push_back("expect first_reference_difference = " + (claim ? text(claim->step, claim->rank) : "null") +
                         ", but it is " +
                         (actual ? text(actual->step, actual->ranks.front()) : std::string("null (θ always equal)")));
  }
  if (expect.halt) {
    const std::optional<halt_claim>& claim = *expect.halt;
    const std::optional<halt>& actual = run.stopped;
    const bool held = claim ? actual && actual->step == claim->step && actual->cause == claim->cause &&
                                  same_ranks(claim->waiting, actual->waiting) &&
                                  same_ranks(claim->missing, actual->missing) && same_ranks(claim->ranks, actual->ranks)
                            : !actual;
    if (!held)
      failures.push_back("expect halt = " + (claim ? claimed_halt_text(*claim) : std::string("null")) + ", but " +
                         (actual ? "it is " : "") + actual_halt_text(run));
  }
  if (expect.final_theta) {
    const std::vector<parameter_vector> actual = run.final_theta();
    for (std::size_t r = 0; r < actual.size(); ++r)
      if ((*expect.final_theta)[r] != actual[r])
        failures.push_back("expect final_theta of rank " + std::to_string(r) + " = " +
                           vector_text((*expect.final_theta)[r], s.scalar_model, true) + ", but it is " +
                           vector_text(actual[r], s.scalar_model, true));
  }
  return failures;
}

}  // namespace normcheck
