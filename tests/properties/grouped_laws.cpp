#include "grouped_laws.hpp"

#include "grouped_generators.hpp"
#include "grouped_oracle.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/core/normalization.hpp"

#include <rapidcheck/detail/TestListenerAdapter.h>

#include <sstream>

namespace normcheck::properties {

namespace {

grouped_counterexample last_grouped;

// What an implementation delivers, or the error it rejects the update with.
struct outcome {
  std::optional<rational> value;
  std::optional<error> rejection;
};

outcome run(const implementation& subject, const partition& p) {
  try {
    return {subject.compute(p), std::nullopt};
  } catch (const error& e) {
    return {std::nullopt, e};
  }
}

outcome library(const partition& p, strategy s) {
  try {
    return {gradient(p, s), std::nullopt};
  } catch (const error& e) {
    return {std::nullopt, e};
  }
}

std::string shown(const outcome& o) {
  return o.rejection ? "rejected with " + std::string(code_name(o.rejection->code())) : show(o.value);
}

// The document of a claim: the library's gradients as `expect`, the subject as an `expect` entry when it is a
// library strategy, as `observed` (exact) otherwise.
std::string document_of(std::string_view law_name, const grouped_claim& c) {
  grouped_document_options options;
  options.description = "Law \"" + std::string(law_name) + "\": " + c.about;
  options.expect = c.expect;
  options.expect_error = c.expect_error;
  if (c.subject && !c.expect_error) {
    const std::optional<strategy> s = c.subject->as_strategy(c.update.reducer);
    const bool taken = s && std::any_of(c.expect.begin(), c.expect.end(), [&](const expectation& e) {
                         return e.name == *s && e.value != c.subject_value;
                       });
    if (s && !taken) {
      if (std::none_of(c.expect.begin(), c.expect.end(), [&](const expectation& e) { return e.name == *s; }))
        options.expect.push_back({*s, c.subject_value});
    } else {
      const outcome delivered = run(*c.subject, to_partition(c.update));
      if (!delivered.rejection) {
        observation o;
        o.gradient = delivered.value;
        options.observed = o;
      }
    }
  }
  return write_grouped_document(c.update, options);
}

// What does not hold of one claim, in words; empty when it holds.
std::vector<std::string> failures_of(const grouped_claim& c, const std::string& document) {
  std::vector<std::string> failures;
  const partition p = to_partition(c.update);
  if (c.expect_error) {
    const std::string code(code_name(*c.expect_error));
    for (strategy s : all_strategies) {
      const outcome o = library(p, s);
      if (!o.rejection)
        failures.push_back(name_of(s) + " is " + show(o.value) + " instead of a rejection with " + code);
      else if (o.rejection->code() != *c.expect_error)
        failures.push_back(name_of(s) + " is rejected with " + std::string(code_name(o.rejection->code())) + ", not " +
                           code);
    }
    try {
      (void)read_partition(document, "claim.json", {}, standard_sections());
      failures.push_back("the document is read without rejection, not rejected with " + code);
    } catch (const error& e) {
      if (e.code() != *c.expect_error)
        failures.push_back("the document is rejected with " + std::string(code_name(e.code())) + ", not " + code);
    }
    if (c.subject) {
      const outcome o = run(*c.subject, p);
      if (!o.rejection || o.rejection->code() != *c.expect_error)
        failures.push_back(c.subject->name + " gives " + shown(o) + ", not a rejection with " + code);
    }
    return failures;
  }
  try {
    (void)read_partition(document, "claim.json", {}, standard_sections());
  } catch (const error& e) {
    failures.push_back("the claim's document is rejected with " + std::string(code_name(e.code())) + ": " +
                       e.message());
  }
  for (const expectation& e : c.expect) {
    const outcome o = library(p, e.name);
    if (o.rejection) failures.push_back(name_of(e.name) + " is " + shown(o) + ", the law expects " + show(e.value));
    else if (o.value && !is_canonical(*o.value)) failures.push_back(name_of(e.name) + " is not canonical");
    else if (o.value != e.value)
      failures.push_back(name_of(e.name) + " is " + show(o.value) + ", the law expects " + show(e.value));
  }
  if (c.subject) {
    const outcome o = run(*c.subject, p);
    if (o.rejection || o.value != c.subject_value)
      failures.push_back(c.subject->name + " gives " + shown(o) + ", the law expects " + show(c.subject_value));
  }
  return failures;
}

// Whether `normcheck check` shows the failure of a claim's document: the library or the value observed from
// the subject is wrong (a subject that wrongly rejects, or wrongly accepts a rejected update, is not in it).
bool replayable(const grouped_claim& c, const std::vector<std::string>& failures) {
  if (failures.empty()) return false;
  if (!c.subject) return true;
  const outcome o = run(*c.subject, to_partition(c.update));
  if (c.expect_error) return o.rejection.has_value();  // the library's rejection is what failed
  return !o.rejection;
}

[[noreturn]] void fail_case(std::string_view law_name, const std::vector<grouped_claim>& claims,
                            const std::vector<std::string>& documents,
                            const std::vector<std::vector<std::string>>& failures) {
  grouped_counterexample found;
  found.law = std::string(law_name);
  std::size_t failing = 0;
  for (const auto& f : failures) failing += f.empty() ? 0 : 1;
  std::ostringstream report;
  report << "The law \"" << law_name << "\" does not hold: " << failing << " of " << claims.size() << " claims fail.\n"
         << "Each claim below is a complete normcheck/1 document: save one as a .json file and\n"
         << "`normcheck check FILE` replays it (exit 1 where the claim does not hold; a value the\n"
         << "implementation under test computed stands in `observed`). The RC_PARAMS=\"reproduce=...\"\n"
         << "line RapidCheck prints replays this case in the test.\n";
  for (std::size_t i = 0; i < claims.size(); ++i) {
    const bool holds = failures[i].empty();
    report << "\nclaim " << i + 1 << " of " << claims.size() << (holds ? " (holds)" : " (DOES NOT HOLD)") << ": "
           << claims[i].about << "\n";
    for (const std::string& failure : failures[i]) report << "  " << failure << "\n";
    report << documents[i];
    if (!holds) {
      found.failing_documents.push_back(documents[i]);
      found.failing_updates.push_back(claims[i].update);
      found.replayable.push_back(replayable(claims[i], failures[i]));
    }
  }
  found.report = report.str();
  last_grouped = found;
  throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, found.report);
}

grouped_claim claim_about(std::string about, const grouped_update& update) {
  grouped_claim c;
  c.about = std::move(about);
  c.update = update;
  return c;
}

void about_subject(grouped_claim& c, const implementation& subject, const std::optional<rational>& value) {
  c.subject = subject;
  c.subject_value = value;
}

std::string objective_words(objective_kind objective) { return "under " + std::string(objective_name(objective)); }

// A strategy's library value where the law states it (rejections become "undefined": the law's other claims
// report them).
std::optional<rational> library_value(const grouped_update& update, strategy s) {
  return library(to_partition(update), s).value;
}

}  // namespace

