// The exact simulation on hand-computed examples, and against the gradient engine of gradients.hpp.

#include "scenario_builder.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/simulation/simulate.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using normcheck::testing::q;
using normcheck::testing::scalar_scenario;

namespace {

// The worked example: rank 0 holds the target 0, rank 1 the targets 2, 2, 2.
const std::vector<std::vector<rational>> worked{{rational(0)}, {rational(2), rational(2), rational(2)}};

}  // namespace

TEST_CASE("one compensated step moves theta by lr times the token mean gradient") {
  scenario s = scalar_scenario({worked}, 0, strategy::scaled_sum, q("1/10"));
  const simulation run = simulate(s);
  REQUIRE(run.steps.size() == 1);
  const rank_step& rank1 = run.steps[0].ranks[1];
  CHECK(rank1.local_gradient[0] == -3);  // W·S₁/N = 2·(−6)/4
  CHECK(rank1.reduced_gradient[0] == q("-3/2"));
  CHECK(rank1.end.theta[0] == q("3/20"));
  CHECK(run.steps[0].reference.end.theta[0] == q("3/20"));
  CHECK(run.replicas_agree());
  CHECK(run.equals_reference());
}

TEST_CASE("averaged local means keep replicas together but away from the reference") {
  scenario s = scalar_scenario({worked}, 0, strategy::local_mean, q("1/10"));
  const simulation run = simulate(s);
  CHECK(run.steps[0].ranks[0].reduced_gradient[0] == -1);
  CHECK(run.steps[0].ranks[0].end.theta[0] == q("1/10"));
  CHECK(run.replicas_agree());
  CHECK_FALSE(run.equals_reference());
  REQUIRE(run.first_reference_difference);
  CHECK(run.first_reference_difference->step == 1);
  CHECK(run.first_reference_difference->ranks == std::vector<std::size_t>{0, 1});
}

TEST_CASE("the reduced gradient equals the gradient engine for every strategy and reducer") {
  // Rank 0: microbatches [1/2] and [3]; rank 1: [] and [2, -1]; rank 2: [5] and [7, 7].
  const std::vector<std::vector<std::vector<token>>> tokens{
      {{q("1/2")}, {rational(3)}}, {{}, {rational(2), rational(-1)}}, {{rational(5)}, {rational(7), rational(7)}}};
  const rational theta = q("1/3");
  for (reducer_kind reducer : {reducer_kind::mean, reducer_kind::sum}) {
    const partition p = make_accumulated_partition(tokens, theta, reducer);
    for (strategy loss_scale : all_strategies) {
      if (loss_scale == strategy::global_mean) continue;
      scenario s;
      s.theta = {theta};
      s.loss_scale = loss_scale;
      s.reducer = reducer;
      s.optimizer.schedule.rates = {rational(0)};
      step_batch step;
      for (const auto& rank : tokens) {
        rank_batch batch;
        for (const auto& microbatch : rank) batch.microbatches.push_back(testing::scalar_microbatch(microbatch));
        step.ranks.push_back(batch);
      }
      s.steps = {step};
      const simulation run = simulate(s);
      const std::optional<rational> engine = gradient(p, loss_scale);
      CAPTURE(strategy_name(loss_scale));
      CAPTURE(reducer_name(reducer));
      if (!engine) {
        REQUIRE(run.stopped);
        CHECK(run.stopped->cause == halt_cause::undefined_local_loss);
        continue;
      }
      REQUIRE(run.steps.size() == 1);
      CHECK(run.steps[0].ranks[0].reduced_gradient[0] == *engine);
      CHECK(run.steps[0].reference.gradient[0] == *gradient(p, strategy::global_mean));
    }
  }
}

TEST_CASE("momentum follows torch SGD with weight decay added before the buffer") {
  // One rank, target 0, θ₀ = 1: g = θ. λ = 1/10, μ = 1/2, lr = 1/10.
  scenario s = scalar_scenario({{{rational(0)}}, {{rational(0)}}}, 1, strategy::local_sum, q("1/10"));
  s.optimizer.momentum = q("1/2");
  s.optimizer.weight_decay = q("1/10");
  const simulation run = simulate(s);
  REQUIRE(run.steps.size() == 2);
  CHECK(run.steps[0].ranks[0].end.momentum[0] == q("11/10"));       // d = 1 + 1/10; buf = d
  CHECK(run.steps[0].ranks[0].end.theta[0] == q("89/100"));
  CHECK(run.steps[1].ranks[0].end.momentum[0] == q("1529/1000"));   // ½·11/10 + (89/100 + 89/1000)
  CHECK(run.steps[1].ranks[0].end.theta[0] == q("7371/10000"));
}

