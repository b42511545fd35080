#include "laws.hpp"

#include "generators.hpp"
#include "oracle.hpp"
#include "run_property.hpp"

#include "normcheck/teaching/reference.hpp"

#include <algorithm>
#include <sstream>

namespace normcheck::properties {

namespace {

counterexample last;

rational as_rational(std::uint64_t n) {
  rational value{n};
  return value;
}

claim claim_about(std::string about, const token_partition& tokens) {
  claim c;
  c.about = std::move(about);
  c.tokens = tokens;
  return c;
}

token_partition with_reducer(token_partition tokens, reducer_kind reducer) {
  tokens.reducer = reducer;
  return tokens;
}

// The library's gradient of `s` on the tokens (nullopt where undefined).
std::optional<rational> library_gradient(const token_partition& tokens, strategy s) {
  return gradient(to_partition(tokens), s);
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

// A claim cut into documents in which no gradient name repeats: the k-th entry of a name goes to part k.
std::vector<claim> split_repeated_names(const claim& c) {
  std::vector<claim> parts;
  for (const expectation& e : c.expect) {
    std::size_t k = 0;
    while (k < parts.size() && std::any_of(parts[k].expect.begin(), parts[k].expect.end(),
                                           [&](const expectation& other) { return other.name == e.name; }))
      ++k;
    if (k == parts.size()) parts.push_back(claim{c.about, c.tokens, {}, c.expect_error});
    parts[k].expect.push_back(e);
  }
  if (parts.empty()) parts.push_back(c);
  return parts;
}

// What does not hold of one claim (whose names do not repeat), in words; empty when it holds.
std::vector<std::string> failures_of(const claim& c) {
  std::vector<std::string> failures;
  const partition update = to_partition(c.tokens);
  if (c.expect_error) {
    const std::string code(code_name(*c.expect_error));
    for (strategy s : all_strategies) {
      try {
        const std::optional<rational> value = gradient(update, s);
        failures.push_back(name_of(s) + " is " + show(value) + " instead of a rejection with " + code);
      } catch (const error& e) {
        if (e.code() != *c.expect_error)
          failures.push_back(name_of(s) + " is rejected with " + std::string(code_name(e.code())) + ", not " + code);
      }
    }
    try {
      read_partition(write_document(c.tokens), "claim.json");
      failures.push_back("the document is read without rejection, not rejected with " + code);
    } catch (const error& e) {
      if (e.code() != *c.expect_error)
        failures.push_back("the document is rejected with " + std::string(code_name(e.code())) + ", not " + code);
    }
  }
  for (const expectation& e : c.expect) {
    std::optional<rational> actual;
    try {
      actual = gradient(update, e.name);
    } catch (const error& x) {
      failures.push_back(name_of(e.name) + " is rejected with " + std::string(code_name(x.code())) +
                         ", the law expects " + show(e.value));
      continue;
    }
    if (actual && !is_canonical(*actual))
      failures.push_back(name_of(e.name) + " = " + to_string(*actual) + " is not canonical");
    else if (actual != e.value)
      failures.push_back(name_of(e.name) + " is " + show(actual) + ", the law expects " + show(e.value));
  }
  return failures;
}

std::string document_of(std::string_view law_name, const claim& c) {
  document_options options;
  options.description = "Law \"" + std::string(law_name) + "\": " + c.about;
  options.expect = c.expect;
  options.expect_error = c.expect_error;
  return write_document(c.tokens, options);
}

// Fails the current case: records the counterexample and hands RapidCheck the report it prints.
// `unmet` is the law's statement about values that are all correct, when that statement is what fails.
[[noreturn]] void fail_case(std::string_view law_name, const std::string& headline, const std::vector<claim>& parts,
                            const std::vector<std::vector<std::string>>& failures, const std::string& unmet = "") {
  counterexample found;
  found.law = std::string(law_name);
  std::ostringstream report;
  report << "The law \"" << law_name << "\" does not hold: " << headline << "\n"
         << "Each claim below is a complete normcheck/1 document: save one as a .json file and\n"
         << "`normcheck check FILE` replays it (exit 1 where the claim does not hold). The\n"
         << "RC_PARAMS=\"reproduce=...\" line RapidCheck prints replays this case in the test.\n";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string document = document_of(law_name, parts[i]);
    const bool holds = failures[i].empty();
    report << "\nclaim " << i + 1 << " of " << parts.size() << (holds ? " (holds)" : " (DOES NOT HOLD)") << ": "
           << parts[i].about << "\n";
    for (const std::string& failure : failures[i]) report << "  " << failure << "\n";
    if (holds && !unmet.empty()) report << "  the values hold, but " << unmet << "\n";
    report << document;
    if (!holds || !unmet.empty()) {
      found.failing_documents.push_back(document);
      found.failing_tokens.push_back(parts[i].tokens);
      found.failing_claims.push_back(parts[i]);
    }
  }
  found.report = report.str();
  last = found;
  throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, found.report);
}

// Splits claims into documents and evaluates each.
void evaluate(const std::vector<claim>& claims, std::vector<claim>& parts,
              std::vector<std::vector<std::string>>& failures) {
  for (const claim& c : claims)
    for (claim& part : split_repeated_names(c)) {
      failures.push_back(failures_of(part));
      parts.push_back(std::move(part));
    }
}

// Raises the first valid token of a microbatch by one: moves exactly one derivative θ − y by −1.
void raise_first_token(std::vector<token>& microbatch) {
  for (token& t : microbatch)
    if (t) {
      rational raised = *t + 1;
      t = raised;
      return;
    }
}

}  // namespace

