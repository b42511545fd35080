// Reading normcheck/1 documents (reader.hpp): every schema rule of the format, each with its code and
// the line:column it is reported at. Documents put one member per line, indented by two spaces, so a
// key starts at column 3 and columns are easy to count.

#include "normcheck/check/check.hpp"
#include "normcheck/core/normalization.hpp"
#include "normcheck/core/sequence_join.hpp"
#include "normcheck/documents/kind.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace {

using normcheck::error;
using normcheck::reader_limits;

// "code at line:column" for the first problem of a document, or "accepted".
std::string rejection(std::string_view text, const reader_limits& limits = {}) {
  try {
    (void)normcheck::read_partition(text, "doc.json", limits, normcheck::standard_sections());
  } catch (const error& e) {
    REQUIRE(e.where().has_value());
    CHECK(e.where()->file == "doc.json");
    return std::string(normcheck::code_name(e.code())) + " at " + std::to_string(e.where()->line) + ":" +
           std::to_string(e.where()->column);
  }
  return "accepted";
}

// The message of the first problem of a document.
std::string message_of(std::string_view text) {
  try {
    (void)normcheck::read_partition(text, "doc.json", {}, normcheck::standard_sections());
  } catch (const error& e) {
    return e.message();
  }
  return "";
}

// A document with a valid format line, `ranks_line` as line 3 and `extra` as line 4 (if any).
std::string document(std::string_view ranks_line, std::string_view extra = "") {
  std::string text = "{\n  \"format\": \"normcheck/1\",\n  ";
  text += ranks_line;
  if (!extra.empty()) {
    text += ",\n  ";
    text += extra;
  }
  return text + "\n}\n";
}

constexpr std::string_view one_rank = R"("ranks": [{"targets": [1]}])";
constexpr std::string_view two_ranks = R"("ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}])";


}  // namespace

TEST_CASE("a complete document is read with all its members") {
  const normcheck::partition_file file = normcheck::read_partition(R"({
  "format": "normcheck/1",
  "description": "two ranks, one with padding",
  "ranks": [{"targets": [0, null]}, {"microbatches": [[2, "1/2"], [], [null, "0x1p+1"]]}],
  "world_size": 2,
  "reducer": "sum",
  "theta": "-3/2",
  "expect": {"global_mean": "-7/2", "local_mean": null},
  "expect_error": "no_valid_tokens"
})", "doc.json");
  CHECK(file.description == "two ranks, one with padding");
  REQUIRE(file.update.world_size() == 2);
  CHECK(file.declared_world_size == 2u);
  CHECK(file.update.reducer == normcheck::reducer_kind::sum);
  CHECK(file.update.theta == normcheck::rational(normcheck::integer(-3), normcheck::integer(2)));
  CHECK(file.update.ranks[0].valid_tokens() == 1);
  CHECK(file.update.ranks[0].padding() == 1);
  CHECK(file.update.ranks[1].microbatches.size() == 3);
  CHECK(file.update.ranks[1].valid_tokens() == 3);
  CHECK(file.update.ranks[1].padding() == 1);
  CHECK(file.update.ranks[1].target_sum() == normcheck::rational(normcheck::integer(9), normcheck::integer(2)));
  REQUIRE(file.expect.size() == 2);
  CHECK(file.expect[0].name == normcheck::strategy::global_mean);
  CHECK(file.expect[0].value == normcheck::rational(normcheck::integer(-7), normcheck::integer(2)));
  CHECK(file.expect[1].name == normcheck::strategy::local_mean);
  CHECK_FALSE(file.expect[1].value.has_value());
  CHECK(file.expect_error == normcheck::error_code::no_valid_tokens);
}

TEST_CASE("optional members take their defaults") {
  const normcheck::partition_file file = normcheck::read_partition(document(one_rank), "doc.json");
  CHECK(file.update.reducer == normcheck::reducer_kind::mean);
  CHECK(file.update.theta == 0);
  CHECK_FALSE(file.declared_world_size.has_value());
  CHECK(file.description.empty());
  CHECK(file.expect.empty());
  CHECK_FALSE(file.expect_error.has_value());
}

TEST_CASE("a leading byte-order mark is skipped") {
  CHECK(rejection("\xEF\xBB\xBF" + document(one_rank)) == "accepted");
}