implementation library_compensation() {
  return {"the compensation", strategy::scaled_sum, strategy::global_share,
          [](const partition& p) { return gradient(p, correct_for(p.reducer)); }};
}

implementation token_mean_code() {
  return {"the token mean's compensation", std::nullopt, std::nullopt, [](const partition& p) {
            require_valid_tokens(p);
            return synchronized_gradient(objective_units(p, objective_kind::token_mean),
                                         normalization_of(correct_for(p.reducer)));
          }};
}

implementation empty_sequences_counted() {
  return {"the compensation with B counting empty sequences", std::nullopt, std::nullopt, [](const partition& p) {
            require_valid_tokens(p);
            if (!counts_sequences(p.objective)) return gradient(p, correct_for(p.reducer));
            std::uint64_t declared = 0;
            for (const rank_stats& rank : p.ranks)
              for (const microbatch_stats& m : rank.microbatches) declared += m.sequences ? m.sequences->size() : 0;
            // W·Sᵣ/B' under the mean reducer (÷W), Sᵣ/B' under the sum: Σᵣ Sᵣ/B' either way.
            const objective_units units(p, p.objective);
            rational total;
            for (std::size_t r = 0; r < p.ranks.size(); ++r) total += objective_loss_sum(units, r);
            rational value = total / declared;
            return std::optional<rational>(value);
          }};
}

implementation local_means() {
  return {"each rank's own mean", strategy::local_mean, strategy::local_mean,
          [](const partition& p) { return gradient(p, strategy::local_mean); }};
}