std::string normalization_under_test::describe() const {
  return name + " (" + name_of(under_mean) + " under the mean reducer, " + name_of(under_sum) +
         " under the sum reducer)";
}

normalization_under_test objective_gradient() { return {"objective", strategy::global_mean, strategy::global_mean}; }
normalization_under_test compensated() { return {"compensated", strategy::scaled_sum, strategy::global_share}; }
normalization_under_test local_means_averaged() {
  return {"local means averaged", strategy::local_mean, strategy::local_mean};
}
normalization_under_test w_factor_dropped() {
  return {"W factor dropped", strategy::global_share, strategy::global_share};
}
normalization_under_test w_applied_under_sum() {
  return {"W applied under the sum reducer", strategy::scaled_sum, strategy::scaled_sum};
}
normalization_under_test per_microbatch_denominator() {
  return {"per-microbatch denominator", strategy::microbatch_mean, strategy::microbatch_mean};
}

std::vector<normalization_under_test> planted_wrong_normalizations() {
  return {local_means_averaged(), w_factor_dropped(), w_applied_under_sum(), per_microbatch_denominator()};
}

std::optional<normalization_under_test> normalization_named(std::string_view name) {
  std::vector<normalization_under_test> all = planted_wrong_normalizations();
  all.push_back(objective_gradient());
  all.push_back(compensated());
  for (const normalization_under_test& n : all)
    if (n.name == name) return n;
  return std::nullopt;
}

void expect_gradient(claim& c, strategy name, const std::optional<rational>& value) {
  for (const expectation& e : c.expect)
    if (e.name == name && e.value == value) return;
  c.expect.push_back({name, value});
}

void require_claims(std::string_view law_name, const std::vector<claim>& claims) {
  std::vector<claim> parts;
  std::vector<std::vector<std::string>> failures;
  evaluate(claims, parts, failures);
  std::size_t failing = 0;
  for (const auto& f : failures) failing += f.empty() ? 0 : 1;
  if (failing == 0) return;
  fail_case(law_name, std::to_string(failing) + " of " + std::to_string(parts.size()) + " claims fail.", parts,
            failures);
}

void require_distinct(std::string_view law_name, const std::optional<rational>& a, const std::optional<rational>& b,
                      std::string_view why, const std::vector<claim>& context) {
  if (a != b) return;
  std::vector<claim> parts;
  std::vector<std::vector<std::string>> failures;
  evaluate(context, parts, failures);
  const std::string unmet = std::string(why) + ", but both are " + show(a);
  fail_case(law_name, unmet + ".", parts, failures, unmet);
}

const counterexample& last_counterexample() { return last; }

void forget_counterexample() { last = counterexample{}; }

law partition_invariance(const normalization_under_test& n) {
  return [n] {
    const token_partition original = *gen_update_with_tokens();
    const transformed changed = *transform(original);
    const strategy s = n.under(original.reducer);
    const std::string law_name = "partition invariance for " + n.describe();
    claim before = claim_about(name_of(s) + " equals the token mean of θ − y", original);
    expect_gradient(before, s, oracle::token_mean(original));
    claim after = claim_about("after " + joined(changed.steps) + " of the tokens of claim 1, " + name_of(s) +
                                  " is unchanged",
                              changed.tokens);
    expect_gradient(after, s, library_gradient(original, s));
    require_claims(law_name, {before, after});
  };
}