TEST_CASE("a missing format or ranks is a schema error at the start") {
  CHECK(rejection("{\n  " + std::string(one_rank) + "\n}") == "schema_error at 1:1");
  CHECK(rejection("{\n  \"format\": \"normcheck/1\"\n}") == "schema_error at 1:1");
  CHECK(message_of("{\n  \"format\": \"normcheck/1\"\n}").find("\"ranks\"") != std::string::npos);
}

TEST_CASE("the format must be the string normcheck/1") {
  CHECK(rejection("{\n  \"format\": \"normcheck/2\",\n  " + std::string(one_rank) + "\n}") == "schema_error at 2:13");
  CHECK(rejection("{\n  \"format\": 1,\n  " + std::string(one_rank) + "\n}") == "schema_error at 2:13");
  CHECK(rejection("{\n  \"format\": \"Normcheck/1\",\n  " + std::string(one_rank) + "\n}") == "schema_error at 2:13");
}

TEST_CASE("a document must be an object") {
  CHECK(rejection("[1]") == "schema_error at 1:1");
  CHECK(rejection("\n  \"normcheck/1\"") == "schema_error at 2:3");
}

TEST_CASE("unknown keys are schema errors at the key") {
  CHECK(rejection(document(one_rank, R"("bogus": 1)")) == "schema_error at 4:3");
  CHECK(rejection(document(one_rank, R"("Theta": 1)")) == "schema_error at 4:3");
  CHECK(message_of(document(one_rank, R"("bogus": 1)")).find("format, ranks") != std::string::npos);
  CHECK(rejection(document(R"("ranks": [{"targets": [1], "weight": 2}])")) == "schema_error at 3:30");
  CHECK(rejection(document(R"("ranks": [{"Targets": [1]}])")) == "schema_error at 3:14");
}

TEST_CASE("duplicate keys are schema errors at the second key") {
  CHECK(rejection("{\n  \"format\": \"normcheck/1\",\n  \"format\": \"normcheck/1\",\n  " + std::string(one_rank) +
                  "\n}") == "schema_error at 3:3");
  CHECK(rejection(document(R"("ranks": [{"targets": [1], "targets": [2]}])")) == "schema_error at 3:30");
  CHECK(rejection(document(one_rank, R"("expect": {"local_sum": 1, "local_sum": 1})")) == "schema_error at 4:30");
}

TEST_CASE("a rank has exactly one of targets and microbatches") {
  CHECK(rejection(document(R"("ranks": [{"targets": [1], "microbatches": [[1]]}])")) == "schema_error at 3:13");
  CHECK(rejection(document(R"("ranks": [{}])")) == "schema_error at 3:13");
  CHECK(rejection(document(R"("ranks": [{"targets": [1]}, {}])")) == "schema_error at 3:31");
}

TEST_CASE("ranks and microbatches lists must not be empty") {
  CHECK(rejection(document(R"("ranks": [])")) == "schema_error at 3:12");
  CHECK(rejection(document(R"("ranks": [{"microbatches": []}])")) == "schema_error at 3:30");
  CHECK(rejection(document(R"("ranks": [{"microbatches": [[]]}, {"targets": [1]}])")) == "accepted");
}

TEST_CASE("wrong types in the structure are schema errors at the value") {
  CHECK(rejection(document(R"("ranks": {"targets": [1]})")) == "schema_error at 3:12");
  CHECK(rejection(document(R"("ranks": [[1]])")) == "schema_error at 3:13");
  CHECK(rejection(document(R"("ranks": [{"targets": 1}])")) == "schema_error at 3:25");
  CHECK(rejection(document(R"("ranks": [{"microbatches": [1]}])")) == "schema_error at 3:31");
  CHECK(rejection(document(R"("ranks": [{"targets": [[1]]}])")) == "schema_error at 3:26");
  CHECK(rejection(document(one_rank, R"("description": 5)")) == "schema_error at 4:18");
  CHECK(rejection(document(one_rank, R"("expect": [1])")) == "schema_error at 4:13");
}