implementation ranks_with_units_only() {
  return {"the compensation with W counting ranks that hold tokens", std::nullopt, std::nullopt,
          [](const partition& p) {
            const std::optional<rational> correct = gradient(p, correct_for(p.reducer));
            if (!correct || p.reducer == reducer_kind::sum) return correct;
            const objective_units units(p, p.objective);
            std::uint64_t holding = 0;
            for (std::size_t r = 0; r < p.ranks.size(); ++r) holding += units.of_rank(r) > 0 ? 1 : 0;
            rational value = *correct * holding / p.world_size();
            return std::optional<rational>(value);
          }};
}

implementation zero_for_no_tokens() {
  return {"the compensation, 0 for an update without tokens", std::nullopt, std::nullopt,
          [](const partition& p) -> std::optional<rational> {
            if (p.valid_tokens() == 0) return rational(0);
            return gradient(p, correct_for(p.reducer));
          }};
}

const grouped_counterexample& last_grouped_counterexample() { return last_grouped; }

void forget_grouped_counterexample() { last_grouped = grouped_counterexample{}; }

void require_grouped_claims(std::string_view law_name, const std::vector<grouped_claim>& claims) {
  std::vector<std::string> documents;
  std::vector<std::vector<std::string>> failures;
  bool failed = false;
  for (const grouped_claim& c : claims) {
    documents.push_back(document_of(law_name, c));
    failures.push_back(failures_of(c, documents.back()));
    failed = failed || !failures.back().empty();
  }
  if (failed) fail_case(law_name, claims, documents, failures);
}

law grouped_partition_invariance(objective_kind objective, const implementation& subject) {
  return [objective, subject] {
    const grouped_update original = *gen_grouped_update(objective);
    const regrouped changed = *regroup(original);
    const std::optional<rational> expected = oracle::objective_gradient(original);
    grouped_claim before = claim_about(subject.name + " and global_mean equal the objective's gradient", original);
    before.expect.push_back({strategy::global_mean, expected});
    about_subject(before, subject, expected);
    std::string steps;
    for (const std::string& step : changed.steps) steps += (steps.empty() ? "" : ", then ") + step;
    grouped_claim after = claim_about("after " + steps + " of claim 1's update, global_mean and " + subject.name +
                                          " are unchanged",
                                      changed.update);
    after.expect.push_back({strategy::global_mean, library_value(original, strategy::global_mean)});
    about_subject(after, subject, run(subject, to_partition(original)).value);
    require_grouped_claims("partition invariance " + objective_words(objective) + " for " + subject.name,
                           {before, after});
  };
}

law grouped_compensation(objective_kind objective, const implementation& subject) {
  return [objective, subject] {
    grouped_update update = *gen_grouped_update(objective);
    if (*uniform_index(2) == 0) update = *add_emptiness(update);
    if (*uniform_index(4) == 0) update = (*add_empty_grouped_rank(update)).update;
    const std::optional<rational> expected = oracle::objective_gradient(update);
    grouped_claim c = claim_about("under the " + std::string(reducer_name(update.reducer)) + " reducer " +
                                      subject.name + " equals the objective's gradient",
                                  update);
    c.expect.push_back({strategy::global_mean, expected});
    about_subject(c, subject, expected);
    require_grouped_claims("compensation " + objective_words(objective) + " for " + subject.name, {c});
  };
}

law grouped_empty_rank(objective_kind objective, const implementation& subject) {
  return [objective, subject] {
    const grouped_update update = *gen_grouped_update(objective);
    const with_empty_grouped_rank grown = *add_empty_grouped_rank(update);
    const std::optional<rational> expected = oracle::objective_gradient(update);
    const std::string rank = "rank " + std::to_string(grown.position);
    grouped_claim without =
        claim_about(subject.name + " equals the objective's gradient on the update without " + rank, update);
    about_subject(without, subject, expected);
    grouped_claim with = claim_about(rank + " holds no valid token: with it, and W one larger, the objective and " +
                                         subject.name + " are unchanged",
                                     grown.update);
    with.expect.push_back({strategy::global_mean, expected});
    about_subject(with, subject, expected);
    grouped_claim undefined = claim_about(rank + " holds no unit of the objective, so its local mean and its "
                                                 "microbatch means are undefined, never zero",
                                          grown.update);
    undefined.expect.push_back({strategy::local_mean, std::nullopt});
    undefined.expect.push_back({strategy::microbatch_mean, std::nullopt});
    require_grouped_claims("empty-rank handling " + objective_words(objective) + " for " + subject.name,
                           {without, with, undefined});
  };
}

