#include "divisors.hpp"

#include <algorithm>

namespace normcheck {

namespace {

// More terms than this in one polynomial and a divisor is left unanalysed (and the recipe not proved).
constexpr std::size_t most_terms = 20000;

struct too_large {};

std::size_t index_of(count_variable v) { return static_cast<std::size_t>(v); }

}  // namespace

// Reads the expression's tree (a friend of recipe_expression).
struct recipe_algebra {
  struct fraction_of_polynomials {
    detail::polynomial numerator;
    detail::polynomial denominator;
  };

  // The rational function node `index` is; `numerators[i]` gets the numerator of the divisor of every
  // division node i it reaches.
  static fraction_of_polynomials of(const recipe_expression& e, int index,
                                    std::vector<std::optional<detail::polynomial>>& numerators) {
    using kind = recipe_expression::kind;
    const recipe_expression::node& n = e.nodes_[static_cast<std::size_t>(index)];
    auto checked = [](detail::polynomial p) {
      if (p.terms().size() > most_terms) throw too_large{};
      return p;
    };
    switch (n.what) {
      case kind::constant: return {detail::polynomial::constant(n.constant), detail::polynomial::constant(1)};
      case kind::variable: return {detail::polynomial::variable(n.variable), detail::polynomial::constant(1)};
      case kind::negate: {
        fraction_of_polynomials operand = of(e, n.left, numerators);
        operand.numerator = -operand.numerator;
        return operand;
      }
      default: break;
    }
    const fraction_of_polynomials a = of(e, n.left, numerators);
    const fraction_of_polynomials b = of(e, n.right, numerators);
    switch (n.what) {
      case kind::add:
        return {checked(a.numerator * b.denominator + b.numerator * a.denominator), checked(a.denominator * b.denominator)};
      case kind::subtract:
        return {checked(a.numerator * b.denominator - b.numerator * a.denominator), checked(a.denominator * b.denominator)};
      case kind::multiply: return {checked(a.numerator * b.numerator), checked(a.denominator * b.denominator)};
      case kind::divide:
        numerators[static_cast<std::size_t>(index)] = b.numerator;
        return {checked(a.numerator * b.denominator), checked(a.denominator * b.numerator)};
      default: return a;
    }
  }

