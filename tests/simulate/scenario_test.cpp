// Reading normcheck-scenario/1: what is accepted, and each rejection's code and place.

#include "scenario_builder.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/documents/scenario.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace normcheck;
using normcheck::testing::q;

namespace {

// A valid two-rank scenario with `extra` members inserted after the format.
std::string document(const std::string& extra,
                     const std::string& steps = R"([{"ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}]}])") {
  return R"({"format": "normcheck-scenario/1", )" + extra +
         R"("optimizer": {"lr": "1/10", "momentum": "9/10"}, "steps": )" + steps + "}";
}

// The error `text` is rejected with.
error rejection(const std::string& text) {
  try {
    read_scenario(text, "s.json");
  } catch (const error& e) {
    return e;
  }
  FAIL("the scenario was accepted");
  return error(error_code::usage_error, "");
}

}  // namespace

TEST_CASE("a scalar scenario is read into moments") {
  const scenario s =
      read_scenario(document(R"("theta": "1/2", "reducer": "sum", "loss_scale": "global_share", )"), "s.json");
  CHECK(s.world_size() == 2);
  CHECK(s.scalar_model);
  CHECK(s.dimension == 1);
  CHECK(s.theta == parameter_vector{q("1/2")});
  CHECK(s.reducer == reducer_kind::sum);
  CHECK(s.loss_scale == strategy::global_share);
  CHECK(s.optimizer.momentum == q("9/10"));
  REQUIRE(s.steps.size() == 1);
  const microbatch_moments& m = s.steps[0].ranks[1].microbatches[0];
  CHECK(m.valid_tokens == 3);
  CHECK(m.gram == std::vector<rational>{rational(3)});
  CHECK(m.target_moment == parameter_vector{rational(6)});
  CHECK(s.initial_sync);
  CHECK_FALSE(s.has_expect);
}

TEST_CASE("a vector scenario keeps the gram matrix and target moment") {
  const scenario s = read_scenario(
      document(
          R"("theta": [0, 0], )",
          R"([{"ranks": [{"targets": [{"x": [1, 2], "y": 3}, null]}, )"
          R"({"microbatches": [[], [{"x": ["1/2", 0], "y": -1}]]}]}])"),
      "s.json");
  CHECK_FALSE(s.scalar_model);
  CHECK(s.dimension == 2);
  const microbatch_moments& m = s.steps[0].ranks[0].microbatches[0];
  CHECK(m.padding == 1);
  CHECK(m.gram == std::vector<rational>{rational(1), rational(2), rational(2), rational(4)});
  CHECK(m.target_moment == parameter_vector{rational(3), rational(6)});
  CHECK(s.steps[0].ranks[1].microbatches[0].gram == std::vector<rational>(4, rational(0)));
  CHECK(s.steps[0].ranks[1].microbatches[1].target_moment == parameter_vector{q("-1/2"), rational(0)});
}

TEST_CASE("repeat expands a step") {
  const scenario s = read_scenario(
      document(R"("theta": 0, )", R"([{"ranks": [{"targets": [1]}], "repeat": 3}, {"ranks": [{"targets": [2]}]}])"),
      "s.json");
  REQUIRE(s.steps.size() == 4);
  CHECK(s.steps[2].ranks[0].microbatches[0].target_moment[0] == 1);
  CHECK(s.steps[3].ranks[0].microbatches[0].target_moment[0] == 2);
}

TEST_CASE("faults and expectations are read") {
  const scenario s = read_scenario(document(
      R"("theta": 0, "initial_sync": false, "faults": [{"kind": "initial_parameters", "rank": 1, "theta": 2},
         {"kind": "optimizer_state", "rank": 0, "step": 1, "momentum": "1/4"}],
         "expect": {"replicas_agree": false, "first_divergence": {"step": 0, "rank": 1, "state": "theta"},
                    "halt": null, "final_theta": [1, 2]}, )"),
      "s.json");
  REQUIRE(s.faults.size() == 2);
  CHECK(s.faults[0].kind == fault_kind::initial_parameters);
  CHECK(s.faults[0].value == parameter_vector{rational(2)});
  CHECK(s.faults[1].step == 1);
  CHECK(s.has_expect);
  CHECK(s.expect.replicas_agree == false);
  REQUIRE(s.expect.first_divergence);
  REQUIRE(*s.expect.first_divergence);
  CHECK((*s.expect.first_divergence)->part == state_part::theta);
  REQUIRE(s.expect.halt);
  CHECK_FALSE(*s.expect.halt);
  CHECK_FALSE(s.expect.equals_reference);
}

