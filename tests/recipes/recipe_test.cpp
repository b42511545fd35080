// The recipe language: parsing, errors with their column, exact evaluation, and prove's verdicts.

#include "normcheck/core/errors.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/gate/gate_section.hpp"
#include "normcheck/recipes/prove.hpp"
#include "normcheck/check/check.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/recipes/recipe_section.hpp"

#include <algorithm>

#include <doctest/doctest.h>

#include <functional>

namespace {

using namespace normcheck;

count_values counts(std::uint64_t w, std::uint64_t n, std::uint64_t n_r, std::uint64_t n_m, std::uint64_t g) {
  count_values v;
  v[0] = w;
  v[1] = n;
  v[2] = n_r;
  v[3] = n_m;
  v[4] = g;
  v[5] = n;
  v[6] = n_r;
  v[7] = n_m;
  return v;
}

error parse_error_of(std::string_view text) {
  try {
    recipe_expression::parse(text);
  } catch (const error& e) {
    return e;
  }
  FAIL("expected a recipe_error for ", text);
  return error(error_code::usage_error, "");
}

recipe make(std::string_view scale, reducer_kind reducer) { return recipe{recipe_expression::parse(scale), reducer}; }

}  // namespace

TEST_CASE("recipes evaluate exactly with precedence and unary minus") {
  CHECK(*recipe_expression::parse("W / N").evaluate(counts(2, 4, 1, 1, 1)).value == rational(1) / 2);
  CHECK(*recipe_expression::parse("1 + 2 * 3").evaluate(counts(1, 1, 1, 1, 1)).value == 7);
  CHECK(*recipe_expression::parse("(1 + 2) * 3").evaluate(counts(1, 1, 1, 1, 1)).value == 9);
  CHECK(*recipe_expression::parse("-W / -N").evaluate(counts(3, 5, 1, 1, 1)).value == rational(3) / 5);
  CHECK(*recipe_expression::parse("0.1 * n_m").evaluate(counts(1, 3, 3, 3, 1)).value == rational(3) / 10);
  CHECK(*recipe_expression::parse("W/(N*G)").evaluate(counts(2, 6, 3, 1, 3)).value == rational(1) / 9);
}

TEST_CASE("a division by zero names its divisor") {
  const recipe_value v = recipe_expression::parse("1 / (n_m * G)").evaluate(counts(2, 4, 1, 0, 2));
  CHECK_FALSE(v.value.has_value());
  CHECK(v.zero_divisor == "(n_m * G)");
}

TEST_CASE("syntax errors carry the column of the offending character") {
  CHECK(parse_error_of("W / / N").where()->column == 5);
  CHECK(parse_error_of("W / (N").where()->column == 7);
  CHECK(parse_error_of("").code() == error_code::recipe_error);
  CHECK(parse_error_of("W N").where()->column == 3);
  SUBCASE("unknown names are reported at their start") {
    const error e = parse_error_of("W / (N * n_q)");
    CHECK(e.where()->column == 10);
    CHECK(e.message().find("unknown name \"n_q\"") != std::string::npos);
  }
  SUBCASE("the message shows a caret under the position") {
    CHECK(parse_error_of("W / / N").message().find("\n  W / / N\n      ^") != std::string::npos);
  }
}

TEST_CASE("degree bounds follow the operations") {
  CHECK(recipe_expression::parse("W / N").degree_bound() == std::pair<unsigned, unsigned>{1, 1});
  CHECK(recipe_expression::parse("1 / (n_m * G)").degree_bound() == std::pair<unsigned, unsigned>{0, 2});
  CHECK(recipe_expression::parse("W / N + 1").degree_bound() == std::pair<unsigned, unsigned>{1, 1});
}