law compensation(const normalization_under_test& n) {
  return [n] {
    const token_partition update = *gen_update_with_tokens();
    const strategy s = n.under(update.reducer);
    const std::optional<rational> objective = oracle::token_mean(update);
    claim c = claim_about("under the " + std::string(reducer_name(update.reducer)) + " reducer " + name_of(s) +
                              " equals the objective, the token mean of θ − y",
                          update);
    expect_gradient(c, strategy::global_mean, objective);
    expect_gradient(c, s, objective);
    require_claims("compensation for " + n.describe(), {c});
  };
}

law wrong_scale(const normalization_under_test& n) {
  return [n] {
    const token_partition update = *gen_update_with_tokens();
    const rational objective = *oracle::token_mean(update);
    const rational world_size = as_rational(update.ranks.size());
    const rational valid_tokens = as_rational(oracle::valid_tokens(update));
    claim under_sum = claim_about("under the sum reducer, which does not divide by W, " + name_of(n.under_mean) +
                                      " is W times the objective",
                                  with_reducer(update, reducer_kind::sum));
    rational times_w = world_size * objective;
    expect_gradient(under_sum, strategy::global_mean, objective);
    expect_gradient(under_sum, n.under_mean, times_w);
    claim under_mean = claim_about("under the mean reducer, which divides by W, " + name_of(n.under_sum) +
                                       " is the objective divided by W, and local_sum is N/W times the objective",
                                   with_reducer(update, reducer_kind::mean));
    rational over_w = objective / world_size;
    rational local_sum = valid_tokens / world_size * objective;
    expect_gradient(under_mean, n.under_sum, over_w);
    expect_gradient(under_mean, strategy::local_sum, local_sum);
    require_claims("wrong scale is exactly an integer factor for " + n.describe(), {under_sum, under_mean});
  };
}

law equal_partition_control(const normalization_under_test& n) {
  return [n] {
    const std::size_t world_size = *gen_world_size();
    const std::size_t count = 1 + *natural_below(8);
    token_partition update;
    update.theta = *gen_theta();
    for (std::size_t r = 0; r < world_size; ++r) update.ranks.push_back({*gen_tokens_with_count(count)});
    update = *split_microbatches(update);
    const std::optional<rational> objective = oracle::token_mean(update);
    claim c = claim_about("every rank holds " + std::to_string(count) + " valid tokens, so under the mean reducer " +
                              name_of(n.under_mean) + " equals the objective",
                          update);
    expect_gradient(c, strategy::global_mean, objective);
    expect_gradient(c, n.under_mean, objective);
    require_claims("equal-partition control for " + n.describe(), {c});
  };
}

law unequal_counts_expose_bias(const normalization_under_test& n) {
  return [n] {
    const std::size_t world_size = *gen_world_size(2);
    std::vector<std::size_t> counts(world_size);
    for (std::size_t& c : counts) c = 1 + *natural_below(8);
    const std::size_t i = *uniform_index(world_size);
    const std::size_t j = (i + 1 + *uniform_index(world_size - 1)) % world_size;
    counts[j] = counts[i] + 1 + *natural_below(8);
    token_partition update;
    update.theta = *gen_theta();
    for (std::size_t c : counts) update.ranks.push_back({*gen_tokens_with_count(c)});
    // Targets on which the rank weights show: if these agree by accident, moving one derivative on the
    // smallest rank by 1 moves the rank-weighted mean by 1/(W·n_min) and the token mean by 1/N, and
    // W·n_min < N because the counts are not all equal.
    if (oracle::rank_mean(update) == oracle::token_mean(update)) {
      const std::size_t smallest =
          static_cast<std::size_t>(std::min_element(counts.begin(), counts.end()) - counts.begin());
      raise_first_token(update.ranks[smallest].front());
    }
    const std::optional<rational> objective = oracle::token_mean(update);
    const std::optional<rational> rank_weighted = oracle::rank_mean(update);
    claim c = claim_about("ranks hold different numbers of valid tokens, so under the mean reducer " +
                              name_of(n.under_mean) + " weights ranks, not tokens, and misses the objective",
                          update);
    expect_gradient(c, strategy::global_mean, objective);
    expect_gradient(c, n.under_mean, rank_weighted);
    const std::string law_name = "equal-partition control (unequal counts) for " + n.describe();
    require_claims(law_name, {c});
    require_distinct(law_name, rank_weighted, objective, "the rank-weighted mean must differ from the objective", {c});
  };
}