TEST_CASE("rejections carry a code and a place") {
  struct bad {
    const char* what;
    std::string text;
    error_code code;
    const char* message;
  };
  const std::vector<bad> cases{
      {"another format", R"({"format": "normcheck/1"})", error_code::schema_error, "unsupported format"},
      {"an unknown key", document(R"("theta": 0, "lr": 1, )"), error_code::schema_error, "unknown key \"lr\""},
      {"no theta", document(""), error_code::schema_error, "missing key \"theta\""},
      {"global_mean as a local scalar", document(R"("theta": 0, "loss_scale": "global_mean", )"),
       error_code::schema_error, "global_mean is the objective itself"},
      {"a fault on a rank beyond W",
       document(R"("theta": 0, "faults": [{"kind": "skipped_collective", "rank": 2, "step": 1}], )"),
       error_code::schema_error, "names rank 2 but W = 2"},
      {"a fault after the last step",
       document(R"("theta": 0, "faults": [{"kind": "skipped_collective", "rank": 1, "step": 2}], )"),
       error_code::schema_error, "acts at step 2 but the scenario has 1 steps"},
      {"a scheduler fault without a schedule",
       document(R"("theta": 0, "faults": [{"kind": "scheduler_step", "rank": 1, "step": 1}], )"),
       error_code::schema_error, "scheduler_step needs a scheduler"},
      {"a clipping fault without clipping",
       document(R"("theta": 0, "faults": [{"kind": "local_clipping", "rank": 1, "step": 1}], )"),
       error_code::schema_error, "local_clipping needs clipping"},
      {"a restored buffer of the wrong form",
       document(R"("theta": 0, "faults": [{"kind": "optimizer_state", "rank": 1, "step": 1, "momentum": [1]}], )"),
       error_code::schema_error, "must be a number"},
      {"a vector theta with scalar tokens", document(R"("theta": [0, 0], )"), error_code::schema_error,
       "theta is an array (a vector model) but tokens are numbers"},
      {"a step without valid tokens",
       document(R"("theta": 0, )", R"([{"ranks": [{"targets": [1]}]}, {"ranks": [{"targets": [null]}]}])"),
       error_code::no_valid_tokens, "step 2 holds no valid token"},
      {"steps of different widths",
       document(R"("theta": 0, )",
                R"([{"ranks": [{"targets": [1]}]}, {"ranks": [{"targets": [1]}, {"targets": [1]}]}])"),
       error_code::world_size_mismatch, "every step has the same W ranks"},
      {"a stale world_size", document(R"("theta": 0, "world_size": 3, )"), error_code::world_size_mismatch,
       "world_size is 3 but the steps list 2 ranks"},
      {"too many steps", document(R"("theta": 0, )", R"([{"ranks": [{"targets": [1]}], "repeat": 1001}])"),
       error_code::limit_exceeded, "more than the limit of 1000"},
      {"too much work",
       document(
           R"("theta": [0, 0], )",
           R"([{"ranks": [{"targets": [{"x": [1, 0], "y": 1}]}, {"targets": []}, {"targets": []}], "repeat": 1000}])"),
       error_code::limit_exceeded, "12000000 units of work"},
      {"a float where an exact number belongs", document(R"("theta": "NaN", )"), error_code::bad_number, "NaN"},
      {"a duplicate key", document(R"("theta": 0, "theta": 1, )"), error_code::schema_error, "duplicate key"},
  };
  for (const bad& c : cases) {
    CAPTURE(c.what);
    const error e = rejection(c.text);
    CHECK(code_name(e.code()) == code_name(c.code));
    CHECK(e.message().find(c.message) != std::string::npos);
    REQUIRE(e.where());
    CHECK(e.where()->file == "s.json");
  }
}

TEST_CASE("a rejected fault points at the fault") {
  const std::string text = "{\"format\": \"normcheck-scenario/1\", \"theta\": 0,\n"
                           "\"optimizer\": {\"lr\": 1},\n"
                           "\"steps\": [{\"ranks\": [{\"targets\": [1]}]}],\n"
                           "\"faults\": [\n  {\"kind\": \"skipped_collective\", \"rank\": 3, \"step\": 1}]}";
  const error e = rejection(text);
  REQUIRE(e.where());
  CHECK(e.where()->line == 5);
  CHECK(e.where()->column == 3);
}