TEST_CASE("clipping by value and by norm is exact") {
  optimizer_config optimizer;
  SUBCASE("by value clamps each coordinate") {
    optimizer.clip_value = rational(1);
    clip_outcome outcome;
    const parameter_vector g{q("-3/2"), q("1/2")};
    CHECK(clip(g, g, optimizer, outcome) == parameter_vector{rational(-1), q("1/2")});
    CHECK(outcome.clipped);
  }
  SUBCASE("by norm in one dimension") {
    optimizer.clip_norm = rational(1);
    clip_outcome outcome;
    CHECK(clip({q("-3/2")}, {q("-3/2")}, optimizer, outcome) == parameter_vector{rational(-1)});
    CHECK(outcome.scale == q("2/3"));
    CHECK_FALSE(outcome.rounded_norm);
  }
  SUBCASE("a rational norm of a vector is exact") {
    optimizer.clip_norm = rational(1);
    clip_outcome outcome;
    const parameter_vector g{rational(3), rational(4)};
    CHECK(clip(g, g, optimizer, outcome) == parameter_vector{q("3/5"), q("4/5")});
    CHECK_FALSE(outcome.rounded_norm);
  }
  SUBCASE("an irrational norm is bounded from above within 2^-64") {
    optimizer.clip_norm = rational(1);
    clip_outcome outcome;
    const parameter_vector g{rational(1), rational(1)};
    const parameter_vector clipped = clip(g, g, optimizer, outcome);
    CHECK(outcome.rounded_norm);
    rational square = clipped[0] * clipped[0] + clipped[1] * clipped[1];
    CHECK(square <= 1);
    rational low = 1 - rational(1) / (integer(1) << 63);
    CHECK(square >= low);
  }
  SUBCASE("a norm at the threshold is not clipped") {
    optimizer.clip_norm = rational(5);
    clip_outcome outcome;
    const parameter_vector g{rational(3), rational(-4)};
    CHECK(clip(g, g, optimizer, outcome) == g);
    CHECK_FALSE(outcome.clipped);
  }
  SUBCASE("value clipping comes first") {
    optimizer.clip_value = rational(2);
    optimizer.clip_norm = rational(100);
    clip_outcome outcome;
    const parameter_vector g{rational(3), rational(4)};
    CHECK(clip(g, g, optimizer, outcome) == parameter_vector{rational(2), rational(2)});
  }
  SUBCASE("a decision taken from another gradient") {
    optimizer.clip_norm = rational(2);
    clip_outcome outcome;
    // The reduced gradient −3/2 needs no clipping; a local gradient −3 says scale by 2/3.
    CHECK(clip({q("-3/2")}, {rational(-3)}, optimizer, outcome) == parameter_vector{rational(-1)});
  }
}

TEST_CASE("a clipping decision from the local gradient splits the replicas at the step it differs") {
  scenario s = scalar_scenario({worked, worked}, 0, strategy::scaled_sum, q("1/10"));
  s.optimizer.clip_norm = rational(2);
  s.faults.push_back(fault{fault_kind::local_clipping, 1, 1, {}});
  const simulation run = simulate(s);
  REQUIRE(run.first_divergence);
  CHECK(run.first_divergence->step == 1);
  CHECK(run.first_divergence->part == state_part::gradient);
  CHECK(run.first_divergence->ranks == std::vector<std::size_t>{1});
  CHECK(run.steps[0].ranks[0].applied_gradient[0] == q("-3/2"));
  CHECK(run.steps[0].ranks[1].applied_gradient[0] == -1);
}

TEST_CASE("step decay follows StepLR") {
  lr_schedule schedule;
  schedule.rates = {rational(1)};
  schedule.decay_every = 2;
  schedule.gamma = q("1/2");
  CHECK(schedule.has_scheduler());
  CHECK(schedule.rate(0) == 1);
  CHECK(schedule.rate(1) == 1);
  CHECK(schedule.rate(2) == q("1/2"));
  CHECK(schedule.rate(4) == q("1/4"));
  lr_schedule list;
  list.rates = {q("1/10"), q("1/20")};
  CHECK(list.rate(7) == q("1/20"));
}

