// The collective-trace checker: clean runs, the first problem of each kind, and rejected traces.

#include "normcheck/collectives/trace_report.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>

using namespace normcheck;

namespace {

std::string call(int rank, int step, int seq, const std::string& tensor, const std::string& shape = "[4]",
                 const std::string& dtype = "float32", const std::string& op = "all_reduce") {
  return "{\"rank\": " + std::to_string(rank) + ", \"step\": " + std::to_string(step) + ", \"seq\": " +
         std::to_string(seq) + ", \"op\": \"" + op + "\", \"tensor\": \"" + tensor + "\", \"shape\": " + shape +
         ", \"dtype\": \"" + dtype + "\", \"reduce_op\": \"sum\"}\n";
}

// The per-step calls of a small training loop on one rank: a count, then two gradient buckets.
std::string loop(int rank, int steps) {
  std::string text;
  int seq = 0;
  for (int step = 1; step <= steps; ++step) {
    text += call(rank, step, seq++, "valid_tokens", "[1]", "int64");
    text += call(rank, step, seq++, "bucket0", "[4]");
    text += call(rank, step, seq++, "bucket1", "[6]");
  }
  return text;
}

trace_verdict verdict_of(const std::vector<std::string>& files, std::optional<std::size_t> world_size = std::nullopt) {
  collective_trace trace;
  for (std::size_t i = 0; i < files.size(); ++i) trace.add_text(files[i], "rank" + std::to_string(i) + ".jsonl");
  return check_trace(trace, world_size);
}

bool has_note(const trace_problem& problem, const std::string& text) {
  return std::any_of(problem.notes.begin(), problem.notes.end(),
                     [&](const std::string& note) { return note.find(text) != std::string::npos; });
}

// The error the trace `text` is rejected with.
error trace_error(const std::string& text) {
  try {
    collective_trace trace;
    trace.add_text(text, "t.jsonl");
    check_trace(trace);
  } catch (const error& e) {
    return e;
  }
  FAIL("the trace was accepted");
  return error(error_code::usage_error, "");
}

}  // namespace

TEST_CASE("a clean trace in one file per rank holds") {
  const trace_verdict verdict = verdict_of({loop(0, 3), loop(1, 3), loop(2, 3)});
  CHECK(verdict.world_size == 3);
  CHECK(verdict.calls == 27);
  CHECK(verdict.steps == 3);
  CHECK_FALSE(verdict.first_problem);
}

TEST_CASE("a clean trace in one interleaved file holds") {
  const std::string a = loop(0, 2);
  const std::string b = loop(1, 2);
  // Interleave the lines of both ranks, as one shared log would.
  std::istringstream in_a(a), in_b(b);
  std::string text, line;
  while (std::getline(in_a, line)) {
    text += line + "\n";
    if (std::getline(in_b, line)) text += line + "\n";
  }
  CHECK_FALSE(verdict_of({text}).first_problem);
}

TEST_CASE("a skipped collective is a missing call naming who waits") {
  // Rank 1 skips the token count of step 2 (its batch had no label) and goes on to the buckets.
  std::string rank1;
  int seq = 0;
  for (int step = 1; step <= 3; ++step) {
    if (step != 2) rank1 += call(1, step, seq++, "valid_tokens", "[1]", "int64");
    rank1 += call(1, step, seq++, "bucket0", "[4]");
    rank1 += call(1, step, seq++, "bucket1", "[6]");
  }
  const trace_verdict verdict = verdict_of({loop(0, 3), rank1, loop(2, 3)});
  REQUIRE(verdict.first_problem);
  const trace_problem& problem = *verdict.first_problem;
  CHECK(problem.step == 2);
  CHECK(problem.position == 0);
  CHECK(problem.missing_call);
  CHECK(problem.missing == std::vector<std::size_t>{1});
  CHECK(problem.waiting == std::vector<std::size_t>{0, 2});
  CHECK(has_note(problem, "rank 1 skipped all_reduce valid_tokens"));
  CHECK(has_note(problem, "differs: shape ([1] on rank 0, [4] on rank 1)"));
}

TEST_CASE("a rank whose step ends early misses the remaining calls") {
  std::string rank1 = call(1, 1, 0, "valid_tokens", "[1]", "int64") + call(1, 1, 1, "bucket0", "[4]");
  const trace_verdict verdict = verdict_of({loop(0, 1), rank1});
  REQUIRE(verdict.first_problem);
  CHECK(verdict.first_problem->position == 2);
  CHECK(verdict.first_problem->missing == std::vector<std::size_t>{1});
  CHECK(has_note(*verdict.first_problem, "its trace ends there"));
}