TEST_CASE("prove decides the named recipes") {
  CHECK(prove_recipe(make("W / N", reducer_kind::mean)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(make("1 / N", reducer_kind::sum)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(make("N / N * W / N", reducer_kind::mean)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(make("1 / n_r", reducer_kind::mean)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(make("1 / N", reducer_kind::mean)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(make("W / N", reducer_kind::sum)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(make("W / (N * G)", reducer_kind::mean)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(make("W / N * n_m / n_m", reducer_kind::mean)).verdict == proof_verdict::divides_by_zero);
}

TEST_CASE("a wrong recipe that agrees on every small partition is still refuted beyond the scope") {
  // Right for every N ≤ 36 (the exhaustive scope), wrong from N = 37 on.
  const proof_result result = prove_recipe(
      make("W / N + (N - 1) * (N - 2) * (N - 3) * (N - 4) * (N - 5) * (N - 6) * (N - 7) * (N - 8) * (N - 9) * (N - 10) "
           "* (N - 11) * (N - 12) * (N - 13) * (N - 14) * (N - 15) * (N - 16) * (N - 17) * (N - 18) * (N - 19) * (N - "
           "20) * (N - 21) * (N - 22) * (N - 23) * (N - 24) * (N - 25) * (N - 26) * (N - 27) * (N - 28) * (N - 29) * "
           "(N - 30) * (N - 31) * (N - 32) * (N - 33) * (N - 34) * (N - 35) * (N - 36)",
           reducer_kind::mean));
  CHECK(result.verdict == proof_verdict::wrong);
  REQUIRE(result.counterexample);
  CHECK(result.counterexample->where.valid_tokens > 36);
}

TEST_CASE("the counterexample document is read back with the recipe and exposes it") {
  const proof_result result = prove_recipe(make("1 / n_r", reducer_kind::mean));
  REQUIRE(result.counterexample);
  const partition_file file =
      read_partition(result.counterexample->document, "counterexample", {}, normcheck::standard_sections());
  const recipe_section* part = file.find_section<recipe_section>();
  REQUIRE(part);
  REQUIRE(part->normalization());
  const recipe_value value = recipe_gradient(file.update, *part->normalization());
  REQUIRE(value.value);
  CHECK(*value.value != *gradient(file.update, strategy::global_mean));
  CHECK(*value.value == *result.counterexample->recipe_gradient);
}

TEST_CASE("prove decides recipes for the declared objectives, and refuses the token mean's for them") {
  const auto verdict = [](std::string_view scale, reducer_kind reducer, objective_kind objective) {
    return prove_recipe(make(scale, reducer), objective).verdict;
  };
  using enum objective_kind;
  CHECK(verdict("W / B", reducer_kind::mean, sequence_sum_mean) == proof_verdict::proved);
  CHECK(verdict("1 / B", reducer_kind::sum, sequence_sum_mean) == proof_verdict::proved);
  CHECK(verdict("W / C", reducer_kind::mean, constant) == proof_verdict::proved);
  CHECK(verdict("1 / C", reducer_kind::sum, constant) == proof_verdict::proved);
  // Code written for the token mean, under an objective over sequences or a constant.
  CHECK(verdict("W / N", reducer_kind::mean, sequence_mean) == proof_verdict::wrong);
  CHECK(verdict("W / N", reducer_kind::mean, sequence_sum_mean) == proof_verdict::wrong);
  CHECK(verdict("W / N", reducer_kind::mean, constant) == proof_verdict::wrong);
  // The reverse: code written for the sequences, under the token mean.
  CHECK(verdict("W / (B * n_s)", reducer_kind::mean, token_mean) == proof_verdict::wrong);
  CHECK(verdict("W / B", reducer_kind::mean, token_mean) == proof_verdict::wrong);
  // The sum of sequence means, and the constant without the world size.
  CHECK(verdict("1 / n_s", reducer_kind::mean, sequence_mean) == proof_verdict::wrong);
  CHECK(verdict("1 / C", reducer_kind::mean, constant) == proof_verdict::wrong);
  CHECK_THROWS_AS(prove_recipe(make("W / C", reducer_kind::mean), token_mean), error);
}

TEST_CASE("the sequence mean's own scale is right wherever it is defined and divides by an empty sequence's count") {
  const proof_result result = prove_recipe(make("W / (B * n_s)", reducer_kind::mean), objective_kind::sequence_mean);
  CHECK(result.verdict == proof_verdict::divides_by_zero);
  CHECK(result.coverage.find("wherever it is defined it gives the objective's gradient") != std::string::npos);
  REQUIRE(result.counterexample);
  REQUIRE(result.counterexample->where.sequences);
  CHECK(result.counterexample->where.sequences->group_tokens == 0);
  CHECK(result.counterexample->zero_divisor.find("n_s") != std::string::npos);
}

TEST_CASE("objective_scale is the scale prove decides for each objective") {
  for (objective_kind objective : {objective_kind::token_mean, objective_kind::sequence_mean,
                                   objective_kind::sequence_sum_mean, objective_kind::constant,
                                   objective_kind::weighted_token_mean})
    for (reducer_kind reducer : {reducer_kind::mean, reducer_kind::sum}) {
      CAPTURE(objective_name(objective));
      CAPTURE(reducer_name(reducer));
      const proof_result result = prove_recipe(make(objective_scale(objective, reducer), reducer), objective);
      CHECK(result.verdict == (objective == objective_kind::sequence_mean ? proof_verdict::divides_by_zero
                                                                            : proof_verdict::proved));
      // The other reducer's scale is refuted: the world size is what tells them apart.
      const reducer_kind other = reducer == reducer_kind::mean ? reducer_kind::sum : reducer_kind::mean;
      CHECK(prove_recipe(make(objective_scale(objective, other), reducer), objective).verdict == proof_verdict::wrong);
    }
}

TEST_CASE("a sequence objective's counterexample is read back with its sequences and exposes the recipe") {
  const proof_result result = prove_recipe(make("W / N", reducer_kind::mean), objective_kind::sequence_mean);
  REQUIRE(result.counterexample);
  const partition_file file =
      read_partition(result.counterexample->document, "counterexample", {}, normcheck::standard_sections());
  CHECK(file.update.objective == objective_kind::sequence_mean);
  CHECK(file.update.has_sequences());
  const recipe_section* part = file.find_section<recipe_section>();
  REQUIRE(part);
  REQUIRE(part->normalization());
  const recipe_value value = recipe_gradient(file.update, *part->normalization());
  REQUIRE(value.value);
  CHECK(*value.value != *gradient(file.update, strategy::global_mean));
  CHECK(*value.value == *result.counterexample->recipe_gradient);
}

TEST_CASE("a scale that divides by zero only beyond every scope is never proved, and says where") {
  auto check_zero = [](const char* scale, const std::function<std::uint64_t(const count_configuration&)>& count,
                       std::uint64_t at, const char* divisor, const char* wherever) {
    CAPTURE(scale);
    const proof_result result = prove_recipe(make(scale, reducer_kind::mean));
    CHECK(result.verdict == proof_verdict::divides_by_zero);
    REQUIRE(result.counterexample);
    CHECK(count(result.counterexample->where) == at);
    CHECK(result.counterexample->zero_divisor == divisor);
    CHECK(result.coverage.find(wherever) != std::string::npos);
    CHECK_FALSE(result.counterexample->recipe_gradient.has_value());  // the replayed partition divides by zero
  };
  check_zero("W/N*(N-777)/(N-777)", [](const count_configuration& c) { return c.valid_tokens; }, 777, "(N-777)",
             "0 wherever N = 777");
  check_zero("W/N*(G-17)/(G-17)", [](const count_configuration& c) { return c.microbatches; }, 17, "(G-17)",
             "0 wherever G = 17");
  check_zero("W/N*(W-65)/(W-65)", [](const count_configuration& c) { return c.world_size; }, 65, "(W-65)",
             "0 wherever W = 65");
  check_zero("W/N*(n_m-1001)/(n_m-1001)", [](const count_configuration& c) { return c.microbatch_tokens; }, 1001,
             "(n_m-1001)", "0 wherever n_m = 1001");
  check_zero("W / N * (N - 2*n_r - 1000) / (N - 2*n_r - 1000)", [](const count_configuration& c) {
    return c.valid_tokens - 2 * c.rank_tokens;
  }, 1000, "(N - 2*n_r - 1000)", "is 0 at");
}

TEST_CASE("a weighted scale whose mass divisor vanishes beyond the scopes is never proved") {
  const proof_result result =
      prove_recipe(make("W/M*(M-1000)/(M-1000)", reducer_kind::mean), objective_kind::weighted_token_mean);
  CHECK(result.verdict == proof_verdict::divides_by_zero);
  REQUIRE(result.counterexample);
  REQUIRE(result.counterexample->where.masses);
  CHECK((*result.counterexample->where.masses)[0] == 1000);
}

TEST_CASE("a divisor neither shown nonzero nor found zero keeps the scale from being proved") {
  // N² − 2 has no integer zero, but the certificate cannot show it (a negative constant term).
  const proof_result result = prove_recipe(make("W/N*(N*N-2)/(N*N-2)", reducer_kind::mean));
  CHECK(result.verdict == proof_verdict::checked);
  CHECK(result.coverage.find("could not be shown nonzero") != std::string::npos);
  // Divisors that are sums of positive terms are shown nonzero, and the scale is proved.
  CHECK(prove_recipe(make("W/N*(N+n_r+1)/(N+n_r+1)", reducer_kind::mean)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(make("W*G/(N*G)", reducer_kind::mean)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(make("W/N*(N-n_r+1)/(N-n_r+1)", reducer_kind::mean)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(make("W/(M+m_m-m_m)", reducer_kind::mean), objective_kind::weighted_token_mean).verdict ==
        proof_verdict::proved);
}

TEST_CASE("the grid for all counts is capped alike under every objective") {
  // Eight names of degree 5 under the weighted token mean: 6^8 grid points, past the cap of a million. A prover
  // that walks that grid says proved after 1,679,616 evaluations instead.
  const std::string sum = "(N+n_r+n_m+G+m_r+m_m+1)";
  const proof_result result = prove_recipe(
      make("W/M*" + sum + "*" + sum + "*" + sum + "/(" + sum + "*" + sum + "*" + sum + ")", reducer_kind::mean),
      objective_kind::weighted_token_mean);
  CHECK(result.verdict == proof_verdict::checked);
  CHECK(result.coverage.find("passes 1,000,000 configurations") != std::string::npos);
}

TEST_CASE("under every declared objective a divisor that vanishes beyond the scopes is found, C included") {
  struct zero_case {
    const char* scale;
    objective_kind objective;
    rational at;  // the value of the name the divisor vanishes in, at the counterexample
  };
  const std::function<rational(const count_configuration&)> normalizer = [](const count_configuration& c) {
    return *c.normalizer;
  };
  const std::function<rational(const count_configuration&)> tokens = [](const count_configuration& c) {
    return rational(c.valid_tokens);
  };
  const std::function<rational(const count_configuration&)> sequences = [](const count_configuration& c) {
    return rational(c.sequences->sequences);
  };
  const std::vector<std::pair<zero_case, std::function<rational(const count_configuration&)>>> cases{
      {{"W / C * (C - 65) / (C - 65)", objective_kind::constant, rational(65)}, normalizer},
      {{"W / C * (C - 1000) / (C - 1000)", objective_kind::constant, rational(1000)}, normalizer},
      {{"W / C * (13*C - 2) / (13*C - 2)", objective_kind::constant, fraction(2, 13)}, normalizer},
      {{"W / C * (9*C - 1) / (9*C - 1)", objective_kind::constant, fraction(1, 9)}, normalizer},
      {{"W / C * (169*C*C - 4) / (169*C*C - 4)", objective_kind::constant, fraction(2, 13)}, normalizer},
      {{"W / B * (N - 777) / (N - 777)", objective_kind::sequence_sum_mean, rational(777)}, tokens},
      {{"W / B * (B - 9) / (B - 9)", objective_kind::sequence_sum_mean, rational(9)}, sequences},
  };
  for (const auto& entry : cases) {
    const zero_case& c = entry.first;  // not a structured binding: CAPTURE's lambda must capture it (clang 14)
    const auto& value = entry.second;
    CAPTURE(c.scale);
    const proof_result result = prove_recipe(make(c.scale, reducer_kind::mean), c.objective);
    CHECK(result.verdict == proof_verdict::divides_by_zero);
    REQUIRE(result.counterexample);
    CHECK(value(result.counterexample->where) == c.at);
    CHECK_FALSE(result.counterexample->recipe_gradient.has_value());  // the replayed partition divides by zero
  }
  // Divisors that cannot vanish there are still proved.
  CHECK(prove_recipe(make("W / C * (C + 1) / (C + 1)", reducer_kind::mean), objective_kind::constant).verdict ==
        proof_verdict::proved);
  CHECK(prove_recipe(make("W / B * (B + N) / (B + N)", reducer_kind::mean), objective_kind::sequence_sum_mean)
            .verdict == proof_verdict::proved);
}

namespace {

recipe on_mesh(std::string_view scale, std::string_view mesh, reducer_kind reducer = reducer_kind::mean) {
  return recipe{recipe_expression::parse(scale, recipe_names(recipe_names::parse_mesh(mesh), "")), reducer};
}

recipe for_term(std::string_view scale, std::string_view term) {
  return recipe{recipe_expression::parse(scale, recipe_names({}, std::string(term))), reducer_kind::mean};
}

// The gate's explanations of a counterexample document, the main loss's and every term's.
std::vector<std::string> named_by_check(const std::string& document) {
  const file_report report = check_text(document, "counterexample");
  REQUIRE(report.document);
  CHECK(report.status == file_status::fail);
  const gate_section* gate = report.document->find_section<gate_section>();
  REQUIRE(gate);
  REQUIRE(gate->result());
  std::vector<std::string> names;
  for (const explanation& e : gate->result()->diagnosis) names.push_back(e.name);
  return names;
}

}  // namespace

TEST_CASE("a mesh's names are its dimensions' sizes in capitals and the counts reduced over one role") {
  const recipe_names names(recipe_names::parse_mesh("dp:data,cp:sequence,tp:replica"), "");
  CHECK(names.spelling(count_variable::data_size) == "DP");
  CHECK(names.spelling(count_variable::sequence_size) == "CP");
  CHECK(names.spelling(count_variable::replica_size) == "TP");
  CHECK(names.spelling(count_variable::over_data) == "N_dp");
  CHECK(names.spelling(count_variable::over_sequence) == "N_cp");
  CHECK(names.find("N_cp") == count_variable::over_sequence);
  CHECK_FALSE(names.offers(count_variable::main_N));
  // Without a mesh none of them is a name.
  CHECK(parse_error_of("W / N_dp").code() == error_code::recipe_error);
  CHECK(parse_error_of("TP / N").code() == error_code::recipe_error);
  const recipe_names term({}, "mtp");
  CHECK(term.spelling(count_variable::N) == "N_mtp");
  CHECK(term.spelling(count_variable::n_r) == "n_r_mtp");
  CHECK(term.spelling(count_variable::main_N) == "N");
}

TEST_CASE("a bad --mesh is a usage error with its column") {
  auto refused = [](std::string_view text) {
    try {
      recipe_names::parse_mesh(text);
    } catch (const error& e) {
      CHECK(e.code() == error_code::usage_error);
      return e;
    }
    FAIL("expected a usage_error for ", text);
    return error(error_code::recipe_error, "");
  };
  CHECK(refused("").message().find("empty") != std::string::npos);
  CHECK(refused("dp").message().find("name:role") != std::string::npos);
  const error role = refused("dp:data,cp:seq");
  CHECK(role.message().find("data, sequence or replica") != std::string::npos);
  CHECK(role.where()->column == 12);
  CHECK(refused("Dp:data").message().find("[a-z]") != std::string::npos);
  CHECK(refused("dp:data,dp:sequence").message().find("twice") != std::string::npos);
  CHECK(refused("dp:data,pp:data").message().find("both have the role data") != std::string::npos);
  CHECK(refused("n:data").message().find("spelled N") != std::string::npos);  // its size would be N
}

TEST_CASE("on a mesh prove decides the counts a rank can reduce") {
  const std::string mesh = "dp:data,cp:sequence,tp:replica";
  CHECK(prove_recipe(on_mesh("W / N", mesh)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(on_mesh("DP * CP / N", mesh)).verdict == proof_verdict::proved);
  CHECK(prove_recipe(on_mesh("1 / N", mesh, reducer_kind::sum)).verdict == proof_verdict::proved);
  // The deliberate mistakes: counted over dp only (verl #5983), on every tp rank, per cp rank, per cp group.
  CHECK(prove_recipe(on_mesh("W / N_dp", mesh)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(on_mesh("W * TP / N", mesh)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(on_mesh("W / (TP * N)", mesh)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(on_mesh("1 / n_r", mesh)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(on_mesh("CP / N_cp", mesh)).verdict == proof_verdict::wrong);
  CHECK(prove_recipe(on_mesh("W / (CP * N)", mesh)).verdict == proof_verdict::wrong);
  // A count reduced over the data dimension is the whole count where the mesh has no sequence dimension.
  CHECK(prove_recipe(on_mesh("W / N_dp", "dp:data,tp:replica")).verdict == proof_verdict::proved);
  CHECK_THROWS_AS(prove_recipe(on_mesh("W / N", mesh), objective_kind::sequence_mean), error);
}

TEST_CASE("a mesh recipe's counterexample is a file with the mesh that check fails and names") {
  const proof_result result = prove_recipe(on_mesh("W / N_dp", "dp:data,cp:sequence"));
  REQUIRE(result.verdict == proof_verdict::wrong);
  REQUIRE(result.counterexample);
  const count_configuration& where = result.counterexample->where;
  REQUIRE(where.mesh);
  CHECK(where.mesh->data >= 2);  // the mesh as declared: every dimension of size 2 or more first
  CHECK(where.mesh->sequence >= 2);
  const partition_file file =
      read_partition(result.counterexample->document, "counterexample", {}, normcheck::standard_sections());
  REQUIRE(file.update.mesh.size() == 2);
  const recipe_section* part = file.find_section<recipe_section>();
  REQUIRE(part);
  REQUIRE(part->normalization());
  const recipe_value value = recipe_gradient(file.update, *part->normalization());
  REQUIRE(value.value);
  CHECK(*value.value == *result.counterexample->recipe_gradient);
  CHECK(*value.value != *gradient(file.update, strategy::global_mean));
  const std::vector<std::string> names = named_by_check(result.counterexample->document);
  CHECK(std::find(names.begin(), names.end(), "count_over_data_dims") != names.end());
}

TEST_CASE("beside a term prove tells the term's count from the main loss's") {
  CHECK(prove_recipe(for_term("W / N_mtp", "mtp")).verdict == proof_verdict::proved);
  const proof_result main_count = prove_recipe(for_term("W / N", "mtp"));  // Megatron-LM #2417
  CHECK(main_count.verdict == proof_verdict::wrong);
  CHECK(prove_recipe(for_term("1 / n_r_mtp", "mtp")).verdict == proof_verdict::wrong);
  REQUIRE(main_count.counterexample);
  REQUIRE(main_count.counterexample->where.main_loss);
  const std::vector<std::string> names = named_by_check(main_count.counterexample->document);
  CHECK(std::find(names.begin(), names.end(), "term mtp: main_count") != names.end());
}
