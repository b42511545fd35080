#include "normcheck/documents/partition_writer.hpp"

#include "normcheck/io/json_writer.hpp"

#include <algorithm>

namespace normcheck {

namespace {

[[noreturn]] void refuse(error_code code, const std::string& why) {
  throw error(code, "cannot write a normcheck/1 document: " + why);
}

// An exact value as the document writes it (see json_writer::literal), within the reader's digit limit.
void write_literal(json_writer& json, const rational& value, std::string_view what) {
  const std::string text = to_string(value);
  const std::size_t digits =
      static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }));
  if (digits > number_limits{}.max_digits)
    refuse(error_code::number_out_of_range,
           std::string(what) + " has " + std::to_string(digits) + " digits, more than a reader accepts (" +
               std::to_string(number_limits{}.max_digits) + ")");
  json.literal(value);
}

void write_tokens(json_writer& json, const std::vector<token>& tokens) {
  json.begin_array();
  for (const token& t : tokens) {
    if (t) write_literal(json, *t, "a token value");
    else json.null();
  }
  json.end_array();
}

// A rank's microbatches: one flat array for a single microbatch, an array of arrays otherwise.
void write_microbatches(json_writer& json, const std::vector<std::vector<token>>& microbatches) {
  if (microbatches.size() == 1) return write_tokens(json, microbatches.front());
  json.begin_array();
  for (const std::vector<token>& tokens : microbatches) write_tokens(json, tokens);
  json.end_array();
}

void write_rank(json_writer& json, const std::vector<std::vector<token>>& microbatches,
                const std::vector<std::vector<token>>* weights) {
  json.begin_object().key(microbatches.size() == 1 ? "targets" : "microbatches");
  write_microbatches(json, microbatches);
  if (weights) {
    json.key("weights");
    write_microbatches(json, *weights);
  }
  json.end_object();
}

void write_expect(json_writer& json, const std::vector<expectation>& expect) {
  json.begin_object();
  for (std::size_t i = 0; i < expect.size(); ++i) {
    const std::string_view name = strategy_name(expect[i].name);
    for (std::size_t j = 0; j < i; ++j)
      if (expect[j].name == expect[i].name)
        refuse(error_code::schema_error, "the gradient " + std::string(name) + " is expected twice; a document names each once");
    json.key(name);
    if (expect[i].value) write_literal(json, *expect[i].value, "an expected gradient");
    else json.null();
  }
  json.end_object();
}

}  // namespace

partition to_partition(const token_partition& tokens) {
  if (!tokens.weights.empty()) return make_weighted_partition(tokens.ranks, tokens.weights, tokens.theta, tokens.reducer);
  return make_accumulated_partition(tokens.ranks, tokens.theta, tokens.reducer);
}

std::string write_document(const token_partition& tokens, const document_options& options) {
  std::string out;
  json_writer json(out);
  write_document(json, tokens, options);
  return out + "\n";
}

void write_document(json_writer& json, const token_partition& tokens, const document_options& options) {
  if (tokens.ranks.empty()) refuse(error_code::schema_error, "an update has at least one rank");
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
    if (tokens.ranks[r].empty())
      refuse(error_code::schema_error,
             "rank " + std::to_string(r) + " has no microbatch; a rank takes part with at least one (an empty one if it holds no token)");
  if (options.expect_error &&
      (*options.expect_error == error_code::usage_error || *options.expect_error == error_code::io_error))
    refuse(error_code::schema_error, "expect_error " + std::string(code_name(*options.expect_error)) +
                                         " is not an error a document can produce");

  json.begin_object(json_layout::lines).member("format", format_name);
  if (!options.description.empty()) json.member("description", options.description);
  // expect_error precedes the ranks: a reader finds it among the members before any syntax error.
  if (options.expect_error) json.member("expect_error", code_name(*options.expect_error));
  const bool weighted = !tokens.weights.empty();
  if (weighted) {
    (void)to_partition(tokens);  // refuses weights that do not fit the tokens
    json.member("objective", objective_name(objective_kind::weighted_token_mean));
  }
  json.key("ranks").begin_array(json_layout::lines);
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r) write_rank(json, tokens.ranks[r], weighted ? &tokens.weights[r] : nullptr);
  json.end_array();
  if (options.declare_world_size) json.member("world_size", std::uint64_t{tokens.ranks.size()});
  json.member("reducer", reducer_name(tokens.reducer)).key("theta");
  write_literal(json, tokens.theta, "theta");
  if (options.recipe_scale)
    json.key("recipe")
        .begin_object()
        .member("scale", *options.recipe_scale)
        .member("reducer", reducer_name(options.recipe_reducer))
        .end_object();
  if (!options.expect.empty()) {
    json.key("expect");
    write_expect(json, options.expect);
  }
  json.end_object();
}

}  // namespace normcheck
