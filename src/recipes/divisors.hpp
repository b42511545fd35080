#pragma once
// Where a recipe's divisors can vanish (private to recipes/prove). Each divisor of the expression is a
// rational function of the counts; the numerator of a divisor that is not certified nonzero on every
// possible configuration is searched for zeros, so that `prove` never says "proved" of a scale that is
// undefined somewhere, and says where.

#include "normcheck/recipes/recipe.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace normcheck::detail {

/// A polynomial with rational coefficients in the eight count variables (indexed as `count_values`).
class polynomial {
public:
  using monomial = std::array<std::uint16_t, all_count_variables.size()>;

  polynomial() = default;
  /// The constant `value`.
  static polynomial constant(const rational& value);
  /// The variable `v`.
  static polynomial variable(count_variable v);

  polynomial operator+(const polynomial& other) const;
  polynomial operator-(const polynomial& other) const;
  polynomial operator*(const polynomial& other) const;
  polynomial operator-() const;

  /// Whether it is the zero polynomial.
  bool is_zero() const noexcept { return terms_.empty(); }
  /// Its terms, by monomial; no coefficient is 0.
  const std::map<monomial, rational>& terms() const noexcept { return terms_; }
  /// Its value at `values`.
  rational evaluate(const count_values& values) const;
  /// Whether `v` occurs in it.
  bool uses(count_variable v) const;
  /// Replaces every variable by a polynomial (`by[i]` for variable i).
  polynomial substitute(const std::array<polynomial, all_count_variables.size()>& by) const;
  /// The coefficients of the polynomial in `v` alone, the other variables taking `values`: [c0, c1, …].
  std::vector<rational> in_one_variable(count_variable v, const count_values& values) const;

private:
  void add_term(const monomial& m, const rational& c);
  std::map<monomial, rational> terms_;
};

/// A divisor of a recipe: its text, and the numerator of the rational function it is (formed without
/// cancelling: a zero of the numerator where the denominator is not zero is a zero of the divisor).
struct recipe_divisor {
  std::string text;
  std::optional<polynomial> numerator;  ///< empty when it would hold more terms than is reasonable to form
};

/// Every division of `scale`, in the order of the text.
std::vector<recipe_divisor> divisors_of(const recipe_expression& scale);

/// Which configurations a divisor must be nonzero on: the counts always, and the names an objective adds.
struct count_domain {
  bool weighted = false;   ///< masses M > 0, 0 ≤ mₘ ≤ mᵣ ≤ M (else each mass is its count)
  bool sequences = false;  ///< a group's tokens 0 ≤ n_s ≤ nₘ and sequence counts 0 ≤ bₘ ≤ bᵣ ≤ B (else n_s = nₘ, B = 0)
  bool sequences_required = false;  ///< B ≥ 1: every microbatch with a valid token declares its sequences
  bool constant = false;   ///< a normalizer C > 0 (else C does not occur)
  /// On a mesh, whether it has a data and a sequence dimension: without a sequence dimension the count over the
  /// data one is N and the count over the sequence one nᵣ, and the reverse.
  bool data_dimension = true;
  bool sequence_dimension = true;
};

/// Whether `p` is provably nonzero on every configuration of `domain` (W ≥ 1, G ≥ 1, N ≥ 1, 0 ≤ nₘ ≤ nᵣ ≤ N,
/// and the names the domain adds): after writing each variable as a sum of non-negative slacks
/// (W = 1 + w, nᵣ = a + b, N = a + b + c, …; C as a positive slack of its own), every coefficient has the
/// same sign and, for every choice of one slack from each group that must hold a positive one (a, b or c
/// for N ≥ 1; p, q or r for M > 0; the sequence slacks for B ≥ 1), some term uses only the chosen slacks
/// and C. Sufficient, not necessary: false means "not shown", not "vanishes".
bool nonzero_on_every_configuration(const polynomial& p, const count_domain& domain);

/// The values of `v` in its domain (a non-negative integer for a count, a non-negative rational for a
/// mass, a positive rational for C) at which the polynomial with coefficients `coefficients` (c0 first) is
/// 0: exactly for degree at most 1; above that, among the integers dividing the constant term for a count,
/// and the fractions p/q with p dividing it and q the leading coefficient for a mass or C (each of those at
/// most 10^12 once the coefficients are integers).
std::vector<rational> roots_in_domain(std::vector<rational> coefficients, count_variable v);

}  // namespace normcheck::detail
