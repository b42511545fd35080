// Laws of the gate over random partitions and float programs: the correct normalization never raises
// an alarm, and a wrong one is never passed. Each law keeps a planted wrong gate that it catches.

#include "float_program.hpp"

#include "normcheck/gate/gate.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <functional>

namespace {

using namespace normcheck;
using namespace gate_test;

// Partitions as a data loader produces them: 1..8 ranks, 1..3 microbatches each, 0..6 tokens per
// microbatch with some padding, targets k/8 or k/10 for small k (so float rounding really happens),
// θ a small decimal; at least one valid token.
rc::Gen<token_partition> partitions() {
  return rc::gen::exec([] {
    token_partition p;
    const auto world = *rc::gen::inRange<std::size_t>(1, 9);
    const auto microbatches = *rc::gen::inRange<std::size_t>(1, 4);
    for (std::size_t r = 0; r < world; ++r) {
      std::vector<std::vector<token>> rank;
      for (std::size_t m = 0; m < microbatches; ++m) {
        std::vector<token> mb;
        const auto count = *rc::gen::inRange<std::size_t>(0, 7);
        for (std::size_t i = 0; i < count; ++i) {
          if (*rc::gen::inRange(0, 8) == 0) {
            mb.emplace_back(std::nullopt);
            continue;
          }
          const auto k = *rc::gen::inRange(-40, 41);
          const auto d = *rc::gen::element(1, 8, 10);
          mb.emplace_back(rational(k) / d);
        }
        rank.push_back(std::move(mb));
      }
      p.ranks.push_back(std::move(rank));
    }
    if (to_partition(p).valid_tokens() == 0) p.ranks.back().back().emplace_back(rational(3) / 10);
    p.theta = rational(*rc::gen::inRange(-20, 21)) / 10;
    p.reducer = *rc::gen::element(reducer_kind::mean, reducer_kind::sum);
    return p;
  });
}

// The program's targets are what the float program holds, so the file records those exact values.
template <typename T>
token_partition as_held(const token_partition& p) {
  token_partition held = p;
  for (auto& rank : held.ranks)
    for (auto& mb : rank)
      for (auto& t : mb)
        if (t) t = exact(to_float<T>(*t));
  held.theta = exact(to_float<T>(p.theta));
  return held;
}

template <typename T>
constexpr dtype dtype_of() {
  return sizeof(T) == 4 ? dtype::float32 : dtype::float64;
}

using gate_function = std::function<gate_result(const partition&, const observed_result&)>;

template <typename T>
std::optional<gate_result> judge(const token_partition& tokens, strategy s, const gate_function& gate) {
  const std::optional<T> value = run_program<T>(tokens, s);
  if (!value) return std::nullopt;
  observed_result observed;
  observed.per_rank.push_back(exact(*value));
  observed.type = dtype_of<T>();
  return gate(to_partition(tokens), observed);
}

strategy correct_for(reducer_kind reducer) {
  return reducer == reducer_kind::mean ? strategy::scaled_sum : strategy::global_share;
}

// Law: the correct normalization, computed in floats, always meets the objective within the bound.
template <typename T>
bool no_false_alarm(const gate_function& gate) {
  return rc::check("the correct normalization in floats is never a false alarm", [gate] {
    const token_partition tokens = as_held<T>(*partitions());
    const std::optional<gate_result> result = judge<T>(tokens, correct_for(tokens.reducer), gate);
    RC_ASSERT(result.has_value());
    RC_ASSERT(result->verdict != gate_verdict::fail);
  });
}

// Law: every wrong normalization, computed in floats, is named or reported inconclusive, never passed.
template <typename T>
bool no_wrong_pass(const gate_function& gate) {
  return rc::check("a wrong normalization in floats is never passed", [gate] {
    const token_partition tokens = as_held<T>(*partitions());
    const partition update = to_partition(tokens);
    const bool accumulates = std::any_of(tokens.ranks.begin(), tokens.ranks.end(),
                                         [](const auto& r) { return r.size() > 1; });
    for (strategy s : all_strategies) {
      if (s == strategy::global_mean || s == correct_for(tokens.reducer)) continue;
      const std::optional<gate_result> result = judge<T>(tokens, s, gate);
      if (!result) continue;  // the program divides by zero: nothing to dump
      RC_ASSERT(result->verdict != gate_verdict::pass);
      if (result->verdict == gate_verdict::fail) {
        // Without accumulation, averaging microbatch means is the local-mean computation.
        const strategy named = s == strategy::microbatch_mean && !accumulates ? strategy::local_mean : s;
        const bool listed = std::any_of(result->diagnosis.begin(), result->diagnosis.end(),
                                        [&](const explanation& e) { return e.name == strategy_name(named); });
        RC_ASSERT(listed);
      }
    }
  });
}

// Law: the correct normalization reduced in float16 by a compressing hook (fp16_compress_hook) meets the
// objective within the bound when the dump declares the reduction's dtype.
bool no_false_alarm_in_half_reduction(const gate_function& gate) {
  return rc::check("a correct float32 step reduced in float16, declared so, is never a false alarm", [gate] {
    token_partition tokens = as_held<float>(*partitions());
    tokens.reducer = reducer_kind::mean;  // the compressing hooks divide by W
    const std::optional<float> value = run_program<float>(tokens, strategy::scaled_sum, true);
    RC_ASSERT(value.has_value());
    RC_PRE(std::isfinite(*value));  // beyond float16's range the hook overflows: another finding
    observed_result observed;
    observed.per_rank.push_back(exact(*value));
    observed.type = dtype::float32;
    observed.reduction_type = dtype::float16;
    RC_ASSERT(gate(to_partition(tokens), observed).verdict != gate_verdict::fail);
  });
}

// Planted wrong gates: one compares exactly (no bound), one skips the discrimination check, one ignores
// the reduction's dtype.
gate_result exact_gate(const partition& update, const observed_result& observed) {
  observed_result exact_observed = observed;
  exact_observed.type = dtype::exact;
  return run_gate(update, exact_observed);
}

gate_result gate_ignoring_reduction_dtype(const partition& update, const observed_result& observed) {
  observed_result without = observed;
  without.reduction_type.reset();
  return run_gate(update, without);
}

gate_result gate_without_discrimination(const partition& update, const observed_result& observed) {
  gate_result result = run_gate(update, observed);
  if (result.verdict == gate_verdict::inconclusive) result.verdict = gate_verdict::pass;
  return result;
}

}  // namespace

TEST_CASE("the correct normalization in float32 is never a false alarm") { CHECK(no_false_alarm<float>(run_gate)); }
TEST_CASE("the correct normalization in float64 is never a false alarm") { CHECK(no_false_alarm<double>(run_gate)); }
TEST_CASE("a wrong normalization in float32 is named or inconclusive, never passed") {
  CHECK(no_wrong_pass<float>(run_gate));
}
TEST_CASE("a wrong normalization in float64 is named or inconclusive, never passed") {
  CHECK(no_wrong_pass<double>(run_gate));
}
TEST_CASE("the false-alarm law catches a gate that compares floats exactly") {
  CHECK_FALSE(no_false_alarm<float>(exact_gate));
}
TEST_CASE("the wrong-pass law catches a gate without the discrimination check") {
  CHECK_FALSE(no_wrong_pass<float>(gate_without_discrimination));
}
TEST_CASE("a correct step reduced in float16 and declared so is never a false alarm") {
  CHECK(no_false_alarm_in_half_reduction(run_gate));
}
TEST_CASE("the float16-reduction law catches a gate that ignores the reduction's dtype") {
  CHECK_FALSE(no_false_alarm_in_half_reduction(gate_ignoring_reduction_dtype));
}