TEST_CASE("a reordered pair is named") {
  std::string rank1 = call(1, 1, 0, "valid_tokens", "[1]", "int64") + call(1, 1, 1, "bucket1", "[6]") +
                      call(1, 1, 2, "bucket0", "[4]");
  const trace_verdict verdict = verdict_of({loop(0, 1), rank1});
  REQUIRE(verdict.first_problem);
  CHECK(verdict.first_problem->position == 1);
  CHECK_FALSE(verdict.first_problem->missing_call);
  CHECK(has_note(*verdict.first_problem, "a reordered pair"));
}

TEST_CASE("shape and dtype mismatches name both values") {
  SUBCASE("shape") {
    std::string rank1 = call(1, 1, 0, "valid_tokens", "[1]", "int64") + call(1, 1, 1, "bucket0", "[5]") +
                        call(1, 1, 2, "bucket1", "[6]");
    const trace_verdict verdict = verdict_of({loop(0, 1), rank1});
    REQUIRE(verdict.first_problem);
    CHECK(has_note(*verdict.first_problem, "differs: shape ([4] on rank 0, [5] on rank 1)"));
  }
  SUBCASE("dtype") {
    std::string rank1 = call(1, 1, 0, "valid_tokens", "[1]", "int32") + call(1, 1, 1, "bucket0", "[4]") +
                        call(1, 1, 2, "bucket1", "[6]");
    const trace_verdict verdict = verdict_of({loop(0, 1), rank1});
    REQUIRE(verdict.first_problem);
    CHECK(verdict.first_problem->position == 0);
    CHECK(has_note(*verdict.first_problem, "differs: dtype (int64 on rank 0, int32 on rank 1)"));
  }
  SUBCASE("the majority is the reference, whatever rank 0 did") {
    std::string rank0 = call(0, 1, 0, "valid_tokens", "[2]", "int64");
    std::string others1 = call(1, 1, 0, "valid_tokens", "[1]", "int64");
    std::string others2 = call(2, 1, 0, "valid_tokens", "[1]", "int64");
    const trace_verdict verdict = verdict_of({rank0, others1, others2});
    REQUIRE(verdict.first_problem);
    CHECK(has_note(*verdict.first_problem, "differs: shape ([1] on rank 1, [2] on rank 0)"));
  }
}

TEST_CASE("a rank with no line misses every call when W is given") {
  const trace_verdict verdict = verdict_of({loop(0, 1)}, 2);
  REQUIRE(verdict.first_problem);
  CHECK(verdict.first_problem->step == 1);
  CHECK(verdict.first_problem->position == 0);
  CHECK(verdict.first_problem->missing == std::vector<std::size_t>{1});
}

TEST_CASE("a recorded source line is read, printed with the call, and tells a skipped call of one shape") {
  // Two all-reduces of one shape, labelled alike, issued from two lines; rank 1 skips the first, so its
  // second pairs with rank 0's first and rank 0 waits in its second.
  auto at = [](int rank, int seq, const std::string& source) {
    return "{\"rank\": " + std::to_string(rank) + ", \"step\": 0, \"seq\": " + std::to_string(seq) +
           ", \"op\": \"all_reduce\", \"tensor\": \"all_reduce\", \"shape\": [1], \"dtype\": \"float32\", "
           "\"source\": \"" + source + "\"}\n";
  };
  collective_trace trace;
  trace.add_text(at(0, 0, "train.py:88") + at(0, 1, "train.py:95"), "rank0.jsonl");
  trace.add_text(at(1, 0, "train.py:95"), "rank1.jsonl");
  REQUIRE(trace.sources().size() == 2);
  CHECK(trace.sources()[trace.calls()[0].source] == "train.py:88");
  const trace_verdict verdict = check_trace(trace);
  REQUIRE(verdict.first_problem);
  CHECK(verdict.first_problem->position == 1);
  CHECK(verdict.first_problem->missing == std::vector<std::size_t>{1});
  CHECK(has_note(*verdict.first_problem, "source lines first differ at position 0 of step 0: train.py:88 on rank 0, "
                                         "train.py:95 on rank 1"));
  std::ostringstream text, json;
  print_trace_verdict(text, trace, verdict);
  print_trace_verdict_json(json, trace, verdict);
  CHECK(text.str().find("issued at") != std::string::npos);
  CHECK(text.str().find("train.py:95") != std::string::npos);
  CHECK(json.str().find("\"source\": \"train.py:95\"") != std::string::npos);
}

