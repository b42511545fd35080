#include "normcheck/documents/partition_writer.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace normcheck;

namespace {

rational fraction(long p, long q) {
  literal_parts parts;
  parts.negative = p < 0;
  parts.significand = integer(p < 0 ? -p : p);
  parts.denominator = integer(q);
  return to_rational(parts);
}

// Every statistic the gradients are computed from, compared microbatch by microbatch.
void require_same_statistics(const partition& written, const partition& read) {
  REQUIRE(read.ranks.size() == written.ranks.size());
  CHECK(read.reducer == written.reducer);
  CHECK(read.theta == written.theta);
  for (std::size_t r = 0; r < written.ranks.size(); ++r) {
    const rank_stats& a = written.ranks[r];
    const rank_stats& b = read.ranks[r];
    REQUIRE(b.microbatches.size() == a.microbatches.size());
    for (std::size_t m = 0; m < a.microbatches.size(); ++m) {
      CHECK(b.microbatches[m].valid_tokens == a.microbatches[m].valid_tokens);
      CHECK(b.microbatches[m].padding == a.microbatches[m].padding);
      CHECK(b.microbatches[m].target_sum() == a.microbatches[m].target_sum());
      CHECK(b.microbatches[m].target_abs_sum() == a.microbatches[m].target_abs_sum());
    }
  }
}

void require_round_trip(const token_partition& tokens) {
  const std::string text = write_document(tokens);
  const partition written = to_partition(tokens);
  if (written.valid_tokens() == 0) {
    try {
      read_partition(text, "written.json");
      FAIL("a document without valid tokens was read");
    } catch (const error& e) {
      CHECK(e.code() == error_code::no_valid_tokens);
    }
    return;
  }
  const partition_file read = read_partition(text, "written.json");
  require_same_statistics(written, read.update);
  CHECK(compute_gradients(read.update) == compute_gradients(written));
}

// A random exact value: integers, fractions, decimals, binary fractions and long numbers.
rational random_value(std::mt19937_64& rng) {
  literal_parts parts;
  parts.negative = rng() % 2 == 0;
  switch (rng() % 5) {
    case 0: parts.significand = integer(rng() % 10); break;
    case 1:
      parts.significand = integer(rng() % 100);
      parts.denominator = integer(1 + rng() % 20);
      break;
    case 2:
      parts.significand = integer(rng());
      parts.exp2 = parts.exp5 = -static_cast<std::int64_t>(rng() % 30);
      break;
    case 3:
      parts.significand = integer(rng() >> 11);
      parts.exp2 = static_cast<std::int64_t>(rng() % 200) - 100;
      break;
    default: {
      integer big = integer(rng());
      for (int i = 0; i < 4; ++i) big = big * integer(rng()) + 1;
      parts.significand = big;
      parts.denominator = integer(rng() | 1u) * integer(rng() | 1u);
    }
  }
  return to_rational(parts);
}

token_partition random_partition(std::mt19937_64& rng) {
  token_partition tokens;
  tokens.theta = random_value(rng);
  tokens.reducer = rng() % 2 ? reducer_kind::mean : reducer_kind::sum;
  tokens.ranks.resize(1 + rng() % 8);
  for (auto& rank : tokens.ranks) {
    rank.resize(1 + rng() % 3);
    for (auto& microbatch : rank) {
      microbatch.resize(rng() % 6);
      for (token& t : microbatch)
        if (rng() % 5) t = random_value(rng);
    }
  }
  return tokens;
}

}  // namespace

TEST_CASE("write_document writes the documented layout with canonical literals") {
  token_partition tokens;
  tokens.ranks = {{{0}}, {{2, fraction(-3, 2), std::nullopt}}, {{1}, {}}};
  tokens.theta = fraction(1, 3);
  document_options options;
  options.description = "three ranks";
  options.expect = {{strategy::global_mean, fraction(-3, 4)}, {strategy::local_mean, std::nullopt}};
  options.declare_world_size = true;
  CHECK(write_document(tokens, options) ==
        "{\n"
        "  \"format\": \"normcheck/1\",\n"
        "  \"description\": \"three ranks\",\n"
        "  \"ranks\": [\n"
        "    {\"targets\": [0]},\n"
        "    {\"targets\": [2, \"-3/2\", null]},\n"
        "    {\"microbatches\": [[1], []]}\n"
        "  ],\n"
        "  \"world_size\": 3,\n"
        "  \"reducer\": \"mean\",\n"
        "  \"theta\": \"1/3\",\n"
        "  \"expect\": {\"global_mean\": \"-3/4\", \"local_mean\": null}\n"
        "}\n");
}

