#include "normcheck/check/text_report.hpp"

#include "normcheck/core/sequence_join.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/io/text.hpp"

namespace normcheck {

namespace {

// Lines that hold text from the input (messages, claims, a scenario's summary) are shown with every control
// character visible, so that nothing in a file reaches the terminal as an escape sequence; line breaks a
// message is made of stay.
void print_lines(std::ostream& out, const std::vector<std::string>& lines) {
  for (const std::string& line : lines) out << "      " << printable(line, true) << "\n";
}

void print_rejection(std::ostream& out, const file_report& report) {
  const error& e = *report.rejection;
  print_text_line(out, report);
  // Rejected as expected: a pass, or a fail when that is no verdict (--require-gate).
  if (report.status != file_status::error)
    out << "      rejected as expected: " << printable(describe(e), true) << "\n";
  print_lines(out, report.failures);
}

}  // namespace

void print_text(std::ostream& out, const file_report& report) {
  if (report.rejection) {
    print_rejection(out, report);
    return;
  }
  if (!report.document) {
    print_text_line(out, report);
    print_lines(out, report.details);
    print_lines(out, report.failures);
    return;
  }
  const partition_file& document = *report.document;
  const partition& update = document.update;
  print_text_line(out, report);
  if (!document.description.empty()) out << "      " << printable(document.description) << "\n";
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  const sequence_join join(update);  // B and bᵣ count whole sequences, the slices of one sequence once
  out << "      W = " << update.world_size() << ", reducer " << reducer_name(update.reducer)
      << ", θ = " << shorten(to_string(update.theta)) << ", N = " << update.valid_tokens();
  if (weighted) out << ", objective weighted_token_mean, M = " << shorten(to_string(update.mass()));
  if (counts_sequences(update.objective) || update.has_sequences())
    out << (counts_sequences(update.objective) ? ", objective " + std::string(objective_name(update.objective))
                                               : std::string())
        << ", B = " << join.sequences() << " sequences";
  if (join.joins()) out << " joined from " << join.slices() << " slices";
  if (update.objective == objective_kind::constant)
    out << ", objective constant, C = " << shorten(to_string(update.normalizer));
  out << "\n";
  if (!update.mesh.empty()) {
    // The mesh, and where replicas stand: the update's W counts the ranks that hold distinct tokens.
    out << "      mesh";
    for (std::size_t d = 0; d < update.mesh.size(); ++d)
      out << (d ? " × " : " ") << update.mesh[d].name << " " << update.mesh[d].size << " ("
          << mesh_role_name(update.mesh[d].role) << ")";
    if (update.mesh_extent(mesh_role::replica) > 1)
      out << "; the ranks of " << update.mesh_names(mesh_role::replica) << " are replicas: W and the ranks below count "
          << "each set of replicas once";
    out << "\n";
  }
  for (const auxiliary_term& term : document.terms) {
    const partition& own = term.update;
    out << "      term " << printable(term.name) << ": weight " << shorten(to_string(own.loss_weight)) << ", "
        << objective_name(own.objective) << ", N = " << own.valid_tokens();
    if (own.objective != objective_kind::token_mean)
      out << ", its count " << shorten(to_string(objective_units(own, own.objective).total()));
    out << "\n";
  }
  const objective_units units(update, update.objective);
  constexpr std::size_t shown_ranks = 16;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    if (r == shown_ranks && update.ranks.size() > shown_ranks + 1) {
      out << "      … " << update.ranks.size() - shown_ranks << " more ranks\n";
      break;
    }
    const rank_stats& rank = update.ranks[r];
    out << "      rank " << update.listed_rank(r) << ": n = " << rank.valid_tokens();
    if (rank.padding() > 0) out << " (+" << rank.padding() << " padding)";
    if (weighted) out << ", m = " << shorten(to_string(rank.mass()));
    if (rank.microbatches.size() > 1) out << " in " << rank.microbatches.size() << " microbatches";
    if (update.has_sequences()) out << ", b = " << join.rank_sequences(r);
    out << ", S = " << shorten(to_string(objective_loss_sum(units, r))) << "\n";
  }
  for (std::size_t i = 0; i < all_strategies.size(); ++i) {
    const strategy s = all_strategies[i];
    const std::optional<rational>& value = report.gradients[i];
    // Each column ends in a space, however long its text: a long value never runs into the next word.
    out << "      " << padded(strategy_name(s), 15) << " " << padded(strategy_formula(s, update.objective), 18) << " = "
        << padded(on_screen(value), 14) << " ";
    if (value) out << padded("≈ " + approximate(*value), 15) << " ";
    else out << padded("", 16);
    if (s == strategy::global_mean) out << "the objective";
    else if (!value) out << "undefined here";
    else out << (equals_objective(report.gradients, s) ? "equals the objective" : "differs from the objective");
    out << "\n";
  }
  for (const std::shared_ptr<section>& part : document.sections) part->print_text(out, document, report.gradients);
  for (const expectation_result& claim : report.expectations)
    out << "      expect " << strategy_name(claim.name) << " = "
        << on_screen(claim.expected) << ": " << (claim.held ? "holds" : "DOES NOT HOLD") << "\n";
  print_lines(out, report.failures);
}

void print_text_line(std::ostream& out, const file_report& report) {
  if (report.rejection && report.status == file_status::error)
    out << "ERROR " << printable(describe(*report.rejection), true) << "\n";
  else out << (report.status == file_status::pass ? "PASS  " : "FAIL  ") << escaped_name(report.file) << "\n";
}

void print_summary(std::ostream& out, const run_summary& summary) {
  const std::size_t total = summary.passed + summary.failed + summary.errors;
  out << total << (total == 1 ? " file: " : " files: ") << summary.passed << " passed, " << summary.failed
      << " failed, " << summary.errors << " rejected\n";
}

}  // namespace normcheck
