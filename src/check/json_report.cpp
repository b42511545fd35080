#include "normcheck/check/json_report.hpp"

#include "normcheck/core/sequence_join.hpp"
#include "normcheck/io/json_writer.hpp"

namespace normcheck {

namespace {

void write_report_json(json_writer& json, const file_report& report) {
  json.begin_object()
      .member("file", json_name{report.file})
      .member("kind", document_kind_name(report.kind))
      .member("status", status_name(report.status));
  if (report.document) {
    const partition& update = report.document->update;
    json.member("world_size", update.world_size())
        .member("reducer", reducer_name(update.reducer))
        .member("theta", update.theta)
        .member("objective", objective_name(update.objective))
        .member("valid_tokens", update.valid_tokens())
        .member("mass", update.mass());
    // Only what the update has: sequences where it declares them, the normalizer under constant.
    const bool sequences = update.has_sequences();
    const sequence_join join(update);  // sequences count whole sequences, the slices of one sequence once
    if (sequences) json.member("sequences", join.sequences()).member("groups", update.group_count());
    if (join.joins()) json.member("slices", join.slices());
    if (update.objective == objective_kind::constant) json.member("normalizer", update.normalizer);
    // The device mesh where the file declares one; the ranks below are then its first replicas.
    if (!update.mesh.empty()) {
      json.key("mesh").begin_array();
      for (const mesh_dim& dim : update.mesh)
        json.begin_object()
            .member("name", json_name{dim.name})
            .member("size", dim.size)
            .member("role", mesh_role_name(dim.role))
            .end_object();
      json.end_array();
    }
    // The auxiliary terms where the file declares them: each its weight, objective and count.
    if (!report.document->terms.empty()) {
      json.key("terms").begin_array();
      for (const auxiliary_term& term : report.document->terms)
        json.begin_object()
            .member("name", json_name{term.name})
            .member("weight", term.update.loss_weight)
            .member("objective", objective_name(term.update.objective))
            .member("valid_tokens", term.update.valid_tokens())
            .member("count", objective_units(term.update, term.update.objective).total())
            .end_object();
      json.end_array();
    }
    json.key("ranks").begin_array();
    for (std::size_t r = 0; r < update.ranks.size(); ++r) {
      const rank_stats& rank = update.ranks[r];
      json.begin_object()
          .member("valid_tokens", rank.valid_tokens())
          .member("padding", rank.padding())
          .member("mass", rank.mass())
          .member("microbatches", std::uint64_t{rank.microbatches.size()});
      if (sequences) json.member("sequences", join.rank_sequences(r));
      json.member("loss_gradient_sum", loss_gradient_sum(rank, update.theta));
      if (update.objective == objective_kind::sequence_mean)
        json.member("objective_loss_sum", objective_loss_sum(objective_units(update, update.objective), r));
      json.end_object();
    }
    json.end_array().key("gradients").begin_object();
    for (std::size_t g = 0; g < all_strategies.size(); ++g)
      json.member(strategy_name(all_strategies[g]), report.gradients[g]);
    json.end_object().key("denominators").begin_object();
    for (strategy s : all_strategies) json.member(strategy_name(s), strategy_denominator(s, update.objective));
    json.end_object().key("equals_objective").begin_object();
    for (strategy s : all_strategies) json.member(strategy_name(s), equals_objective(report.gradients, s));
    json.end_object().key("expectations").begin_array();
    for (const expectation_result& claim : report.expectations)
      json.begin_object()
          .member("gradient", strategy_name(claim.name))
          .member("expected", claim.expected)
          .member("actual", claim.actual)
          .member("held", claim.held)
          .end_object();
    json.end_array();
    for (const std::shared_ptr<section>& part : report.document->sections)
      part->write_json(json, *report.document, report.gradients);
  } else {
    json.key("gradients").null();
  }
  if (report.expected_error) json.member("expected_error", code_name(*report.expected_error));
  if (report.rejection) {
    const error& e = *report.rejection;
    json.key("error").begin_object().member("code", code_name(e.code())).member("message", e.message());
    if (e.where() && e.where()->line > 0) json.member("line", e.where()->line).member("column", e.where()->column);
    else json.key("line").null().key("column").null();
    json.end_object();
  }
  if (!report.details.empty()) json.member("details", report.details);
  json.member("failures", report.failures).end_object();
}

}  // namespace

std::string json_report(const std::vector<file_report>& reports) {
  std::string out;
  json_writer json(out);
  json.begin_object().member("format", json_report_format).key("reports").begin_array(json_layout::lines);
  for (const file_report& report : reports) write_report_json(json, report);
  const run_summary summary = summarize(reports);
  json.end_array()
      .member("passed", std::uint64_t{summary.passed})
      .member("failed", std::uint64_t{summary.failed})
      .member("errors", std::uint64_t{summary.errors})
      .end_object();
  out += '\n';  // appended in place: the report of a large dump is tens of MB, not to be copied
  return out;
}

}  // namespace normcheck