TEST_CASE("booleans where numbers belong are schema errors") {
  CHECK(rejection(document(R"("ranks": [{"targets": [1, true]}])")) == "schema_error at 3:29");
  CHECK(rejection(document(one_rank, R"("theta": false)")) == "schema_error at 4:12");
  CHECK(rejection(document(one_rank, R"("world_size": true)")) == "schema_error at 4:17");
  CHECK(rejection(document(one_rank, R"("expect": {"global_mean": true})")) == "schema_error at 4:29");
  CHECK(rejection(document(one_rank, R"("theta": null)")) == "schema_error at 4:12");
}

TEST_CASE("world_size must be a positive integer") {
  CHECK(rejection(document(one_rank, R"("world_size": 1)")) == "accepted");
  CHECK(rejection(document(one_rank, R"("world_size": 0)")) == "schema_error at 4:17");
  CHECK(rejection(document(one_rank, R"("world_size": -1)")) == "schema_error at 4:17");
  CHECK(rejection(document(one_rank, R"("world_size": 1.5)")) == "schema_error at 4:17");
  CHECK(rejection(document(one_rank, R"("world_size": "1")")) == "schema_error at 4:17");
}

TEST_CASE("a world_size other than the number of ranks is world_size_mismatch") {
  CHECK(rejection(document(two_ranks, R"("world_size": 2)")) == "accepted");
  CHECK(rejection(document(two_ranks, R"("world_size": 3)")) == "world_size_mismatch at 4:17");
  CHECK(rejection(document(two_ranks, R"("world_size": 1)")) == "world_size_mismatch at 4:17");
  CHECK(message_of(document(two_ranks, R"("world_size": 3)")).find("2 ranks") != std::string::npos);
  // Beyond 64 bits it cannot be the number of ranks either.
  CHECK(rejection(document(one_rank, R"("world_size": 1e400)")) == "world_size_mismatch at 4:17");
}

TEST_CASE("the reducer is mean or sum") {
  CHECK(rejection(document(one_rank, R"("reducer": "sum")")) == "accepted");
  CHECK(rejection(document(one_rank, R"("reducer": "mean")")) == "accepted");
  CHECK(rejection(document(one_rank, R"("reducer": "max")")) == "schema_error at 4:14");
  CHECK(rejection(document(one_rank, R"("reducer": "Mean")")) == "schema_error at 4:14");
  CHECK(rejection(document(one_rank, R"("reducer": 1)")) == "schema_error at 4:14");
}

TEST_CASE("expect names only known gradients") {
  CHECK(rejection(document(one_rank, R"("expect": {"global_mean": -1, "token_mean": 1})")) == "schema_error at 4:33");
  CHECK(message_of(document(one_rank, R"("expect": {"token_mean": 1})")).find("microbatch_mean") != std::string::npos);
  CHECK(rejection(document(one_rank, R"("expect": {"global_mean": -1, "local_mean": null})")) == "accepted");
}

TEST_CASE("expect_error names an error code a document can produce") {
  CHECK(rejection(document(one_rank, R"("expect_error": "bogus")")) == "schema_error at 4:19");
  CHECK(rejection(document(one_rank, R"("expect_error": "io_error")")) == "schema_error at 4:19");
  CHECK(rejection(document(one_rank, R"("expect_error": "usage_error")")) == "schema_error at 4:19");
  CHECK(rejection(document(one_rank, R"("expect_error": 2)")) == "schema_error at 4:19");
  for (const char* code : {"parse_error", "schema_error", "bad_number", "number_out_of_range", "world_size_mismatch",
                           "no_valid_tokens", "limit_exceeded"}) {
    CAPTURE(code);
    CHECK(rejection(document(one_rank, std::string(R"("expect_error": ")") + code + "\"")) == "accepted");
  }
}

TEST_CASE("bad literals are located at the literal") {
  CHECK(rejection(document(R"("ranks": [{"targets": [1, "NaN"]}])")) == "bad_number at 3:29");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 01]}])")) == "bad_number at 3:29");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, "1/0"]}])")) == "bad_number at 3:29");
  CHECK(rejection(document(one_rank, R"("theta": "0x1.8")")) == "bad_number at 4:12");
  CHECK(rejection(document(one_rank, R"("expect": {"global_mean": "-"})")) == "bad_number at 4:29");
}