TEST_CASE("a written document reads back as the same partition") {
  token_partition tokens;
  tokens.ranks = {{{0}}, {{2, 2, 2, std::nullopt}}};
  tokens.reducer = reducer_kind::sum;
  tokens.theta = fraction(-7, 5);
  document_options options;
  options.declare_world_size = true;
  const partition_file read = read_partition(write_document(tokens, options), "doc.json");
  require_same_statistics(to_partition(tokens), read.update);
  REQUIRE(read.declared_world_size);
  CHECK(*read.declared_world_size == 2);
}

TEST_CASE("written expectations are judged by check like any file") {
  token_partition tokens;
  tokens.ranks = {{{0}}, {{2, 2, 2}}};
  document_options options;
  options.expect = {{strategy::global_mean, fraction(-3, 2)}, {strategy::local_mean, fraction(-1, 1)}};
  CHECK(check_text(write_document(tokens, options), "true.json").status == file_status::pass);
  options.expect = {{strategy::local_mean, fraction(-3, 2)}};
  const file_report report = check_text(write_document(tokens, options), "claim.json");
  CHECK(report.status == file_status::fail);
  CHECK(report.failures.size() == 1);
}

TEST_CASE("an all-padding update is written with its expected rejection") {
  token_partition tokens;
  tokens.ranks = {{{std::nullopt}}, {{}, {std::nullopt, std::nullopt}}};
  document_options options;
  options.expect_error = error_code::no_valid_tokens;
  const std::string text = write_document(tokens, options);
  CHECK(text.find("\"expect_error\": \"no_valid_tokens\"") < text.find("\"ranks\""));
  CHECK(check_text(text, "empty.json").status == file_status::pass);
}

TEST_CASE("descriptions are escaped and long values are written whole") {
  token_partition tokens;
  literal_parts tiny;
  tiny.significand = 1;
  tiny.exp2 = tiny.exp5 = -400;
  tokens.ranks = {{{to_rational(tiny), fraction(123456789, 1000000007)}}};
  document_options options;
  options.description = "a \"quoted\"\nline";
  const std::string text = write_document(tokens, options);
  const partition_file read = read_partition(text, "escaped.json");
  CHECK(read.description == options.description);
  require_same_statistics(to_partition(tokens), read.update);
}

TEST_CASE("what no document can say is refused with a stable code") {
  auto code_of = [](const token_partition& tokens, const document_options& options) {
    try {
      write_document(tokens, options);
    } catch (const error& e) {
      return std::optional<error_code>(e.code());
    }
    return std::optional<error_code>();
  };
  token_partition none;
  CHECK(code_of(none, {}) == error_code::schema_error);
  token_partition no_microbatch;
  no_microbatch.ranks = {{{1}}, {}};
  CHECK(code_of(no_microbatch, {}) == error_code::schema_error);
  token_partition good;
  good.ranks = {{{1}}};
  document_options twice;
  twice.expect = {{strategy::global_mean, fraction(1, 1)}, {strategy::global_mean, fraction(1, 1)}};
  CHECK(code_of(good, twice) == error_code::schema_error);
  document_options io;
  io.expect_error = error_code::io_error;
  CHECK(code_of(good, io) == error_code::schema_error);
  literal_parts long_value;
  long_value.significand = 1;
  long_value.exp5 = long_value.exp2 = 100001;
  token_partition too_long;
  too_long.ranks = {{{to_rational(long_value)}}};
  CHECK(code_of(too_long, {}) == error_code::number_out_of_range);
}

TEST_CASE("random partitions survive writing and reading") {
  std::mt19937_64 rng(20240611);
  for (int i = 0; i < 300; ++i) {
    const token_partition tokens = random_partition(rng);
    CAPTURE(write_document(tokens));
    require_round_trip(tokens);
  }
}
