// The demos' numbers against the library on independently built updates, and their documents.

#include "normcheck/teaching/demo.hpp"
#include "normcheck/core/errors.hpp"

#include <doctest/doctest.h>

#include <sstream>

using normcheck::rational;
using normcheck::strategy;
using normcheck::token;

namespace {

rational number(std::string_view text) { return normcheck::read_number(text, normcheck::literal_form::json_string); }

std::string text_of(const normcheck::demo_document& document) {
  std::ostringstream out;
  normcheck::render_text(out, document);
  return out.str();
}

std::string markdown_of(const normcheck::demo_document& document) {
  std::ostringstream out;
  normcheck::render_markdown(out, document);
  return out.str();
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

rational library(const std::vector<std::vector<token>>& ranks, strategy s,
                 normcheck::reducer_kind reducer = normcheck::reducer_kind::mean) {
  return *normcheck::gradient(normcheck::make_partition(ranks, 0, reducer), s);
}

}  // namespace

TEST_CASE("derivation facts equal the library on the worked example") {
  const normcheck::derivation_facts f = normcheck::compute_derivation(normcheck::builtin_input("derivation"));
  const std::vector<std::vector<token>> ranks{{0}, {2, 2, 2}};
  CHECK(f.objective == library(ranks, strategy::global_mean));
  CHECK(f.objective == number("-3/2"));
  REQUIRE(f.local_means);
  CHECK(*f.local_means == library(ranks, strategy::local_mean));
  CHECK(*f.local_means == -1);
  CHECK(f.compensated == library(ranks, strategy::scaled_sum));
  REQUIRE(f.algebra.size() == 3);
  for (const rational& line : f.algebra) CHECK(line == f.objective);
}

TEST_CASE("derivation weights are one over W per rank and one over N per token") {
  const normcheck::derivation_facts f = normcheck::compute_derivation(normcheck::builtin_input("derivation"));
  REQUIRE(f.weights.size() == 2);
  const rational w(2);
  const rational n(4);
  const std::array<std::uint64_t, 2> counts{1, 3};
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    const normcheck::rank_weight& weight = f.weights[r];
    CHECK(weight.valid_tokens == counts[r]);
    REQUIRE(weight.rank_share_local_means);
    CHECK(*weight.rank_share_local_means == 1 / w);
    CHECK(weight.rank_share_objective == rational(counts[r]) / n);
    REQUIRE(weight.token_weight_local_means);
    CHECK(*weight.token_weight_local_means == 1 / (w * counts[r]));
    REQUIRE(weight.token_weight_objective);
    CHECK(*weight.token_weight_objective == 1 / n);
  }
  CHECK(*f.weights[1].token_weight_local_means == number("1/6"));
}

TEST_CASE("derivation control, empty rank and all-empty update") {
  const normcheck::derivation_facts f = normcheck::compute_derivation(normcheck::builtin_input("derivation"));
  CHECK(f.control.update.ranks.size() == 2);
  CHECK(f.control.update.ranks[0].valid_tokens() == 2);
  CHECK(f.control.update.ranks[1].valid_tokens() == 2);
  REQUIRE(f.control_local_means);
  CHECK(*f.control_local_means == library({{0, 2}, {2, 2}}, strategy::local_mean));
  CHECK(*f.control_local_means == f.control_objective);
  CHECK(f.control_compensated == f.control_objective);
  CHECK(f.with_empty_rank.update.world_size() == 3);
  CHECK_FALSE(f.empty_local_means);
  CHECK(f.empty_compensated == library({{0}, {2, 2, 2}, {}}, strategy::scaled_sum));
  CHECK(f.empty_compensated == f.empty_objective);
  REQUIRE(f.all_empty_rejection);
  CHECK(*f.all_empty_rejection == normcheck::error_code::no_valid_tokens);
}

TEST_CASE("the derivation text shows the computed values") {
  const std::string text = text_of(normcheck::derivation_document(
      normcheck::compute_derivation(normcheck::builtin_input("derivation"))));
  CHECK(contains(text, "∇L = (0 + (-6)) / 4 = -3/2 (≈ -1.5)"));
  CHECK(contains(text, "(1/W)·Σ Sᵣ/nᵣ = (0 + (-2)) / 2 = -1"));
  CHECK(contains(text, "1/W = 1/2"));
  CHECK(contains(text, "1/N = 1/4"));
  CHECK(contains(text, "rejected with no_valid_tokens"));
}