TEST_CASE("out-of-range literals are located at the literal") {
  CHECK(rejection(document(one_rank, R"("theta": 1e10001)")) == "number_out_of_range at 4:12");
  CHECK(rejection(document(R"("ranks": [{"targets": ["0x1p-99999999"]}])")) == "number_out_of_range at 3:26");
}

TEST_CASE("an update without a valid token is no_valid_tokens at the ranks") {
  CHECK(rejection(document(R"("ranks": [{"targets": [null]}, {"targets": []}])")) == "no_valid_tokens at 3:12");
  CHECK(rejection(document(R"("ranks": [{"microbatches": [[], [null, null]]}])")) == "no_valid_tokens at 3:12");
}

TEST_CASE("syntax errors in a document are parse errors") {
  CHECK(rejection(document(one_rank) + "x") == "parse_error at 5:1");
  CHECK(rejection(document(R"("ranks": [{"targets": [1 2]}])")) == "parse_error at 3:28");
}

TEST_CASE("the reader's limits apply to documents") {
  reader_limits shallow;
  shallow.max_depth = 2;
  CHECK(rejection(document(one_rank), shallow) == "limit_exceeded at 3:13");
  reader_limits small_numbers;
  small_numbers.numbers.max_exponent = 2;
  CHECK(rejection(document(one_rank, R"("theta": 1e3)"), small_numbers) == "number_out_of_range at 4:12");
}

TEST_CASE("find_expected_error finds expect_error before a syntax error") {
  CHECK(normcheck::find_expected_error(R"({"format": "normcheck/1", "expect_error": "parse_error", "ranks": [1 2]})") ==
        normcheck::error_code::parse_error);
  CHECK(normcheck::find_expected_error(R"({"ranks": [{"targets": [true]}], "expect_error": "schema_error"})") ==
        normcheck::error_code::schema_error);
  CHECK_FALSE(normcheck::find_expected_error(R"({"ranks": [1 2], "expect_error": "parse_error"})").has_value());
  CHECK_FALSE(normcheck::find_expected_error(R"({"expect_error": "bogus"})").has_value());
  CHECK_FALSE(normcheck::find_expected_error(R"(["expect_error"])").has_value());
  CHECK_FALSE(normcheck::find_expected_error("").has_value());
}

TEST_CASE("weights are read beside their tokens under the weighted objective") {
  const std::string text = document(R"("ranks": [{"targets": [1, null, "0x1p-1"], "weights": [0.5, null, "3/2"]}, )"
                                    R"({"microbatches": [[2], []], "weights": [[2], []]}])",
                                    R"("objective": "weighted_token_mean")");
  const normcheck::partition_file file = normcheck::read_partition(text, "doc.json");
  const normcheck::partition& update = file.update;
  CHECK(update.objective == normcheck::objective_kind::weighted_token_mean);
  CHECK(update.valid_tokens() == 3);
  CHECK(update.mass() == normcheck::rational(4));
  const normcheck::microbatch_stats& first = update.ranks[0].microbatches[0];
  REQUIRE(first.weighted());
  CHECK(first.mass() == normcheck::rational(2));
  CHECK(first.weighted_target_sum() == normcheck::rational(5, 4));  // 1/2·1 + 3/2·1/2
  CHECK(first.padding == 1);
  CHECK(update.ranks[1].microbatches[1].mass() == 0);  // an empty microbatch has mass 0
  CHECK(update.ranks[1].mass() == normcheck::rational(2));
}

TEST_CASE("weighted sequences are read beside their tokens, in one microbatch and in several") {
  constexpr std::string_view weighted = R"("objective": "weighted_token_mean")";
  const std::string text = document(
      R"("ranks": [{"targets": {"sequences": [[1, 2], [3]]}, "weights": {"sequences": [[1, 1], [2]]}}, )"
      R"({"microbatches": [{"sequences": [[4]]}, {"sequences": [[5, null], []]}], )"
      R"("weights": [{"sequences": [[3]]}, {"sequences": [[1, null], []]}]}])",
      weighted);
  const normcheck::partition_file file =
      normcheck::read_partition(text, "doc.json", {}, normcheck::standard_sections());
  const normcheck::partition& update = file.update;
  REQUIRE(update.ranks.size() == 2);
  CHECK(update.group_count() == 5);
  CHECK(update.ranks[0].weighted_target_sum() == normcheck::rational(9));   // 1·1 + 1·2 + 2·3
  CHECK(update.ranks[1].weighted_target_sum() == normcheck::rational(17));  // 3·4 + 1·5
  CHECK(rejection(document(R"("ranks": [{"targets": {"sequences": [[1]]}, "weights": [1]}])", weighted)) ==
        "schema_error at 3:58");
  CHECK(rejection(document(R"("ranks": [{"targets": [1], "weights": {"sequences": [[1]]}}])", weighted)) ==
        "schema_error at 3:41");
}