law empty_rank_handling(const normalization_under_test& n) {
  return [n] {
    const token_partition update = *gen_update_with_tokens();
    const with_empty_rank grown = *add_empty_rank(update);
    const strategy s = n.under(update.reducer);
    const std::optional<rational> objective = oracle::token_mean(update);
    const std::string rank = "rank " + std::to_string(grown.position);
    claim without = claim_about(name_of(s) + " equals the objective on the update without " + rank, update);
    expect_gradient(without, s, objective);
    claim with = claim_about(rank + " holds no valid token: with it, and W one larger, " + name_of(s) +
                                 " still equals the objective",
                             grown.tokens);
    expect_gradient(with, strategy::global_mean, objective);
    expect_gradient(with, s, objective);
    claim undefined = claim_about(rank + " holds no valid token, so its local mean is undefined, never zero",
                                  grown.tokens);
    expect_gradient(undefined, strategy::local_mean, std::nullopt);
    expect_gradient(undefined, strategy::microbatch_mean, std::nullopt);
    require_claims("empty-rank handling for " + n.describe(), {without, with, undefined});
  };
}

law all_empty_rejection(const rc::Gen<token_partition>& updates) {
  return [updates] {
    const token_partition update = *updates;
    claim c = claim_about("no rank holds a valid token (N = 0), so the objective is undefined and every gradient "
                          "is rejected",
                          update);
    c.expect_error = error_code::no_valid_tokens;
    require_claims("all-empty rejection", {c});
  };
}

law all_empty_rejection() { return all_empty_rejection(gen_all_empty()); }

law theta_linearity(const normalization_under_test& n) {
  return [n] {
    token_partition update = *gen_update_with_tokens();
    const rational mean_target = *oracle::target_mean(update);
    const strategy s = n.under(update.reducer);
    std::vector<claim> claims;
    for (int k = 0; k < 2; ++k) {
      if (k == 1) update.theta = *gen_theta();
      rational expected = update.theta - mean_target;
      claim c = claim_about("at θ = " + to_string(update.theta) + ", global_mean is θ − mean(y) = " +
                                to_string(expected) + ", and so is " + name_of(s),
                            update);
      expect_gradient(c, strategy::global_mean, expected);
      expect_gradient(c, s, expected);
      claims.push_back(std::move(c));
    }
    require_claims("theta-linearity for " + n.describe(), claims);
  };
}

law accumulation(const normalization_under_test& n) {
  return [n] {
    const token_partition update = *gen_update_with_tokens();
    const token_partition resplit = *split_microbatches(update);
    const strategy s = n.under(update.reducer);
    const std::optional<rational> objective = oracle::token_mean(update);
    claim before = claim_about(name_of(s) + ", with the update's N, equals the objective", update);
    expect_gradient(before, s, objective);
    claim after = claim_about("the tokens of claim 1 cut into microbatches afresh: " + name_of(s) +
                                  " still equals the objective",
                              resplit);
    expect_gradient(after, s, objective);
    require_claims("accumulation for " + n.describe(), {before, after});
  };
}

law equal_microbatches_control(const normalization_under_test& n) {
  return [n] {
    const std::size_t world_size = *gen_world_size();
    const std::size_t microbatches = 1 + *natural_below(4);
    const std::size_t count = 1 + *natural_below(6);
    token_partition update;
    update.theta = *gen_theta();
    for (std::size_t r = 0; r < world_size; ++r) {
      rank_tokens rank;
      for (std::size_t m = 0; m < microbatches; ++m) rank.push_back(*gen_tokens_with_count(count));
      update.ranks.push_back(std::move(rank));
    }
    const std::optional<rational> objective = oracle::token_mean(update);
    claim c = claim_about("every rank has " + std::to_string(microbatches) + " microbatches of " +
                              std::to_string(count) + " valid tokens, so under the mean reducer " +
                              name_of(n.under_mean) + " equals the objective",
                          update);
    expect_gradient(c, strategy::global_mean, objective);
    expect_gradient(c, n.under_mean, objective);
    require_claims("accumulation control (equal microbatches) for " + n.describe(), {c});
  };
}