TEST_CASE("the derivation's numbers follow the partition, not the built-in example") {
  // Targets 1 and 3,3,3,3,3: S = -1 and -15, N = 6, so the objective is -8/3 and the local means average -2.
  const normcheck::token_layout tokens{{{token{1}}}, {{token{3}, token{3}, token{3}, token{3}, token{3}}}};
  const normcheck::derivation_facts f =
      normcheck::compute_derivation(normcheck::example_input(tokens, 0, normcheck::reducer_kind::mean));
  CHECK(f.objective == number("-8/3"));
  CHECK(*f.local_means == -2);
  const std::string text = text_of(normcheck::derivation_document(f));
  CHECK(contains(text, "= -8/3"));
  CHECK(contains(text, "1/N = 1/6"));
  CHECK_FALSE(contains(text, "-3/2"));
}

TEST_CASE("the derivation on a file's partition uses the built-in tokens for the control") {
  normcheck::demo_input input;
  input.update = normcheck::make_partition({{1, 1}, {}, {5}}, number("1/2"), normcheck::reducer_kind::sum);
  input.origin = "a file";
  const normcheck::derivation_facts f = normcheck::compute_derivation(input);
  CHECK(f.input.update.reducer == normcheck::reducer_kind::mean);
  CHECK(contains(f.input.origin, "mean reducer"));
  CHECK_FALSE(f.local_means);
  CHECK(f.compensated == f.objective);
  REQUIRE(f.weights.size() == 3);
  CHECK_FALSE(f.weights[1].token_weight_objective);
  CHECK(f.weights[1].rank_share_objective == 0);
  CHECK(contains(f.control.origin, "built-in"));
  const std::string text = text_of(normcheck::derivation_document(f));
  CHECK(contains(text, "Σy"));
  CHECK(contains(text, "undefined"));
}

TEST_CASE("accumulation facts equal the library") {
  const normcheck::accumulation_facts f = normcheck::compute_accumulation(normcheck::builtin_input("accumulation"));
  const normcheck::partition p = normcheck::make_accumulated_partition(
      {{{0}, {2, 2, 2}}, {{2, 2}, {2, 2}}}, 0, normcheck::reducer_kind::mean);
  CHECK(f.objective == *normcheck::gradient(p, strategy::global_mean));
  CHECK(f.objective == number("-7/4"));
  CHECK(f.microbatch_means == normcheck::gradient(p, strategy::microbatch_mean));
  CHECK(*f.microbatch_means == number("-3/2"));
  CHECK(*f.rank_means == f.objective);
  // Per-microbatch global counts: (-4/3 + -2) / 2, each slice's mean computed here from its tokens.
  REQUIRE(f.slice_objectives.size() == 2);
  CHECK(f.slice_objectives[0] == library({{0}, {2, 2}}, strategy::global_mean));
  CHECK(f.slice_objectives[1] == library({{2, 2, 2}, {2, 2}}, strategy::global_mean));
  REQUIRE(f.microbatch_global_counts);
  CHECK(*f.microbatch_global_counts == number("-5/3"));
  CHECK(f.update_count == f.objective);
}

TEST_CASE("accumulation weights per token") {
  const normcheck::accumulation_facts f = normcheck::compute_accumulation(normcheck::builtin_input("accumulation"));
  REQUIRE(f.weights.size() == 4);
  // W = 2, G = 2, N = 8; microbatch counts 1, 3, 2, 2; global counts per microbatch index 3 and 5.
  const std::array<std::uint64_t, 4> counts{1, 3, 2, 2};
  const std::array<std::uint64_t, 4> slice_counts{3, 5, 3, 5};
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    const normcheck::microbatch_weight& w = f.weights[i];
    CHECK(w.valid_tokens == counts[i]);
    CHECK(*w.per_microbatch_mean == 1 / (rational(4) * counts[i]));
    CHECK(*w.per_microbatch_count == 1 / (rational(2) * slice_counts[i]));
    CHECK(*w.update_count == number("1/8"));
  }
}

