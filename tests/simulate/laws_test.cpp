// The laws of replicated training, checked on random scenarios, each beside a wrong implementation or
// wrong input that the law catches.

#include "scenario_builder.hpp"

#include "normcheck/simulation/simulate.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <functional>

using namespace normcheck;
using normcheck::testing::q;

namespace {

// A small exact value, zero and negatives included.
rational any_small() {
  const int numerator = *rc::gen::inRange(-6, 7);
  const int denominator = *rc::gen::element(1, 2, 3);
  return rational(numerator) / denominator;
}

parameter_vector any_vector(std::size_t d) {
  parameter_vector v;
  for (std::size_t i = 0; i < d; ++i) v.push_back(any_small());
  return v;
}

struct shape {
  bool scalar_only = false;              ///< the teaching loss
  std::size_t min_world_size = 1;
  bool every_rank_holds_tokens = false;  ///< keeps local means defined
};

// A fault-free scenario: W ranks, T steps, random partitions (N > 0 every step), any loss scale and
// reducer, SGD with any momentum, weight decay, clipping and schedule.
scenario any_scenario(const shape& options) {
  scenario s;
  const std::size_t world_size = *rc::gen::inRange<std::size_t>(options.min_world_size, 5);
  const std::size_t steps = *rc::gen::inRange<std::size_t>(1, 5);
  s.scalar_model = options.scalar_only || *rc::gen::element(true, false);
  s.dimension = s.scalar_model ? 1 : *rc::gen::inRange<std::size_t>(1, 3);
  s.theta = any_vector(s.dimension);
  for (std::size_t t = 0; t < steps; ++t) {
    step_batch step;
    for (std::size_t r = 0; r < world_size; ++r) {
      rank_batch rank;
      const std::size_t microbatches = *rc::gen::inRange<std::size_t>(1, 3);
      for (std::size_t m = 0; m < microbatches; ++m) {
        const std::size_t tokens = *rc::gen::inRange<std::size_t>(options.every_rank_holds_tokens ? 1 : 0, 4);
        if (s.scalar_model) {
          std::vector<std::optional<rational>> targets;
          for (std::size_t k = 0; k < tokens; ++k) targets.push_back(any_small());
          rank.microbatches.push_back(testing::scalar_microbatch(targets));
        } else {
          std::vector<std::pair<parameter_vector, rational>> samples;
          for (std::size_t k = 0; k < tokens; ++k) samples.emplace_back(any_vector(s.dimension), any_small());
          rank.microbatches.push_back(testing::vector_microbatch(samples, s.dimension));
        }
      }
      step.ranks.push_back(std::move(rank));
    }
    if (step.valid_tokens() == 0) {  // every step has an objective: give one rank a token
      const std::size_t r = *rc::gen::inRange<std::size_t>(0, world_size);
      const parameter_vector x = s.scalar_model ? parameter_vector{rational(1)} : any_vector(s.dimension);
      step.ranks[r].microbatches[0] = testing::vector_microbatch({{x, any_small()}}, s.dimension);
    }
    s.steps.push_back(std::move(step));
  }
  s.loss_scale = *rc::gen::element(strategy::local_mean, strategy::local_sum, strategy::scaled_sum,
                                   strategy::global_share, strategy::microbatch_mean);
  s.reducer = *rc::gen::element(reducer_kind::mean, reducer_kind::sum);
  switch (*rc::gen::inRange(0, 3)) {
    case 0: s.optimizer.schedule.rates = {*rc::gen::element(q("1/10"), q("1/2"), rational(1))}; break;
    case 1: s.optimizer.schedule.rates = {q("1/10"), q("1/20"), q("1/40")}; break;
    default:
      s.optimizer.schedule.rates = {q("1/4")};
      s.optimizer.schedule.decay_every = *rc::gen::inRange<std::uint64_t>(1, 3);
      s.optimizer.schedule.gamma = q("1/2");
  }
  s.optimizer.momentum = *rc::gen::element(rational(0), q("1/2"), q("9/10"));
  s.optimizer.weight_decay = *rc::gen::element(rational(0), q("1/10"));
  if (*rc::gen::element(true, false)) s.optimizer.clip_value = *rc::gen::element(rational(1), rational(2));
  if (*rc::gen::element(true, false)) s.optimizer.clip_norm = *rc::gen::element(rational(1), q("3/2"));
  s.initial_sync = *rc::gen::element(true, false);
  return s;
}

// Every recorded value of every rank equals rank 0's.
void assert_replicas_identical(const simulation& run) {
  for (const replica_state& state : run.start_up) RC_ASSERT(state == run.start_up.front());
  for (const step_record& record : run.steps)
    for (const rank_step& rank : record.ranks) {
      RC_ASSERT(rank.start == record.ranks.front().start);
      RC_ASSERT(rank.applied_gradient == record.ranks.front().applied_gradient);
      RC_ASSERT(rank.end == record.ranks.front().end);
    }
  RC_ASSERT(!run.first_divergence);
}

void law_replicas_stay_identical(const scenario& s) {
  const simulation run = simulate(s);
  assert_replicas_identical(run);
  if (run.stopped) RC_ASSERT(run.stopped->cause == halt_cause::undefined_local_loss);
}

// The compensated local scalar for the reducer: W·Sᵣ/N under mean, Sᵣ/N under sum.
strategy compensated(reducer_kind reducer) {
  return reducer == reducer_kind::mean ? strategy::scaled_sum : strategy::global_share;
}

void law_equals_reference(const scenario& s) {
  const simulation run = simulate(s);
  RC_ASSERT(!run.stopped);
  for (const replica_state& state : run.start_up) RC_ASSERT(state.theta == run.reference_start.theta);
  for (const step_record& record : run.steps)
    for (const rank_step& rank : record.ranks) {
      RC_ASSERT(rank.reduced_gradient == record.reference.gradient);
      RC_ASSERT(rank.end == record.reference.end);
    }
  RC_ASSERT(run.equals_reference());
}

// Where a fault first changes anything: the first compared value (in the order a step computes it)
// on which some rank of the faulted run differs from the same rank of the fault-free run.
struct point {
  std::uint64_t step = 0;
  state_part part = state_part::theta;
  bool after_update = false;
  bool operator==(const point&) const = default;
};

std::optional<point> first_effect(const scenario& s, const simulation& clean, const simulation& faulty) {
  const bool with_momentum = s.optimizer.momentum != 0;
  const bool with_scheduler = s.optimizer.schedule.has_scheduler();
  for (std::size_t r = 0; r < clean.start_up.size(); ++r)
    if (clean.start_up[r].theta != faulty.start_up[r].theta) return point{0, state_part::theta, false};
  const std::size_t steps = std::min(clean.steps.size(), faulty.steps.size());
  for (std::size_t i = 0; i < steps; ++i) {
    const std::vector<rank_step>& a = clean.steps[i].ranks;
    const std::vector<rank_step>& b = faulty.steps[i].ranks;
    const std::uint64_t step = i + 1;
    auto differs = [&](auto value_of) {
      for (std::size_t r = 0; r < a.size(); ++r)
        if (!(value_of(a[r]) == value_of(b[r]))) return true;
      return false;
    };
    if (differs([](const rank_step& x) { return x.start.theta; })) return point{step, state_part::theta, false};
    if (with_momentum && differs([](const rank_step& x) { return x.start.momentum; }))
      return point{step, state_part::momentum, false};
    if (with_scheduler && differs([](const rank_step& x) { return x.start.scheduler_position; }))
      return point{step, state_part::scheduler, false};
    if (differs([](const rank_step& x) { return x.applied_gradient; })) return point{step, state_part::gradient, false};
    if (with_momentum && differs([](const rank_step& x) { return x.end.momentum; }))
      return point{step, state_part::momentum, true};
    if (differs([](const rank_step& x) { return x.end.theta; })) return point{step, state_part::theta, true};
  }
  return std::nullopt;
}

// A detector: where it says the replicas first differ.
using detector = std::function<std::optional<point>(const scenario&, const simulation&)>;

std::optional<point> reported(const scenario&, const simulation& run) {
  if (!run.first_divergence) return std::nullopt;
  return point{run.first_divergence->step, run.first_divergence->part, run.first_divergence->after_update};
}

// Wrong: looks at the parameters only.
std::optional<point> theta_only(const scenario&, const simulation& run) {
  for (const replica_state& state : run.start_up)
    if (state.theta != run.start_up.front().theta) return point{0, state_part::theta, false};
  for (const step_record& record : run.steps)
    for (const rank_step& rank : record.ranks)
      if (rank.end.theta != record.ranks.front().end.theta) return point{record.step, state_part::theta, true};
  return std::nullopt;
}

// Wrong: reports each fault where it is injected, whether or not it changes anything.
std::optional<point> at_injection(const scenario& s, const simulation&) {
  for (const fault& f : s.faults) {
    switch (f.kind) {
      case fault_kind::initial_parameters: return point{0, state_part::theta, false};
      case fault_kind::optimizer_state: return point{f.step, state_part::momentum, false};
      case fault_kind::scheduler_step: return point{f.step, state_part::scheduler, false};
      case fault_kind::local_clipping: return point{f.step, state_part::gradient, false};
      case fault_kind::skipped_collective: return std::nullopt;
    }
  }
  return std::nullopt;
}

// A fault-free scenario with W ≥ 2 and one fault whose preconditions it meets.
std::pair<scenario, scenario> any_faulted_pair() {
  scenario clean = any_scenario(shape{false, 2, false});
  fault f;
  f.kind = *rc::gen::element(fault_kind::initial_parameters, fault_kind::optimizer_state, fault_kind::local_clipping,
                             fault_kind::scheduler_step, fault_kind::skipped_collective);
  f.rank = *rc::gen::inRange<std::size_t>(0, clean.world_size());
  f.step = f.kind == fault_kind::initial_parameters ? 0 : *rc::gen::inRange<std::uint64_t>(1, clean.steps.size() + 1);
  switch (f.kind) {
    case fault_kind::initial_parameters:
      clean.initial_sync = false;
      f.value = *rc::gen::element(true, false) ? clean.theta : any_vector(clean.dimension);
      break;
    case fault_kind::optimizer_state:
      if (clean.optimizer.momentum == 0) clean.optimizer.momentum = q("1/2");
      f.value =
          *rc::gen::element(true, false) ? parameter_vector(clean.dimension, rational(0)) : any_vector(clean.dimension);
      break;
    case fault_kind::local_clipping:
      if (!clean.optimizer.clip_value && !clean.optimizer.clip_norm) clean.optimizer.clip_norm = rational(1);
      break;
    case fault_kind::scheduler_step:
      if (!clean.optimizer.schedule.has_scheduler()) clean.optimizer.schedule.rates = {q("1/10"), q("1/20"), q("1/40")};
      break;
    case fault_kind::skipped_collective: break;
  }
  scenario faulty = clean;
  faulty.faults.push_back(f);
  return {clean, faulty};
}

void law_fault_detected_at_effect(const detector& detect) {
  const auto [clean, faulty] = any_faulted_pair();
  const fault& f = faulty.faults.front();
  const simulation clean_run = simulate(clean);
  const simulation faulty_run = simulate(faulty);
  const bool reaches_fault = !clean_run.stopped || clean_run.stopped->step >= f.step;
  if (f.kind == fault_kind::skipped_collective && reaches_fault) {
    RC_ASSERT(faulty_run.stopped);
    RC_ASSERT(faulty_run.stopped->step == f.step);
    RC_ASSERT(faulty_run.stopped->cause == halt_cause::skipped_collective);
    RC_ASSERT(faulty_run.stopped->missing == std::vector<std::size_t>{f.rank});
    RC_ASSERT(!detect(faulty, faulty_run));  // nothing differed before the hang
    return;
  }
  const std::optional<point> effect = first_effect(faulty, clean_run, faulty_run);
  const std::optional<point> found = detect(faulty, faulty_run);
  RC_ASSERT(found == effect);
  if (faulty_run.first_divergence && effect) {
    std::vector<std::size_t> expected;
    for (std::size_t r = 1; r < faulty.world_size(); ++r)
      if (f.rank == 0 || r == f.rank) expected.push_back(r);
    RC_ASSERT(faulty_run.first_divergence->ranks == expected);
  }
}

}  // namespace

