#pragma once
/// \file recipes/recipe.hpp
/// Normalization recipes: the scale c each group (a sequence, or a microbatch that declares none) multiplies
/// its loss sum by before backward, written as an exact expression over the counts of one update, plus the
/// reducer.

#include "normcheck/core/partition.hpp"
#include "normcheck/core/rational.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// Most numbers, counts and operations one recipe may hold: a bound that keeps every recursion over the
/// expression shallow, however long the text (parentheses and signs are also bounded: 64 levels).
inline constexpr std::size_t recipe_max_nodes = 1000;

/// The counts a recipe may use, in the order of their index (variable_index).
enum class count_variable {
  W,    ///< ranks in the reduction
  N,    ///< valid tokens of the update, all ranks
  n_r,  ///< the rank's valid tokens over its microbatches
  n_m,  ///< the microbatch's valid tokens
  G,    ///< the rank's microbatches in the update
  M,    ///< weight mass of the update (weighted objectives)
  m_r,  ///< the rank's weight mass
  m_m,  ///< the microbatch's weight mass
  B,    ///< sequences of the update that hold a valid token, all ranks
  b_r,  ///< the rank's sequences that hold a valid token
  b_m,  ///< the microbatch's sequences that hold a valid token (0 when it declares none)
  n_s,  ///< the group's valid tokens: its sequence's, or its microbatch's when that declares no sequences
  C,    ///< the declared normalizer (the constant objective)
};

/// Every count variable, in the order of `count_values`.
inline constexpr std::array<count_variable, 13> all_count_variables{
    count_variable::W, count_variable::N,   count_variable::n_r, count_variable::n_m, count_variable::G,
    count_variable::M, count_variable::m_r, count_variable::m_m, count_variable::B,   count_variable::b_r,
    count_variable::b_m, count_variable::n_s, count_variable::C};

/// A variable's index in `all_count_variables` and in `count_values`.
constexpr std::size_t variable_index(count_variable v) { return static_cast<std::size_t>(v); }

/// The spelling of a variable in recipes, e.g. "n_r".
std::string_view variable_name(count_variable v) noexcept;

/// Values of the count variables at one group of one partition.
using count_values = std::array<rational, all_count_variables.size()>;

/// The outcome of evaluating a recipe: its value, or the divisor that was zero.
struct recipe_value {
  std::optional<rational> value;
  std::string zero_divisor;  ///< the text of the divisor that evaluated to zero, when `value` is empty
};

/// A parsed scale expression over +, −, ×, ÷, parentheses, rational constants and count variables.
class recipe_expression {
public:
  /// Parses `text`; throws `error(recipe_error)` whose message shows the text with a caret under the
  /// offending position, and whose column (1-based, in characters) is that position.
  static recipe_expression parse(std::string_view text);

  /// Evaluates exactly; a division by zero yields the divisor's text instead of a value.
  recipe_value evaluate(const count_values& values) const;
  /// Whether the expression mentions `v`.
  bool uses(count_variable v) const;
  /// The first weight mass (M, m_r, m_m) the expression mentions, if any: only the weighted objective has them.
  std::optional<count_variable> mass_variable() const;
  /// The first sequence count (B, b_r, b_m, n_s) the expression mentions, if any.
  std::optional<count_variable> sequence_variable() const;
  /// An upper bound on the total degree of the numerator and of the denominator of the expression
  /// as a rational function of the variables.
  std::pair<unsigned, unsigned> degree_bound() const;
  /// The text as written.
  const std::string& text() const noexcept { return text_; }

private:
  enum class kind { constant, variable, add, subtract, multiply, divide, negate };
  struct node {
    kind what;
    rational constant;
    count_variable variable = count_variable::W;
    int left = -1;
    int right = -1;
    std::size_t begin = 0;  // the node's text span, for messages
    std::size_t end = 0;
  };
  friend class recipe_parser;
  friend struct recipe_algebra;  // recipes/divisors: the divisors as polynomials, for prove

  recipe_value evaluate_node(int index, const count_values& values) const;
  std::pair<unsigned, unsigned> degree_of(int index) const;

  std::string text_;
  std::vector<node> nodes_;
  int root_ = -1;
};

/// A recipe: the scale and the reducer it is combined with.
struct recipe {
  recipe_expression scale;
  reducer_kind reducer = reducer_kind::mean;
};

/// The synchronized gradient when every group backpropagates scale·S_g under `r.reducer` (S_g its loss
/// derivative sum: the microbatch's when it declares no sequences), or the zero divisor met on this partition
/// (the scale is computed for every group, empty ones included).
recipe_value recipe_gradient(const partition& update, const recipe& r);

/// The counts of group `g` of microbatch `m` of rank `r` in `update` (C is the update's normalizer, 0 when it
/// declares none).
count_values counts_at(const partition& update, std::size_t r, std::size_t m, std::size_t g = 0);

}  // namespace normcheck