TEST_CASE("accumulation control and empty microbatch") {
  const normcheck::accumulation_facts f = normcheck::compute_accumulation(normcheck::builtin_input("accumulation"));
  REQUIRE(f.control_microbatch_means);
  CHECK(*f.control_microbatch_means == f.control_objective);
  CHECK(f.control_objective == f.objective);
  CHECK_FALSE(f.empty_microbatch_means);
  CHECK(f.empty_update_count == f.empty_objective);
  const std::string text = text_of(normcheck::accumulation_document(f));
  CHECK(contains(text, "= -5/3"));
  CHECK(contains(text, "-7/4"));
}

TEST_CASE("reducer factors name the counts") {
  const normcheck::demo_input input = normcheck::builtin_input("reducers");
  normcheck::partition mean = input.update;
  mean.reducer = normcheck::reducer_kind::mean;
  normcheck::partition sum = input.update;
  sum.reducer = normcheck::reducer_kind::sum;
  const rational w(mean.world_size());
  const rational n(mean.valid_tokens());
  REQUIRE(w != n / w);  // the example keeps the counts apart
  auto factor = [](const normcheck::reducer_facts& f, strategy s) {
    for (const normcheck::strategy_relation& r : f.relations)
      if (r.name == s) return r.factor;
    return std::optional<rational>();
  };
  const normcheck::reducer_facts under_mean = normcheck::compute_reducer(mean);
  const normcheck::reducer_facts under_sum = normcheck::compute_reducer(sum);
  CHECK(factor(under_mean, strategy::scaled_sum) == std::optional<rational>(1));
  CHECK(factor(under_mean, strategy::local_sum) == std::optional<rational>(n / w));
  CHECK(factor(under_mean, strategy::global_share) == std::optional<rational>(1 / w));
  CHECK(factor(under_sum, strategy::global_share) == std::optional<rational>(1));
  CHECK(factor(under_sum, strategy::scaled_sum) == std::optional<rational>(w));
  CHECK(factor(under_sum, strategy::local_sum) == std::optional<rational>(n));
  CHECK_FALSE(factor(under_mean, strategy::local_mean));
  const std::string text = text_of(normcheck::reducers_document(input));
  CHECK(contains(text, "× 3 (= W)"));
  CHECK(contains(text, "× 6 (= N)"));
  CHECK(contains(text, "no fixed factor"));
}

TEST_CASE("markdown has headings, fenced algebra and pipe tables") {
  normcheck::demo_document d;
  d.title = "T";
  d.sections.push_back({"S", {normcheck::demo_paragraph{"p"}, normcheck::demo_display{{"a = b"}},
                              normcheck::demo_table{{"x", "y|z"}, {{"1", "2"}}}}});
  CHECK(markdown_of(d) == "# T\n\n## S\n\np\n\n```text\na = b\n```\n\n| x | y\\|z |\n|---|---|\n| 1 | 2 |\n");
}

TEST_CASE("text wrapping keeps an equation on one line") {
  normcheck::demo_document d;
  d.title = "T";
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "word θ = 0 ";
  d.sections.push_back({"S", {normcheck::demo_paragraph{long_text}}});
  std::istringstream lines(text_of(d));
  std::string line;
  while (std::getline(lines, line)) {
    CAPTURE(line);
    CHECK(line.rfind("= ", 0) != 0);
    CHECK((line.size() < 3 || line.substr(line.size() - 2) != " θ"));
    CHECK((line.size() < 2 || line.substr(line.size() - 2) != " ="));
  }
}

TEST_CASE("every demo in the catalog runs and unknown names are refused") {
  for (const normcheck::demo_info& info : normcheck::demo_catalog()) {
    CAPTURE(info.name);
    const normcheck::demo_output out = normcheck::run_demo(info.name, std::nullopt, info.has_figure);
    CHECK_FALSE(out.document.sections.empty());
    CHECK(out.figure.has_value() == info.has_figure);
  }
  CHECK_THROWS_AS(normcheck::run_demo("nosuch", std::nullopt, false), normcheck::error);
  try {
    (void)normcheck::run_demo("reducers", std::nullopt, true);
    FAIL("a figure was drawn for a demo without one");
  } catch (const normcheck::error& e) {
    CHECK(e.code() == normcheck::error_code::usage_error);
  }
}