TEST_CASE("weights and the objective must agree, each rejection at its place") {
  constexpr std::string_view weighted = R"("objective": "weighted_token_mean")";
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [1, 2]}])")) == "schema_error at 3:44");
  CHECK(rejection(document(R"("ranks": [{"targets": [1], "weights": [1]}, {"targets": [2]}])", weighted)) ==
        "schema_error at 3:47");
  CHECK(rejection(document(R"("ranks": [{"targets": [1]}])", R"("objective": "weighted")")) == "schema_error at 4:16");
  CHECK(rejection(document(R"("ranks": [{"targets": [1]}])", R"("recipe": {"scale": "W / M"})")) ==
        "recipe_error at 4:13");
}

TEST_CASE("a weight is an exact non-negative number beside each valid token, null beside padding") {
  constexpr std::string_view weighted = R"("objective": "weighted_token_mean")";
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [1, -0.5]}])", weighted)) ==
        "bad_number at 3:48");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [1, "-1/2"]}])", weighted)) ==
        "bad_number at 3:48");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [1, -0]}])", weighted)) == "accepted");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, null], "weights": [1, 1]}])", weighted)) ==
        "schema_error at 3:51");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [1, null]}])", weighted)) ==
        "schema_error at 3:48");
  CHECK(rejection(document(R"("ranks": [{"targets": [1], "weights": [1, 2]}])", weighted)) == "schema_error at 3:45");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [1]}])", weighted)) == "schema_error at 3:44");
  CHECK(rejection(document(R"("ranks": [{"microbatches": [[1], [2]], "weights": [[1]]}])", weighted)) ==
        "schema_error at 3:53");
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [true, 1]}])", weighted)) ==
        "schema_error at 3:45");
}

TEST_CASE("weights that sum to zero leave no objective") {
  constexpr std::string_view weighted = R"("objective": "weighted_token_mean")";
  CHECK(rejection(document(R"("ranks": [{"targets": [1, 2], "weights": [0, 0]}])", weighted)) ==
        "no_valid_tokens at 3:12");
  CHECK(message_of(document(R"("ranks": [{"targets": [1, 2], "weights": [0, 0]}])", weighted)).find("M = 0") !=
        std::string::npos);
}

TEST_CASE("observed values may be NaN or an infinity as float.hex() prints them; targets may not") {
  CHECK(rejection(document(two_ranks, R"("observed": {"per_rank": ["nan", "nan"], "dtype": "float32"})")) ==
        "accepted");
  CHECK(rejection(document(two_ranks, R"("observed": {"gradient": "-inf", "dtype": "float32"})")) == "accepted");
  CHECK(rejection(document(two_ranks, R"("observed": {"gradient": "NaN", "dtype": "float32"})")) ==
        "bad_number at 4:28");
  CHECK(rejection(document(R"("ranks": [{"targets": ["nan"]}])")) == "bad_number at 3:26");
}

TEST_CASE("reduction_dtype and divided_by are read and checked against the ranks") {
  CHECK(rejection(
            document(two_ranks, R"("observed": {"gradient": 1, "dtype": "float32", "reduction_dtype": "float16"})")) ==
        "accepted");
  CHECK(
      rejection(document(two_ranks, R"("observed": {"gradient": 1, "dtype": "float32", "reduction_dtype": "fp8"})")) ==
      "schema_error at 4:70");
  CHECK(rejection(document(two_ranks,
                           R"("observed": {"gradient": 1, "dtype": "exact", "tokens": {"divided_by": [4, 4]}})")) ==
        "accepted");
  CHECK(rejection(document(two_ranks,
                           R"("observed": {"gradient": 1, "dtype": "exact", "tokens": {"divided_by": [4]}})")) ==
        "schema_error at 4:74");
  CHECK(rejection(document(
            two_ranks, R"("observed": {"gradient": 1, "dtype": "exact", "tokens": {"divided_by": [4, [4, 4]]}})")) ==
        "schema_error at 4:74");
  CHECK(message_of(document(two_ranks,
                            R"("observed": {"gradient": 1, "dtype": "exact", "tokens": {"divided_by": [4, [4, 4]]}})"))
            .find("gives rank 1 2 divisors for its 1 microbatches") != std::string::npos);
}