TEST_CASE("a call is taken for the others' next one only when it comes from the same line") {
  // Rank 0 issues a count at line 10, then an all-reduce of [4] at line 20; rank 1 issues an all-reduce
  // of [4] first: from line 20 it skipped the count, from line 30 it is some other call.
  auto at = [](int rank, int seq, const std::string& shape, const std::string& source) {
    return "{\"rank\": " + std::to_string(rank) + ", \"step\": 0, \"seq\": " + std::to_string(seq) +
           ", \"op\": \"all_reduce\", \"tensor\": \"t\", \"shape\": " + shape +
           ", \"dtype\": \"float32\", \"source\": \"" + source + "\"}\n";
  };
  for (const std::string line : {"a.py:20", "a.py:30"}) {
    collective_trace trace;
    trace.add_text(at(0, 0, "[1]", "a.py:10") + at(0, 1, "[4]", "a.py:20"), "rank0.jsonl");
    trace.add_text(at(1, 0, "[4]", line), "rank1.jsonl");
    const trace_verdict verdict = check_trace(trace);
    REQUIRE(verdict.first_problem);
    const bool skipped = line == "a.py:20";
    CHECK(verdict.first_problem->missing_call == skipped);
    CHECK(has_note(*verdict.first_problem,
                   "rank 1 skipped all_reduce t [1] float32 (step 0, seq 0, issued at a.py:10") == skipped);
  }
}

TEST_CASE("reduce, gather, scatter and all_to_all are read as ops") {
  for (const std::string op : {"reduce", "gather", "scatter", "all_to_all"})
    CHECK_FALSE(verdict_of({call(0, 1, 0, "t", "[2]", "float32", op) + call(1, 1, 0, "t", "[2]", "float32", op)})
                    .first_problem);
}

TEST_CASE("a barrier needs no tensor") {
  const std::string text = "{\"rank\": 0, \"step\": 1, \"seq\": 0, \"op\": \"barrier\"}\n"
                           "{\"rank\": 1, \"step\": 1, \"seq\": 0, \"op\": \"barrier\"}\n";
  CHECK_FALSE(verdict_of({text}).first_problem);
}

TEST_CASE("group and reduce op must match") {
  const std::string text =
      "{\"rank\": 0, \"step\": 1, \"seq\": 0, \"op\": \"all_reduce\", \"tensor\": \"g\", \"shape\": [2], \"dtype\": "
      "\"float32\", \"reduce_op\": \"sum\"}\n"
      "{\"rank\": 1, \"step\": 1, \"seq\": 0, \"op\": \"all_reduce\", \"tensor\": \"g\", \"shape\": [2], \"dtype\": "
      "\"float32\", \"reduce_op\": \"avg\", \"group\": \"dp\"}\n";
  const trace_verdict verdict = verdict_of({text});
  REQUIRE(verdict.first_problem);
  CHECK(has_note(*verdict.first_problem, "differs: group (— on rank 0, dp on rank 1)"));
  CHECK(has_note(*verdict.first_problem, "differs: reduce_op (sum on rank 0, avg on rank 1)"));
}

TEST_CASE("an inconsistent or broken trace is rejected at its line") {
  SUBCASE("a lost line") {
    const error e = trace_error(call(0, 1, 0, "a") + call(0, 1, 2, "b"));
    CHECK(e.code() == error_code::schema_error);
    CHECK(e.message().find("seq jumps from 0 to 2") != std::string::npos);
    REQUIRE(e.where());
    CHECK(e.where()->line == 2);
  }
  SUBCASE("a repeated seq") {
    const error e = trace_error(call(0, 1, 0, "a") + call(0, 1, 0, "b"));
    CHECK(e.message().find("has seq 0 twice") != std::string::npos);
  }
  SUBCASE("a step going back") {
    const error e = trace_error(call(0, 2, 0, "a") + call(0, 1, 1, "b"));
    CHECK(e.message().find("step goes back from 2 to 1") != std::string::npos);
  }
  SUBCASE("a broken line") {
    const error e = trace_error(call(0, 1, 0, "a") + "\n{\"rank\": 0, \"step\": 1,,\n");
    CHECK(e.code() == error_code::parse_error);
    REQUIRE(e.where());
    CHECK(e.where()->file == "t.jsonl");
    CHECK(e.where()->line == 3);
    CHECK(e.where()->column == 23);
  }
  SUBCASE("an unknown key") {
    const error e = trace_error("{\"rank\": 0, \"step\": 1, \"seq\": 0, \"op\": \"barrier\", \"time\": 3}");
    CHECK(e.message().find("unknown key \"time\"") != std::string::npos);
  }
  SUBCASE("a missing field") {
    const error e = trace_error("{\"rank\": 0, \"step\": 1, \"seq\": 0, \"op\": \"all_reduce\", \"tensor\": \"g\"}");
    CHECK(e.message().find("missing shape, dtype") != std::string::npos);
  }
  SUBCASE("a fractional rank") {
    const error e = trace_error("{\"rank\": 0.5, \"step\": 1, \"seq\": 0, \"op\": \"barrier\"}");
    CHECK(e.message().find("rank must be a non-negative integer, found 1/2") != std::string::npos);
  }
  SUBCASE("a rank beyond the given W") {
    try {
      collective_trace trace;
      trace.add_text(call(3, 1, 0, "a"), "t.jsonl");
      check_trace(trace, 2);
      FAIL("accepted");
    } catch (const error& e) {
      CHECK(e.message().find("rank 3 is not below the world size 2") != std::string::npos);
    }
  }
}
