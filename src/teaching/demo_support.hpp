#pragma once
// Shared by the demos (src/teaching/*.cpp), not part of the public API: numbers as text, the blocks a
// document is built from, probes that measure a token's weight through the library's gradient, and
// the equal deals the controls use.

#include "normcheck/core/exact_sum.hpp"  // sum_of
#include "normcheck/teaching/demo.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck::demo_support {

/// Rows of a table beyond which the rest of the ranks or microbatches are summarized in one line.
inline constexpr std::size_t shown_rows = 16;
/// Terms of a sum written out one by one; longer sums are shown by their value.
inline constexpr std::size_t shown_terms = 6;

/// Colours of the figures: the mistaken computation, the correct one, axes.
inline constexpr std::string_view mistaken_color = "#c0392b";
inline constexpr std::string_view correct_color = "#1f6f8b";
inline constexpr std::string_view axis_color = "#555555";

/// A pixel coordinate as a rational.
inline rational px(std::int64_t value) { return rational(value); }

/// Whether a value is an integer.
bool is_integer(const rational& value);
/// The value, canonical and shortened for a screen.
std::string exact(const rational& value);
/// The same, or "undefined".
std::string exact(const std::optional<rational>& value);
/// The value with a decimal approximation unless it is an integer.
std::string show(const rational& value);
/// The same, or "undefined".
std::string show(const std::optional<rational>& value);
/// A term inside a sum: negative values in parentheses.
std::string term(const rational& value);
/// "(a + b)" for a few terms, a single term as it is, and the total for many.
std::string sum_text(const std::vector<rational>& terms);
/// "a, b, c" for a few values; the first few and a count for many.
std::string list_text(const std::vector<std::string>& items);
/// A microbatch's tokens, "null" for padding.
std::string tokens_text(const std::vector<token>& tokens);
/// Each rank's Sᵣ.
std::vector<rational> rank_sums(const partition& p);
/// What rank r backpropagates under the normalization `name` of core/normalization (in the update's objective's
/// units): Σ over its groups of the table's coefficient times the group's derivative sum, before the reducer.
/// Nullopt where a coefficient is undefined (it divides by an empty count).
std::optional<rational> local_scalar(const partition& p, std::string_view name, std::size_t rank);

/// A paragraph block.
demo_block paragraph(std::string text);
/// A display block.
demo_block display(std::vector<std::string> lines);
/// "… 3 more ranks".
std::string overflow_row_text(std::size_t total, std::string_view many);

/// The gradient when every token of rank `rank` has derivative 1 and every other 0: the rank's share.
std::optional<rational> rank_probe(const partition& shape, std::size_t rank, strategy s);
/// The gradient when one token of the microbatch has derivative 1 and every other 0: that token's weight.
std::optional<rational> token_probe(const partition& shape, std::size_t rank, std::size_t microbatch, strategy s);
/// The update at another θ.
partition at_theta(const partition& p, const rational& theta);
/// The valid tokens dealt into `parts` equal contiguous runs; nullopt when they do not divide evenly.
std::optional<std::vector<std::vector<token>>> deal_equally(const std::vector<token>& tokens, std::size_t parts);
/// The tokens of all microbatches in order.
std::vector<token> flatten(const std::vector<std::vector<token>>& microbatches);
/// Every valid token of the layout dealt to the same number of ranks in equal runs, one microbatch each.
std::optional<token_layout> deal_ranks_equally(const token_layout& tokens);
/// The table of ranks: counts, targets and loss sums.
demo_table rank_table(const demo_input& input);
/// One sentence on the update: W, N, the reducer, θ.
std::string update_summary(const partition& p);
/// The objective's gradient at another θ.
rational objective_at(const partition& p, const rational& theta);
/// How a control update says where its tokens come from.
struct control_origins {
  std::string dealt;     ///< the input's own tokens dealt anew
  std::string builtin;   ///< the built-in tokens dealt instead
  std::string uneven;    ///< why the input's own tokens could not be dealt
};
/// The control of a demo: the input's tokens dealt equally by `deal`, or, when the input keeps only sums (a
/// file's partition) or its tokens do not divide evenly, the demo's built-in tokens dealt the same way.
demo_input dealt_control(const demo_input& input, std::string_view demo_name,
                         std::optional<token_layout> (*deal)(const token_layout&), const control_origins& origins);
/// A section on a control update: where it comes from, its table, the values compared, and what they show.
demo_section control_section(std::string heading, const demo_input& control, demo_table table,
                             std::vector<std::string> values, std::string lesson);
/// "Computed on …."
std::string description_of(const demo_input& input);

}  // namespace normcheck::demo_support