TEST_CASE("law: with equal initial state and no fault, replicas stay identical at every step") {
  CHECK(rc::check("replicas stay identical without faults", [] { law_replicas_stay_identical(any_scenario({})); }));
}

TEST_CASE("law: an unsynchronized start with other parameters breaks replica identity") {
  // The wrong input the previous law must reject: initial sync off and rank 1 starting elsewhere.
  CHECK_FALSE(rc::check("replicas stay identical from different starts", [] {
    scenario s = any_scenario(shape{false, 2, false});
    s.initial_sync = false;
    parameter_vector other = s.theta;
    other[0] += 1;
    s.faults.push_back(fault{fault_kind::initial_parameters, 1, 0, other});
    law_replicas_stay_identical(s);
  }));
}

TEST_CASE("law: the compensated normalization equals the single-process global-batch run exactly") {
  CHECK(rc::check("compensated teaching-loss SGD equals the global-batch run", [] {
    scenario s = any_scenario(shape{true, 1, false});
    s.loss_scale = compensated(s.reducer);
    s.optimizer.momentum = *rc::gen::element(q("1/2"), q("9/10"));
    s.optimizer.weight_decay = *rc::gen::element(q("1/10"), q("1/100"));
    law_equals_reference(s);
  }));
  CHECK(rc::check("compensated linear-model SGD equals the global-batch run", [] {
    scenario s = any_scenario({});
    s.loss_scale = compensated(s.reducer);
    law_equals_reference(s);
  }));
}

