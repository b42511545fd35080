#include "normcheck/documents/partition_writer.hpp"

#include "normcheck/check/report.hpp"

#include <algorithm>

namespace normcheck {

namespace {

[[noreturn]] void refuse(error_code code, const std::string& why) {
  throw error(code, "cannot write a normcheck/1 document: " + why);
}

// The canonical literal of an exact value: a JSON number for an integer, a "p/q" string otherwise.
std::string literal(const rational& value, std::string_view what) {
  std::string text = to_string(value);
  const std::size_t digits =
      static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }));
  if (digits > number_limits{}.max_digits)
    refuse(error_code::number_out_of_range,
           std::string(what) + " has " + std::to_string(digits) + " digits, more than a reader accepts (" +
               std::to_string(number_limits{}.max_digits) + ")");
  if (denominator(value) == 1) return text;
  return "\"" + text + "\"";
}

std::string token_list(const std::vector<token>& tokens) {
  std::string out = "[";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ", ";
    out += tokens[i] ? literal(*tokens[i], "a token value") : std::string("null");
  }
  return out + "]";
}

std::string rank_object(const std::vector<std::vector<token>>& microbatches,
                        const std::vector<std::vector<token>>* weights) {
  if (microbatches.size() == 1)
    return "{\"targets\": " + token_list(microbatches.front()) +
           (weights ? ", \"weights\": " + token_list(weights->front()) : std::string()) + "}";
  auto lists = [](const std::vector<std::vector<token>>& values) {
    std::string out = "[";
    for (std::size_t m = 0; m < values.size(); ++m) out += (m ? ", " : "") + token_list(values[m]);
    return out + "]";
  };
  return "{\"microbatches\": " + lists(microbatches) + (weights ? ", \"weights\": " + lists(*weights) : std::string()) + "}";
}

std::string expect_object(const std::vector<expectation>& expect) {
  std::string out = "{";
  for (std::size_t i = 0; i < expect.size(); ++i) {
    const std::string name(strategy_name(expect[i].name));
    for (std::size_t j = 0; j < i; ++j)
      if (expect[j].name == expect[i].name)
        refuse(error_code::schema_error, "the gradient " + name + " is expected twice; a document names each once");
    out += (i ? ", " : "") + json_quote(name) + ": " +
           (expect[i].value ? literal(*expect[i].value, "an expected gradient") : std::string("null"));
  }
  return out + "}";
}

}  // namespace

partition to_partition(const token_partition& tokens) {
  if (!tokens.weights.empty()) return make_weighted_partition(tokens.ranks, tokens.weights, tokens.theta, tokens.reducer);
  return make_accumulated_partition(tokens.ranks, tokens.theta, tokens.reducer);
}

std::string write_document(const token_partition& tokens, const document_options& options) {
  if (tokens.ranks.empty()) refuse(error_code::schema_error, "an update has at least one rank");
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
    if (tokens.ranks[r].empty())
      refuse(error_code::schema_error,
             "rank " + std::to_string(r) + " has no microbatch; a rank takes part with at least one (an empty one if it holds no token)");
  if (options.expect_error &&
      (*options.expect_error == error_code::usage_error || *options.expect_error == error_code::io_error))
    refuse(error_code::schema_error, "expect_error " + std::string(code_name(*options.expect_error)) +
                                         " is not an error a document can produce");

  std::string out = "{\n  \"format\": " + json_quote(format_name) + ",\n";
  if (!options.description.empty()) out += "  \"description\": " + json_quote(options.description) + ",\n";
  // expect_error precedes the ranks: a reader finds it among the members before any syntax error.
  if (options.expect_error) out += "  \"expect_error\": " + json_quote(code_name(*options.expect_error)) + ",\n";
  const bool weighted = !tokens.weights.empty();
  if (weighted) {
    (void)to_partition(tokens);  // refuses weights that do not fit the tokens
    out += "  \"objective\": \"weighted_token_mean\",\n";
  }
  out += "  \"ranks\": [\n";
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
    out += "    " + rank_object(tokens.ranks[r], weighted ? &tokens.weights[r] : nullptr) +
           (r + 1 < tokens.ranks.size() ? ",\n" : "\n");
  out += "  ],\n";
  if (options.declare_world_size) out += "  \"world_size\": " + std::to_string(tokens.ranks.size()) + ",\n";
  out += "  \"reducer\": " + json_quote(reducer_name(tokens.reducer)) + ",\n";
  out += "  \"theta\": " + literal(tokens.theta, "theta");
  if (options.recipe_scale)
    out += ",\n  \"recipe\": {\"scale\": " + json_quote(*options.recipe_scale) +
           ", \"reducer\": " + json_quote(reducer_name(options.recipe_reducer)) + "}";
  if (!options.expect.empty()) out += ",\n  \"expect\": " + expect_object(options.expect);
  return out + "\n}\n";
}

}  // namespace normcheck