  static std::vector<detail::recipe_divisor> divisors(const recipe_expression& e) {
    std::vector<std::optional<detail::polynomial>> numerators(e.nodes_.size());
    try {
      of(e, e.root_, numerators);
    } catch (const too_large&) {
      // a divisor whose numerator was not formed is never shown nonzero
    }
    std::vector<detail::recipe_divisor> all;
    for (std::size_t i = 0; i < e.nodes_.size(); ++i)
      if (e.nodes_[i].what == recipe_expression::kind::divide) {
        const recipe_expression::node& right = e.nodes_[static_cast<std::size_t>(e.nodes_[i].right)];
        all.push_back({e.text_.substr(right.begin, right.end - right.begin), std::move(numerators[i])});
      }
    return all;
  }
};

namespace detail {

polynomial polynomial::constant(const rational& value) {
  polynomial p;
  p.add_term(monomial{}, value);
  return p;
}

polynomial polynomial::variable(count_variable v) {
  polynomial p;
  monomial m{};
  m[index_of(v)] = 1;
  p.add_term(m, 1);
  return p;
}

void polynomial::add_term(const monomial& m, const rational& c) {
  if (c == 0) return;
  auto [at, inserted] = terms_.try_emplace(m, c);
  if (inserted) return;
  at->second += c;
  if (at->second == 0) terms_.erase(at);
}

polynomial polynomial::operator+(const polynomial& other) const {
  polynomial sum = *this;
  for (const auto& [m, c] : other.terms_) sum.add_term(m, c);
  return sum;
}

polynomial polynomial::operator-(const polynomial& other) const { return *this + (-other); }

polynomial polynomial::operator-() const {
  polynomial negated;
  for (const auto& [m, c] : terms_) negated.terms_.emplace(m, rational(-c));
  return negated;
}

polynomial polynomial::operator*(const polynomial& other) const {
  polynomial product;
  for (const auto& [m1, c1] : terms_)
    for (const auto& [m2, c2] : other.terms_) {
      monomial m{};
      for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::uint16_t>(m1[i] + m2[i]);
      rational c = c1 * c2;
      product.add_term(m, c);
    }
  return product;
}

rational polynomial::evaluate(const count_values& values) const {
  rational total = 0;
  for (const auto& [m, c] : terms_) {
    rational term = c;
    for (std::size_t i = 0; i < m.size(); ++i)
      for (std::uint16_t k = 0; k < m[i]; ++k) term *= values[i];
    total += term;
  }
  return total;
}

bool polynomial::uses(count_variable v) const {
  return std::any_of(terms_.begin(), terms_.end(), [&](const auto& term) { return term.first[index_of(v)] > 0; });
}

polynomial polynomial::substitute(const std::array<polynomial, all_count_variables.size()>& by) const {
  polynomial result;
  for (const auto& [m, c] : terms_) {
    polynomial term = constant(c);
    for (std::size_t i = 0; i < m.size(); ++i)
      for (std::uint16_t k = 0; k < m[i]; ++k) {
        term = term * by[i];
        if (term.terms_.size() > most_terms) throw too_large{};
      }
    result = result + term;
    if (result.terms_.size() > most_terms) throw too_large{};
  }
  return result;
}

std::vector<rational> polynomial::in_one_variable(count_variable v, const count_values& values) const {
  std::vector<rational> coefficients;
  const std::size_t at = index_of(v);
  for (const auto& [m, c] : terms_) {
    rational term = c;
    for (std::size_t i = 0; i < m.size(); ++i)
      if (i != at)
        for (std::uint16_t k = 0; k < m[i]; ++k) term *= values[i];
    if (coefficients.size() <= m[at]) coefficients.resize(m[at] + 1u, rational(0));
    coefficients[m[at]] += term;
  }
  while (!coefficients.empty() && coefficients.back() == 0) coefficients.pop_back();
  return coefficients;
}

std::vector<recipe_divisor> divisors_of(const recipe_expression& scale) { return recipe_algebra::divisors(scale); }

bool nonzero_on_every_configuration(const polynomial& p, bool weighted) {
  using v = count_variable;
  // Slacks, each ≥ 0, in the slots of the variables they stand for: w for W − 1, g for G − 1, a = nₘ,
  // b = nᵣ − nₘ, c = N − nᵣ; p = mₘ, q = mᵣ − mₘ, r = M − mᵣ.
  auto slack = [](v x) { return polynomial::variable(x); };
  std::array<polynomial, all_count_variables.size()> by;
  by[index_of(v::W)] = polynomial::constant(1) + slack(v::W);
  by[index_of(v::G)] = polynomial::constant(1) + slack(v::G);
  by[index_of(v::n_m)] = slack(v::n_m);
  by[index_of(v::n_r)] = slack(v::n_m) + slack(v::n_r);
  by[index_of(v::N)] = slack(v::n_m) + slack(v::n_r) + slack(v::N);
  by[index_of(v::m_m)] = slack(v::m_m);
  by[index_of(v::m_r)] = slack(v::m_m) + slack(v::m_r);
  by[index_of(v::M)] = slack(v::m_m) + slack(v::m_r) + slack(v::M);
  polynomial in_slacks;
  try {
    in_slacks = p.substitute(by);
  } catch (const too_large&) {
    return false;
  }
  if (in_slacks.is_zero()) return false;
  const bool positive = in_slacks.terms().begin()->second > 0;
  for (const auto& [m, c] : in_slacks.terms())
    if ((c > 0) != positive) return false;
  // Every coefficient has one sign and every slack is ≥ 0, so |p| is at least its terms in the slacks that
  // are not 0 at a configuration, and at least one count slack is ≥ 1 (N ≥ 1) and, weighted, one mass
  // slack is > 0 (M > 0): p ≠ 0 when, for every such pair, some term uses those two slacks alone.
  const std::array<v, 3> count_slacks{v::n_m, v::n_r, v::N};
  const std::array<v, 3> mass_slacks{v::m_m, v::m_r, v::M};
  for (v count : count_slacks)
    for (std::size_t j = 0; j < (weighted ? mass_slacks.size() : 1); ++j) {
      const std::optional<v> mass = weighted ? std::optional<v>(mass_slacks[j]) : std::nullopt;
      const bool some_term = std::any_of(in_slacks.terms().begin(), in_slacks.terms().end(), [&](const auto& term) {
        for (v x : all_count_variables) {
          const bool allowed = x == count || (mass && x == *mass);
          if (!allowed && term.first[index_of(x)] > 0) return false;
        }
        return true;
      });
      if (!some_term) return false;
    }
  return true;
}

std::vector<rational> roots_in_domain(std::vector<rational> coefficients, count_variable v) {
  const bool mass = v == count_variable::M || v == count_variable::m_r || v == count_variable::m_m;
  std::vector<rational> roots;
  if (coefficients.empty()) return roots;  // 0 everywhere: any value, left to the scopes
  auto in_domain = [&](const rational& x) { return x >= 0 && (mass || denominator(x) == 1); };
  std::size_t zeros = 0;
  while (zeros < coefficients.size() && coefficients[zeros] == 0) ++zeros;
  if (zeros > 0) roots.push_back(0);
  coefficients.erase(coefficients.begin(), coefficients.begin() + static_cast<std::ptrdiff_t>(zeros));
  auto value_at = [&](const rational& x) {
    rational total = 0;
    for (std::size_t k = coefficients.size(); k-- > 0;) total = total * x + coefficients[k];
    return total;
  };
  if (coefficients.size() == 2) {
    rational root = -coefficients[0] / coefficients[1];
    if (in_domain(root)) roots.push_back(root);
  } else if (coefficients.size() > 2) {
    // Integer roots divide the constant term of the polynomial with integer coefficients.
    integer common = 1;
    for (const rational& c : coefficients) common = boost::multiprecision::lcm(common, denominator(c));
    const rational scaled = coefficients[0] * rational(common);
    const integer constant_term = abs(numerator(scaled));
    if (constant_term <= integer(1'000'000'000'000ull)) {
      const std::uint64_t n = constant_term.convert_to<std::uint64_t>();
      for (std::uint64_t d = 1; d * d <= n; ++d)
        if (n % d == 0)
          for (std::uint64_t candidate : {d, n / d})
            if (value_at(rational(candidate)) == 0 &&
                std::find(roots.begin(), roots.end(), rational(candidate)) == roots.end())
              roots.push_back(rational(candidate));
    }
  }
  std::sort(roots.begin(), roots.end());
  return roots;
}

}  // namespace detail

}  // namespace normcheck