law microbatch_split_exposes_bias(const normalization_under_test& n) {
  return [n] {
    const std::size_t world_size = *gen_world_size();
    const std::size_t uneven = *uniform_index(world_size);
    token_partition update;
    update.theta = *gen_theta();
    std::vector<std::size_t> uneven_counts;
    for (std::size_t r = 0; r < world_size; ++r) {
      std::vector<std::size_t> counts(r == uneven ? 2 + *natural_below(3) : 1 + *natural_below(3));
      for (std::size_t& c : counts) c = 1 + *natural_below(6);
      if (r == uneven) counts[1] = counts[0] + 1 + *natural_below(5);
      rank_tokens rank;
      for (std::size_t c : counts) rank.push_back(*gen_tokens_with_count(c));
      if (r == uneven) uneven_counts = counts;
      update.ranks.push_back(std::move(rank));
    }
    // If the split shows by accident nowhere, moving one derivative by 1 in the smallest microbatch m of
    // the uneven rank moves its per-microbatch mean by 1/(W·G·n_m) and its merged mean by 1/(W·n_r),
    // and G·n_m < n_r because that rank's counts are not all equal.
    if (oracle::microbatch_mean(update) == oracle::microbatch_mean(merge_microbatches(update))) {
      const std::size_t m = static_cast<std::size_t>(
          std::min_element(uneven_counts.begin(), uneven_counts.end()) - uneven_counts.begin());
      raise_first_token(update.ranks[uneven][m]);
    }
    const token_partition merged = merge_microbatches(update);
    const std::optional<rational> split_value = oracle::microbatch_mean(update);
    const std::optional<rational> merged_value = oracle::microbatch_mean(merged);
    claim split = claim_about("rank " + std::to_string(uneven) +
                                  " has microbatches of different counts; under the mean "
                                  "reducer " +
                                  name_of(n.under_mean) + " averages per-microbatch means",
                              update);
    expect_gradient(split, strategy::global_mean, oracle::token_mean(update));
    expect_gradient(split, n.under_mean, split_value);
    claim whole = claim_about("the same tokens with one microbatch per rank: " + name_of(n.under_mean) +
                                  " takes another value",
                              merged);
    expect_gradient(whole, n.under_mean, merged_value);
    const std::string law_name = "accumulation (microbatch split) for " + n.describe();
    require_claims(law_name, {split, whole});
    require_distinct(law_name, split_value, merged_value, "the per-microbatch means must depend on the split",
                     {split, whole});
  };
}

std::vector<claim> reference_claims() {
  auto number = [](long p, long q = 1) { return from_parts(p < 0, integer(p < 0 ? -p : p), integer(q)); };
  auto tokens_of = [](std::vector<std::vector<token>> ranks, const rational& theta) {
    token_partition tokens;
    for (auto& rank : ranks) tokens.ranks.push_back({std::move(rank)});
    tokens.theta = theta;
    return tokens;
  };
  const rational zero = number(0);
  const token_partition unequal = tokens_of({{number(0)}, {number(2), number(2), number(2)}}, zero);
  const token_partition equal = tokens_of({{number(0), number(2)}, {number(2), number(2)}}, zero);
  const token_partition with_empty = tokens_of({{}, {number(2), number(2)}}, zero);
  const token_partition at_one = tokens_of({{number(0)}, {number(2), number(2), number(2)}}, number(1));
  const token_partition one_token = tokens_of({{number(-1)}, {number(0), number(0), number(0)}}, zero);
  const token_partition all_empty = tokens_of({{}, {}}, zero);

  std::vector<claim> claims;
  auto add = [&](std::string about, const token_partition& tokens,
                 std::vector<std::pair<strategy, std::optional<rational>>> entries) {
    claim c = claim_about(std::move(about), tokens);
    for (const auto& [s, value] : entries) expect_gradient(c, s, value);
    claims.push_back(std::move(c));
  };
  add("the objective on the unequal partition", unequal, {{strategy::global_mean, number(-3, 2)}});
  add("averaged local means weight ranks, not tokens", unequal, {{strategy::local_mean, number(-1)}});
  add("W·Sᵣ/N under the mean reducer is the objective", unequal, {{strategy::scaled_sum, number(-3, 2)}});
  add("the compensated gradient does not depend on the dealing", equal, {{strategy::scaled_sum, number(-3, 2)}});
  add("with equal counts the averaged local means agree", equal, {{strategy::local_mean, number(-3, 2)}});
  add("an empty rank contributes zero", with_empty,
      {{strategy::scaled_sum, number(-2)}, {strategy::local_mean, std::nullopt}});
  add("at θ = 1 the agreement still holds", at_one,
      {{strategy::scaled_sum, number(-1, 2)}, {strategy::global_mean, number(-1, 2)}});
  add("one token's weight: 1/W per rank against 1/N per token", one_token,
      {{strategy::local_mean, number(1, 2)}, {strategy::global_mean, number(1, 4)}});
  claim rejected = claim_about("an update without valid tokens is rejected", all_empty);
  rejected.expect_error = error_code::no_valid_tokens;
  claims.push_back(std::move(rejected));
  return claims;
}

