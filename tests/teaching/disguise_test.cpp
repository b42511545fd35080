// The disguise demo's claim, checked against a direct recurrence written here from the definitions:
// identical iterates under plain SGD and under momentum alone, parting with weight decay and with clipping.

#include "normcheck/teaching/demo.hpp"

#include <doctest/doctest.h>

#include <sstream>

using normcheck::rational;

namespace {

rational parameter(std::string_view text) { return normcheck::read_number(text, normcheck::literal_form::json_string); }

// One optimizer written out step by step: g = slope·(x − optimum), clipped to [−c, c], plus λ·x,
// into a heavy-ball buffer (b = d on the first step), then x ← x − η·b.
struct recurrence {
  rational slope;
  rational optimum;
  rational eta;
  rational lambda;
  rational mu;
  std::optional<rational> clip;

  std::vector<rational> run(rational x, std::size_t steps) const {
    std::vector<rational> path{x};
    rational buffer;
    for (std::size_t t = 0; t < steps; ++t) {
      rational g = slope * (x - optimum);
      if (clip && g > *clip) g = *clip;
      if (clip && g < -*clip) g = -*clip;
      rational d = g + lambda * x;
      if (t == 0) buffer = d;
      else buffer = mu * buffer + d;
      rational used = mu == 0 ? d : buffer;
      x = x - eta * used;
      path.push_back(x);
    }
    return path;
  }
};

struct expected_parting {
  std::optional<std::size_t> step;
  rational gap;
};

expected_parting parting_of(const std::vector<rational>& a, const std::vector<rational>& b) {
  for (std::size_t t = 0; t < a.size(); ++t)
    if (a[t] != b[t]) return {t, a[t] - b[t]};
  return {std::nullopt, 0};
}

// The independent side: k and the optimum from the tokens themselves, the parameters as the demo states them.
struct independent_setup {
  rational k;
  rational optimum;
  rational start;
};

independent_setup from_tokens(const normcheck::token_layout& tokens, const rational& theta, bool summing) {
  rational total;
  rational count;
  for (const auto& rank : tokens)
    for (const auto& microbatch : rank)
      for (const normcheck::token& t : microbatch)
        if (t) {
          total += *t;
          count += 1;
        }
  const rational world(tokens.size());
  // Under a sum W·Sᵣ/N delivers W times the objective; under a mean Sᵣ delivers N/W times it.
  rational k = world;
  if (!summing) k = count / world;
  rational optimum = total / count;
  return {k, optimum, theta};
}

void check_against_recurrence(const normcheck::disguise_facts& facts, const independent_setup& setup) {
  const normcheck::disguise_parameters& p = facts.parameters;
  CHECK(facts.factor == setup.k);
  CHECK(facts.optimum == setup.optimum);
  const rational c = abs(setup.start - setup.optimum);
  CHECK(facts.clip_threshold == c);
  for (const normcheck::disguise_run& run : facts.runs) {
    CAPTURE(run.feature);
    recurrence a{setup.k, setup.optimum, p.learning_rate, 0, 0, std::nullopt};
    if (run.feature.find("weight decay") != std::string::npos) a.lambda = p.weight_decay;
    if (run.feature.find("momentum") != std::string::npos) a.mu = p.momentum;
    if (run.feature.find("clipping") != std::string::npos) a.clip = c;
    recurrence b = a;
    b.slope = 1;
    b.eta = setup.k * p.learning_rate;
    const std::vector<rational> expected_a = a.run(setup.start, p.steps);
    const std::vector<rational> expected_b = b.run(setup.start, p.steps);
    CHECK(run.mistaken_path == expected_a);
    CHECK(run.disguised_path == expected_b);
    const expected_parting expected = parting_of(expected_a, expected_b);
    REQUIRE(run.parts.has_value() == expected.step.has_value());
    if (expected.step) {
      CHECK(run.parts->step == *expected.step);
      CHECK(run.parts->gap == expected.gap);
    }
  }
}

std::optional<std::size_t> first_step(const normcheck::disguise_facts& facts, std::string_view feature) {
  for (const normcheck::disguise_run& run : facts.runs)
    if (run.feature == feature) return run.parts ? std::optional<std::size_t>(run.parts->step) : std::nullopt;
  FAIL("no run named " << feature);
  return std::nullopt;
}

}  // namespace