TEST_CASE("initial synchronization overwrites other initial parameters") {
  scenario s = scalar_scenario({worked}, 0, strategy::scaled_sum, q("1/10"));
  s.faults.push_back(fault{fault_kind::initial_parameters, 1, 0, {rational(5)}});
  SUBCASE("on: the replicas agree") {
    s.initial_sync = true;
    CHECK(simulate(s).replicas_agree());
  }
  SUBCASE("off: they differ at start-up") {
    s.initial_sync = false;
    const simulation run = simulate(s);
    REQUIRE(run.first_divergence);
    CHECK(run.first_divergence->step == 0);
    CHECK(run.first_divergence->part == state_part::theta);
    REQUIRE(run.first_reference_difference);
    CHECK(run.first_reference_difference->step == 0);
    CHECK(run.first_reference_difference->ranks == std::vector<std::size_t>{1});
  }
  SUBCASE("on, from rank 0: every replica gets rank 0's parameters, away from the reference") {
    s.initial_sync = true;
    s.faults.front().rank = 0;
    const simulation run = simulate(s);
    CHECK(run.replicas_agree());
    CHECK_FALSE(run.equals_reference());
  }
}

TEST_CASE("a restored momentum buffer is seen at the start of its step") {
  scenario s = scalar_scenario({worked, worked, worked}, 0, strategy::scaled_sum, q("1/10"));
  s.optimizer.momentum = q("9/10");
  s.faults.push_back(fault{fault_kind::optimizer_state, 1, 2, {rational(0)}});
  const simulation run = simulate(s);
  REQUIRE(run.first_divergence);
  CHECK(run.first_divergence->step == 2);
  CHECK(run.first_divergence->part == state_part::momentum);
  CHECK_FALSE(run.first_divergence->after_update);
}

TEST_CASE("a skipped collective halts the run naming who waits and who is missing") {
  scenario s = scalar_scenario({worked, worked, worked}, 0, strategy::scaled_sum, q("1/10"));
  s.steps = testing::scalar_steps({{{rational(1)}, {}, {rational(2)}}, {{rational(1)}, {}, {rational(2)}}});
  s.faults.push_back(fault{fault_kind::skipped_collective, 1, 2, {}});
  const simulation run = simulate(s);
  REQUIRE(run.stopped);
  CHECK(run.stopped->step == 2);
  CHECK(run.stopped->cause == halt_cause::skipped_collective);
  CHECK(run.stopped->waiting == std::vector<std::size_t>{0, 2});
  CHECK(run.stopped->missing == std::vector<std::size_t>{1});
  CHECK(run.steps.size() == 1);
  CHECK_FALSE(run.first_divergence);
  CHECK_FALSE(run.replicas_agree());
}

TEST_CASE("a local mean over an empty rank halts as undefined") {
  scenario s = scalar_scenario({{{rational(1)}, {}}}, 0, strategy::local_mean, q("1/10"));
  const simulation run = simulate(s);
  REQUIRE(run.stopped);
  CHECK(run.stopped->cause == halt_cause::undefined_local_loss);
  CHECK(run.stopped->ranks == std::vector<std::size_t>{1});
}

TEST_CASE("the vector model's gradient is gram times theta minus the target moment") {
  scenario s;
  s.dimension = 2;
  s.scalar_model = false;
  s.theta = {rational(1), rational(0)};
  s.loss_scale = strategy::local_sum;
  s.optimizer.schedule.rates = {rational(1)};
  step_batch step;
  // One token x = (1, 2), y = 3: residual θ·x − y = −2, gradient −2·x = (−2, −4).
  step.ranks.push_back(rank_batch{{testing::vector_microbatch({{{rational(1), rational(2)}, rational(3)}}, 2)}});
  s.steps = {step};
  const simulation run = simulate(s);
  CHECK(run.steps[0].ranks[0].local_gradient == parameter_vector{rational(-2), rational(-4)});
  CHECK(run.steps[0].ranks[0].end.theta == parameter_vector{rational(3), rational(4)});
}

TEST_CASE("check reads a scenario by its declared format") {
  const std::string text = R"({"format": "normcheck-scenario/1", "theta": 0, "optimizer": {"lr": "1/10"},
    "steps": [{"ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}]}],
    "expect": {"replicas_agree": true, "equals_reference": true, "final_theta": ["3/20", "3/20"]}})";
  const file_report report = check_text(text, "inline.json");
  CHECK(report.kind == normcheck::document_kind::scenario);
  CHECK(report.status == file_status::pass);
  CHECK_FALSE(report.details.empty());
}

TEST_CASE("a scenario expectation that does not hold fails with the actual value") {
  const std::string text = R"({"format": "normcheck-scenario/1", "theta": 0, "optimizer": {"lr": "1/10"},
    "loss_scale": "local_mean",
    "steps": [{"ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}]}],
    "expect": {"equals_reference": true, "final_theta": ["3/20", "3/20"]}})";
  const file_report report = check_text(text, "inline.json");
  CHECK(report.status == file_status::fail);
  REQUIRE(report.failures.size() == 3);
  CHECK(report.failures[0].find("expect equals_reference = true, but reference: θ differs") == 0);
  CHECK(report.failures[1] == "expect final_theta of rank 0 = 3/20, but it is 1/10");
}
