#pragma once
/// \file gate/gate_section.hpp
/// The gate's part of a normcheck/1 document: `observed` (what training code produced) and
/// `expect_gate` (the verdict a file claims the gate reaches), read, judged and reported here.

#include "normcheck/documents/section.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/gate/observed.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// What a file expects the gate to conclude: the verdict and the names of the explanations it gives
/// (the diagnosis of a failure, or the mistakes that could hide in an inconclusive verdict).
struct gate_expectation {
  gate_verdict verdict = gate_verdict::pass;
  std::vector<std::string> explanations;
};

/// The handler of `observed` and `expect_gate`.
class gate_section final : public section {
public:
  std::vector<std::string_view> keys() const override { return {"observed", "expect_gate"}; }
  void read(std::string_view key, field_reader& in) override;
  void settle(const partition_file& document, field_reader& in) override;
  bool present() const override { return observed_.has_value(); }
  void judge(const partition_file& document, const gradient_set& gradients,
             std::vector<std::string>& failures) override;
  void print_text(std::ostream& out, const partition_file& document, const gradient_set& gradients) const override;
  void write_json(json_writer& json, const partition_file& document, const gradient_set& gradients) const override;
  std::optional<std::string> failure_summary() const override;

  /// `observed`, as read.
  const std::optional<observed_result>& observed() const noexcept { return observed_; }
  /// `expect_gate`, as read.
  const std::optional<gate_expectation>& expectation() const noexcept { return expectation_; }
  /// The gate's judgement, once judged.
  const std::optional<gate_result>& result() const noexcept { return result_; }

private:
  void read_observed(field_reader& in);
  void read_term_observations(field_reader& in);
  void read_sites(field_reader& in, observed_result& observed);
  void read_tokens(field_reader& in, observed_result& observed);
  static void read_mass(field_reader& in, observed_result& observed);
  static void read_tolerance(field_reader& in, observed_result& observed);
  void read_expectation(field_reader& in);
  void settle_groups(const partition_file& document, field_reader& in) const;
  /// Every declared term measured once, in the document's order, each shaped like its update.
  void settle_terms(const partition_file& document, field_reader& in);
  /// On a mesh with replica dimensions: the per-rank counts, masses and divisors of each rank's replicas
  /// must be its own (schema_error otherwise), and are kept once per set of replicas, as the update's ranks.
  void fold_replicas(const partition& update, field_reader& in);

  std::optional<observed_result> observed_;
  std::uint64_t observed_offset_ = 0;
  std::uint64_t divided_by_offset_ = 0;
  std::optional<std::uint64_t> witness_offset_;
  std::uint64_t sites_offset_ = 0;
  /// `observed.terms`: one auxiliary term's measurement, sharing the main loss's dtype and tolerance.
  struct term_observation {
    std::string name;
    observed_result observed;
    std::uint64_t offset = 0;
    std::optional<std::uint64_t> witness_offset;
  };
  std::vector<term_observation> term_observed_;  ///< in the document's term order once settled
  std::vector<observed_result> term_measured_;   ///< each term's measurement, as judged
  std::optional<gate_expectation> expectation_;
  std::optional<gate_result> result_;
  bool judged_expectation_held_ = false;
};

}  // namespace normcheck