TEST_CASE("the built-in disguise matches the direct recurrence at every step") {
  const normcheck::demo_input input = normcheck::builtin_input("disguise");
  REQUIRE(input.tokens);
  const normcheck::disguise_facts facts =
      normcheck::compute_disguise(input, normcheck::default_disguise_parameters());
  CHECK(facts.mistake == normcheck::strategy::scaled_sum);
  check_against_recurrence(facts, from_tokens(*input.tokens, 0, true));
}

TEST_CASE("the built-in disguise parts first at the asserted steps") {
  const normcheck::disguise_facts facts =
      normcheck::compute_disguise(normcheck::builtin_input("disguise"), normcheck::default_disguise_parameters());
  REQUIRE(facts.runs.size() == 6);
  CHECK(facts.factor == 3);  // W of the three-rank example under the sum reducer
  CHECK_FALSE(first_step(facts, "plain SGD"));
  CHECK(first_step(facts, "weight decay") == std::optional<std::size_t>(2));  // x₀ = 0, so λ·x first acts at step 2
  CHECK_FALSE(first_step(facts, "momentum"));  // the buffer is linear in the gradient
  CHECK(first_step(facts, "momentum and weight decay") == std::optional<std::size_t>(2));
  CHECK(first_step(facts, "clipping by value") == std::optional<std::size_t>(1));
  CHECK(first_step(facts, "clipping by norm") == std::optional<std::size_t>(1));
}

TEST_CASE("the disguise parameters come through the one door") {
  const normcheck::disguise_parameters p = normcheck::default_disguise_parameters();
  CHECK(p.learning_rate == parameter("1/10"));
  CHECK(p.weight_decay == parameter("1/10"));
  CHECK(p.momentum == parameter("9/10"));
  CHECK(p.steps == 8);
}

TEST_CASE("a disguise under the mean reducer away from zero parts at step 1 with weight decay") {
  const normcheck::token_layout tokens{{{normcheck::token{1}}}, {{normcheck::token{4}, normcheck::token{4}}},
                                      {{normcheck::token{-2}, std::nullopt, normcheck::token{5}}}};
  const rational theta = parameter("1/2");
  const normcheck::demo_input input = normcheck::example_input(tokens, theta, normcheck::reducer_kind::mean);
  const normcheck::disguise_facts facts = normcheck::compute_disguise(input, normcheck::default_disguise_parameters());
  CHECK(facts.mistake == normcheck::strategy::local_sum);
  check_against_recurrence(facts, from_tokens(tokens, theta, false));
  CHECK(first_step(facts, "weight decay") == std::optional<std::size_t>(1));
  CHECK_FALSE(first_step(facts, "momentum"));
}

TEST_CASE("the disguise text states each parting the facts hold") {
  const normcheck::disguise_facts facts =
      normcheck::compute_disguise(normcheck::builtin_input("disguise"), normcheck::default_disguise_parameters());
  std::ostringstream out;
  normcheck::render_text(out, normcheck::disguise_document(facts));
  const std::string text = out.str();
  for (const normcheck::disguise_run& run : facts.runs) {
    CAPTURE(run.feature);
    if (run.parts) {
      CHECK(text.find("They part at step " + std::to_string(run.parts->step) + ", by A − B = " +
                      normcheck::to_string(run.parts->gap)) != std::string::npos);
    }
  }
  CHECK(text.find("k = delivered / objective = 3 (= W)") != std::string::npos);
  CHECK(text.find("They never part") != std::string::npos);
}