law grouped_all_empty_rejection(objective_kind objective, const implementation& subject,
                                const rc::Gen<grouped_update>& updates) {
  return [objective, subject, updates] {
    const grouped_update update = *updates;
    grouped_claim c = claim_about("the objective does not exist on this update (no valid token, or every weight 0), so "
                                  "every gradient, the reader and " + subject.name + " reject it",
                                  update);
    c.expect_error = error_code::no_valid_tokens;
    c.subject = subject;
    require_grouped_claims("all-empty rejection " + objective_words(objective) + " for " + subject.name, {c});
  };
}

law grouped_all_empty_rejection(objective_kind objective, const implementation& subject) {
  rc::Gen<grouped_update> updates = gen_all_empty_grouped(objective);
  if (objective == objective_kind::weighted_token_mean) {
    // Also tokens that all weigh 0.
    const rc::Gen<grouped_update> weightless = rc::gen::map(gen_grouped_update(objective), [](grouped_update u) {
      for (grouped_rank& rank : u.ranks)
        for (microbatch_tokens& m : rank)
          for (group_tokens& g : m.groups)
            for (token& w : g.weights)
              if (w) w = rational(0);
      return u;
    });
    updates = weighted<grouped_update>({{1, updates}, {1, weightless}});
  }
  return grouped_all_empty_rejection(objective, subject, updates);
}

law grouped_round_trip(objective_kind objective) {
  return [objective] {
    const grouped_update update =
        *(*uniform_index(5) == 0 ? gen_all_empty_grouped(objective) : gen_grouped_update(objective));
    const std::string text = write_grouped_document(update);
    const partition written = to_partition(update);
    if (!oracle::objective_table(update)) {
      try {
        (void)read_partition(text, "written.json", {}, standard_sections());
        RC_FAIL("an update without the objective was read:\n" + text);
      } catch (const error& e) {
        RC_ASSERT(e.code() == error_code::no_valid_tokens);
      }
      return;
    }
    const partition read = read_partition(text, "written.json", {}, standard_sections()).update;
    RC_ASSERT(read.objective == written.objective);
    RC_ASSERT(read.normalizer == written.normalizer);
    RC_ASSERT(read.theta == written.theta);
    RC_ASSERT(read.reducer == written.reducer);
    RC_ASSERT(read.ranks.size() == written.ranks.size());
    RC_ASSERT(read.group_count() == written.group_count());
    RC_ASSERT(read.sequence_count() == oracle::sequences(update));
    RC_ASSERT(read.valid_tokens() == oracle::valid_tokens(update));
    for (std::size_t r = 0; r < written.ranks.size(); ++r) {
      RC_ASSERT(read.ranks[r].microbatches.size() == written.ranks[r].microbatches.size());
      for (std::size_t m = 0; m < written.ranks[r].microbatches.size(); ++m) {
        const microbatch_stats& a = written.ranks[r].microbatches[m];
        const microbatch_stats& b = read.ranks[r].microbatches[m];
        RC_ASSERT(a.sequences.has_value() == b.sequences.has_value());
        RC_ASSERT(a.group_count() == b.group_count());
        for (std::size_t g = 0; g < a.group_count(); ++g) {
          RC_ASSERT(a.group(g).valid_tokens == b.group(g).valid_tokens);
          RC_ASSERT(a.group(g).padding == b.group(g).padding);
          RC_ASSERT(a.group(g).target_sum() == b.group(g).target_sum());
          RC_ASSERT(a.group(g).target_abs_sum() == b.group(g).target_abs_sum());
          RC_ASSERT(a.group(g).mass() == b.group(g).mass());
          RC_ASSERT(a.group(g).weighted_target_sum() == b.group(g).weighted_target_sum());
        }
      }
    }
    RC_ASSERT(compute_gradients(read) == compute_gradients(written));
    RC_ASSERT(compute_gradients(read)[0] == oracle::objective_gradient(update));
  };
}

}  // namespace normcheck::properties