TEST_CASE("law: averaged local means do not equal the global-batch run") {
  // The wrong implementation the previous law must reject.
  CHECK_FALSE(rc::check("local means equal the global-batch run", [] {
    scenario s = any_scenario(shape{true, 2, true});
    s.reducer = reducer_kind::mean;
    s.loss_scale = strategy::local_mean;
    law_equals_reference(s);
  }));
}

TEST_CASE("law: each injected fault is detected at the step it first has an effect, not before") {
  CHECK(rc::check("faults are detected where they first act", [] { law_fault_detected_at_effect(reported); }));
}

TEST_CASE("law: detectors that look only at theta or only at injection miss the effect") {
  CHECK_FALSE(
      rc::check("a theta-only detector finds faults where they act", [] { law_fault_detected_at_effect(theta_only); }));
  CHECK_FALSE(rc::check("an injection-time detector finds faults where they act",
                        [] { law_fault_detected_at_effect(at_injection); }));
}

TEST_CASE("law: a fault that is overwritten by the initial broadcast is not reported") {
  CHECK(rc::check("initial sync repairs other initial parameters", [] {
    scenario s = any_scenario(shape{false, 2, false});
    s.initial_sync = true;
    const std::size_t rank = *rc::gen::inRange<std::size_t>(1, s.world_size());
    s.faults.push_back(fault{fault_kind::initial_parameters, rank, 0, any_vector(s.dimension)});
    law_replicas_stay_identical(s);
  }));
}