TEST_CASE("slices of one sequence on the ranks of a sequence dimension are joined into it") {
  // dp 2 × cp 2: sequence "a" of data coordinate 0 is split over ranks 0 and 1 (3 valid tokens), "b" holds
  // tokens on rank 1 only; data coordinate 1 reuses the ID "a" for a sequence of its own (4 tokens).
  constexpr std::string_view text = R"({"format": "normcheck/1", "objective": "sequence_mean",
    "mesh": {"dims": [{"name": "dp", "size": 2, "role": "data"}, {"name": "cp", "size": 2, "role": "sequence"}]},
    "ranks": [
      {"targets": {"sequences": [{"sequence": "a", "targets": [1, 2]}, {"sequence": "b", "targets": [null]}]}},
      {"targets": {"sequences": [{"sequence": "a", "targets": [3, null]}, {"sequence": "b", "count": 2, "value": 5}]}},
      {"targets": {"sequences": [{"sequence": "a", "targets": [1]}]}},
      {"targets": {"sequences": [{"sequence": "a", "targets": [2, 3, 4]}]}}]})";
  const normcheck::partition_file file =
      normcheck::read_partition(text, "doc.json", {}, normcheck::standard_sections());
  const normcheck::sequence_join join(file.update);
  REQUIRE(join.joins());
  CHECK(join.sequences() == 3);
  CHECK(file.update.sequence_count() == 3);
  CHECK(join.slices() == 6);
  CHECK(join.sequence_tokens(0, 0, 0) == 3);  // "a" of dp 0: 2 tokens on rank 0, 1 on rank 1
  CHECK(join.sequence_tokens(1, 0, 0) == 3);
  CHECK(join.sequence_tokens(0, 0, 1) == 2);  // "b": its slice on rank 0 holds padding only
  CHECK(join.sequence_tokens(2, 0, 0) == 4);  // "a" of dp 1 is another sequence
  CHECK(join.rank_sequences(0) == 1);         // rank 0 holds a valid token of "a" only
  CHECK(join.rank_sequences(1) == 2);
  CHECK(join.microbatch_sequences(3, 0) == 1);
  // The objective's gradient from the whole sequences at θ = 0: (−6/3 − 10/2 − 10/4)/3.
  const normcheck::objective_units units(file.update, file.update.objective);
  CHECK(units.total() == 3);
  CHECK(normcheck::synchronized_gradient(units, *normcheck::find_normalization("scaled_sum")) ==
        normcheck::fraction(-19, 6));
}

TEST_CASE("under the sequence objectives on a sequence mesh every sequence with a valid token is a slice") {
  constexpr std::string_view mesh =
      R"("mesh": {"dims": [{"name": "cp", "size": 2, "role": "sequence"}]})";
  const std::string sliced = document(R"("ranks": [{"targets": {"sequences": [{"sequence": "a", "targets": [1]}]}},
    {"targets": {"sequences": [{"sequence": "a", "targets": [2]}, [3]]}}])",
                                      std::string(mesh) + R"(, "objective": "sequence_mean")");
  CHECK(rejection(sliced) == "schema_error at 4:5");
  CHECK(message_of(sliced).find("rank 1, microbatch 0, sequence 1 is not a slice") == 0);
  // Planted: the same ranks under the token mean, where a whole sequence beside slices is read.
  CHECK(rejection(document(R"("ranks": [{"targets": {"sequences": [{"sequence": "a", "targets": [1]}]}},
    {"targets": {"sequences": [{"sequence": "a", "targets": [2]}, [3]]}}])",
                           mesh)) == "accepted");
}
