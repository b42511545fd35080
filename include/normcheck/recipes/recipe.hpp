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

/// The counts a recipe may use, in the order of their index (variable_index). The first thirteen are every
/// update's; the rest are offered by `recipe_names` on a device mesh or beside an auxiliary term.
enum class count_variable {
  W,              ///< ranks in the reduction (on a mesh: the data and sequence dimensions' ranks, replicas not counted)
  N,              ///< valid tokens of the update, all ranks (replicas counted once)
  n_r,            ///< the rank's valid tokens over its microbatches
  n_m,            ///< the microbatch's valid tokens
  G,              ///< the rank's microbatches in the update
  M,              ///< weight mass of the update (weighted objectives)
  m_r,            ///< the rank's weight mass
  m_m,            ///< the microbatch's weight mass
  B,              ///< sequences of the update that hold a valid token, all ranks
  b_r,            ///< the rank's sequences that hold a valid token
  b_m,            ///< the microbatch's sequences that hold a valid token (0 when it declares none)
  n_s,            ///< the group's valid tokens: its sequence's, or its microbatch's when that declares no sequences
  C,              ///< the declared normalizer (the constant objective)
  data_size,      ///< the mesh's data dimension's size (spelled as its name in capitals: DP)
  sequence_size,  ///< the mesh's sequence dimension's size (CP)
  replica_size,   ///< the mesh's replica dimension's size (TP)
  over_data,      ///< the rank's count reduced over the data dimension only (N_dp): its sequence coordinate's
  over_sequence,  ///< the rank's count reduced over the sequence dimension only (N_cp): its data coordinate's
  main_N,         ///< beside a term, the main loss's N (then spelled N; the term's own counts are N_mtp, …)
  main_n_r,       ///< beside a term, the main loss's tokens on the rank (n_r)
  main_n_m,       ///< beside a term, the main loss's tokens in the microbatch (n_m)
};

/// Every count variable, in the order of `count_values`.
inline constexpr std::array<count_variable, 21> all_count_variables{count_variable::W,
                                                                    count_variable::N,
                                                                    count_variable::n_r,
                                                                    count_variable::n_m,
                                                                    count_variable::G,
                                                                    count_variable::M,
                                                                    count_variable::m_r,
                                                                    count_variable::m_m,
                                                                    count_variable::B,
                                                                    count_variable::b_r,
                                                                    count_variable::b_m,
                                                                    count_variable::n_s,
                                                                    count_variable::C,
                                                                    count_variable::data_size,
                                                                    count_variable::sequence_size,
                                                                    count_variable::replica_size,
                                                                    count_variable::over_data,
                                                                    count_variable::over_sequence,
                                                                    count_variable::main_N,
                                                                    count_variable::main_n_r,
                                                                    count_variable::main_n_m};

/// The variables every update offers, without a mesh or a term.
inline constexpr std::size_t update_variables = 13;

/// A variable's index in `all_count_variables` and in `count_values`.
constexpr std::size_t variable_index(count_variable v) { return static_cast<std::size_t>(v); }

/// The spelling of a variable in recipes without a mesh or a term, e.g. "n_r" ("" for the mesh's and a term's
/// variables, whose spelling `recipe_names` gives).
std::string_view variable_name(count_variable v) noexcept;

/// The names a recipe may use: every update's counts, and on a device mesh the sizes of its dimensions (each
/// dimension's name in capitals: `DP`, `CP`, `TP`) and the counts reduced over one role's dimension (`N_dp`,
/// `N_cp`: "N_" and the dimension's name); beside an auxiliary term, that term's own counts (`N_mtp`,
/// `n_r_mtp`, `n_m_mtp`: what the term's scale is judged against, the slots N, n_r, n_m) and the main loss's
/// (`N`, `n_r`, `n_m`). At most one dimension of each role has names.
class recipe_names {
public:
  /// Every update's names alone.
  recipe_names() = default;
  /// The names of `mesh` (its sizes unused) and of the term `term` (empty: none). Throws `error(usage_error)`
  /// where two dimensions share a role or a name, or a spelling would be another name's (a dimension "n" would
  /// be spelled N).
  recipe_names(std::vector<mesh_dim> mesh, std::string term);
  /// The names of a file's mesh: the roles with exactly one dimension, spellings that clash left out.
  static recipe_names of_document(const std::vector<mesh_dim>& mesh);
  /// Reads `--mesh`: "dp:data,cp:sequence,tp:replica", each dimension's name and role; throws
  /// `error(usage_error)` with the column of what is wrong.
  static std::vector<mesh_dim> parse_mesh(std::string_view text);

  /// The spelling of `v` ("" where it is not offered).
  std::string spelling(count_variable v) const;
  /// The variable spelled `name`, if offered.
  std::optional<count_variable> find(std::string_view name) const;
  /// Whether `v` is offered.
  bool offers(count_variable v) const { return !spelling(v).empty(); }
  /// The dimension of `role`, if it has names.
  const mesh_dim* dimension(mesh_role role) const;
  /// The mesh's dimensions, in the order given.
  const std::vector<mesh_dim>& mesh() const noexcept { return mesh_; }
  /// The term's name, empty without one.
  const std::string& term() const noexcept { return term_; }
  /// Every offered spelling, for messages: "W, N, n_r, …, DP, CP, N_dp".
  std::string listed() const;

private:
  std::vector<mesh_dim> mesh_;
  std::string term_;
};

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
  static recipe_expression parse(std::string_view text, const recipe_names& names = {});

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
  /// The names it was read with.
  const recipe_names& names() const noexcept { return names_; }
  /// The first variable of a mesh or a term it mentions, if any.
  std::optional<count_variable> mesh_or_term_variable() const;

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
  recipe_names names_;
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
/// (the scale is computed for every group, empty ones included). `main`: where `update` is an auxiliary term's, the
/// main loss, whose counts the recipe reads as N, n_r and n_m beside the term's.
recipe_value recipe_gradient(const partition& update, const recipe& r, const partition* main = nullptr);

/// What a per-group probe measures of a recipe: each group's component of its synchronized gradient (scale·S_g,
/// the reducer applied) and the witness component (the j-th valid token of the group carrying the value j), in
/// group order (docs/format.md, "Per-group observations").
struct recipe_components {
  std::vector<rational> components;
  std::vector<rational> witness;
};

/// The components of `r` on `update` (and `main`, as for `recipe_gradient`); nullopt where the scale divides by
/// zero. Under the token mean only (the witness counts tokens).
std::optional<recipe_components> recipe_group_components(const partition& update, const recipe& r,
                                                         const partition* main = nullptr);

/// The counts of group `g` of microbatch `m` of rank `r` in `update` (C is the update's normalizer, 0 when it
/// declares none).
count_values counts_at(const partition& update, std::size_t r, std::size_t m, std::size_t g = 0);

}  // namespace normcheck