law fixed_examples(const std::vector<claim>& examples) {
  return [examples] { require_claims("reference checks", examples); };
}

rc::detail::TestResult run_law(const std::string& name, const law& property) {
  return run_property(name, property, configured_cases());
}

std::string reproduce_params(const std::string& name, const rc::detail::FailureResult& failure) {
  rc::detail::Configuration config;
  config.testParams = rc::detail::configuration().testParams;
  config.reproduce[name] = failure.reproduce;
  return "RC_PARAMS=\"" + rc::detail::configToMinimalString(config) + "\"";
}

law weighted_compensation(const normalization_under_test& n) {
  return [n] {
    const token_partition update = *gen_weighted_update();
    const strategy s = n.under(update.reducer);
    const std::optional<rational> objective = oracle::weighted_mean(update);
    claim c = claim_about("under the weighted objective and the " + std::string(reducer_name(update.reducer)) +
                              " reducer " + name_of(s) + " equals Σw·(θ − y)/Σw",
                          update);
    expect_gradient(c, strategy::global_mean, objective);
    expect_gradient(c, s, objective);
    require_claims("weighted compensation for " + n.describe(), {c});
  };
}

law unit_weights(const normalization_under_test& n) {
  return [n] {
    const token_partition plain = *gen_update_with_tokens();
    const token_partition update = *with_weights(plain, rc::gen::just(rational(1)));
    const strategy s = n.under(update.reducer);
    const std::optional<rational> objective = oracle::token_mean(plain);
    claim c = claim_about("with every weight 1, " + name_of(s) + " equals the token mean of θ − y", update);
    expect_gradient(c, strategy::global_mean, objective);
    expect_gradient(c, s, objective);
    require_claims("unit weights for " + n.describe(), {c});
  };
}

law weight_scaling(const normalization_under_test& n) {
  return [n] {
    const token_partition update = *gen_weighted_update();
    rational k = abs(*gen_rational());
    if (k == 0) k = 1;
    token_partition scaled = update;
    for (auto& rank : scaled.weights)
      for (auto& microbatch : rank)
        for (token& w : microbatch)
          if (w) {
            rational product = *w * k;
            w = product;
          }
    const strategy s = n.under(update.reducer);
    claim before = claim_about(name_of(s) + " on the weighted update", update);
    expect_gradient(before, strategy::global_mean, oracle::weighted_mean(update));
    claim after = claim_about("with every weight of claim 1 multiplied by " + to_string(k) + ", " + name_of(s) +
                                  " is unchanged",
                              scaled);
    expect_gradient(after, s, library_gradient(update, s));
    require_claims("weight scaling for " + n.describe(), {before, after});
  };
}

law zero_mass_rejection(const rc::Gen<token_partition>& updates) {
  return [updates] {
    const token_partition update = *updates;
    claim c = claim_about("every valid token weighs 0 (M = 0), so the weighted objective is undefined and every "
                          "gradient is rejected",
                          update);
    c.expect_error = error_code::no_valid_tokens;
    require_claims("zero-mass rejection", {c});
  };
}

law zero_mass_rejection() {
  return zero_mass_rejection(rc::gen::mapcat(gen_update_with_tokens(), [](const token_partition& tokens) {
    return with_weights(tokens, rc::gen::just(rational(0)));
  }));
}

}  // namespace normcheck::properties
