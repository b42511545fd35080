#include "divisors.hpp"

#include <algorithm>

namespace normcheck {

namespace {

// More terms than this in one polynomial and a divisor is left unanalysed (and the recipe not proved).
constexpr std::size_t most_terms = 20000;

struct too_large {};

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
        return {checked(a.numerator * b.denominator + b.numerator * a.denominator),
                checked(a.denominator * b.denominator)};
      case kind::subtract:
        return {checked(a.numerator * b.denominator - b.numerator * a.denominator),
                checked(a.denominator * b.denominator)};
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
  m[variable_index(v)] = 1;
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
  return std::any_of(terms_.begin(), terms_.end(), [&](const auto& term) { return term.first[variable_index(v)] > 0; });
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
  const std::size_t at = variable_index(v);
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

bool nonzero_on_every_configuration(const polynomial& p, const count_domain& domain) {
  using v = count_variable;
  // Slacks, each ≥ 0, in the slots of the variables they stand for: w for W − 1, g for G − 1; with
  // sequences s = n_s, a = nₘ − n_s, else a = nₘ; b = nᵣ − nₘ, c = N − nᵣ; x = bₘ, y = bᵣ − bₘ, z = B − bᵣ;
  // p = mₘ, q = mᵣ − mₘ, r = M − mᵣ; C in its own slot, positive.
  auto slack = [](v x) { return polynomial::variable(x); };
  std::array<polynomial, all_count_variables.size()> by;
  by[variable_index(v::W)] = polynomial::constant(1) + slack(v::W);
  by[variable_index(v::G)] = polynomial::constant(1) + slack(v::G);
  by[variable_index(v::n_m)] = domain.sequences ? slack(v::n_s) + slack(v::n_m) : slack(v::n_m);
  by[variable_index(v::n_r)] = by[variable_index(v::n_m)] + slack(v::n_r);
  by[variable_index(v::N)] = by[variable_index(v::n_r)] + slack(v::N);
  if (domain.sequences) {
    by[variable_index(v::n_s)] = slack(v::n_s);
    by[variable_index(v::b_m)] = slack(v::b_m);
    by[variable_index(v::b_r)] = slack(v::b_m) + slack(v::b_r);
    by[variable_index(v::B)] = slack(v::b_m) + slack(v::b_r) + slack(v::B);
  } else {
    by[variable_index(v::n_s)] = by[variable_index(v::n_m)];  // B, bᵣ, bₘ: 0
  }
  if (domain.weighted) {
    by[variable_index(v::m_m)] = slack(v::m_m);
    by[variable_index(v::m_r)] = slack(v::m_m) + slack(v::m_r);
    by[variable_index(v::M)] = slack(v::m_m) + slack(v::m_r) + slack(v::M);
  } else {
    by[variable_index(v::m_m)] = by[variable_index(v::n_m)];
    by[variable_index(v::m_r)] = by[variable_index(v::n_r)];
    by[variable_index(v::M)] = by[variable_index(v::N)];
  }
  if (domain.constant) by[variable_index(v::C)] = slack(v::C);
  // A mesh's sizes are at least 1, and a count reduced over one role's dimension holds the rank's (a relaxation:
  // N ≥ N_dp + N_cp − nᵣ is not used, and nonzero on more configurations is nonzero on these). Beside a term the
  // main loss's counts nest as the term's do, and its N is at least 1.
  for (v size : {v::data_size, v::sequence_size, v::replica_size})
    by[variable_index(size)] = polynomial::constant(1) + slack(size);
  by[variable_index(v::over_data)] = !domain.sequence_dimension ? by[variable_index(v::N)]
                                     : !domain.data_dimension   ? by[variable_index(v::n_r)]
                                                                : by[variable_index(v::n_r)] + slack(v::over_data);
  by[variable_index(v::over_sequence)] = !domain.sequence_dimension ? by[variable_index(v::n_r)]
                                         : !domain.data_dimension
                                             ? by[variable_index(v::N)]
                                             : by[variable_index(v::n_r)] + slack(v::over_sequence);
  by[variable_index(v::main_n_m)] = slack(v::main_n_m);
  by[variable_index(v::main_n_r)] = slack(v::main_n_m) + slack(v::main_n_r);
  by[variable_index(v::main_N)] = slack(v::main_n_m) + slack(v::main_n_r) + slack(v::main_N);
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
  // are not 0 at a configuration; at least one slack of each positive group is (N ≥ 1, M > 0, B ≥ 1), and C
  // always is: p ≠ 0 when, for every such choice, some term uses the chosen slacks and C alone.
  std::vector<std::vector<v>> positive_groups;
  positive_groups.push_back(domain.sequences ? std::vector<v>{v::n_s, v::n_m, v::n_r, v::N}
                                             : std::vector<v>{v::n_m, v::n_r, v::N});
  if (domain.weighted) positive_groups.push_back({v::m_m, v::m_r, v::M});
  if (domain.sequences && domain.sequences_required) positive_groups.push_back({v::b_m, v::b_r, v::B});
  if (p.uses(v::main_N) || p.uses(v::main_n_r) || p.uses(v::main_n_m))
    positive_groups.push_back({v::main_n_m, v::main_n_r, v::main_N});
  std::vector<std::size_t> choice(positive_groups.size(), 0);
  for (;;) {
    const bool some_term = std::any_of(in_slacks.terms().begin(), in_slacks.terms().end(), [&](const auto& term) {
      for (v x : all_count_variables) {
        if (term.first[variable_index(x)] == 0 || (domain.constant && x == v::C)) continue;
        bool chosen = false;
        for (std::size_t k = 0; k < positive_groups.size(); ++k) chosen = chosen || positive_groups[k][choice[k]] == x;
        if (!chosen) return false;
      }
      return true;
    });
    if (!some_term) return false;
    std::size_t k = 0;
    while (k < choice.size() && ++choice[k] == positive_groups[k].size()) choice[k++] = 0;
    if (k == choice.size()) return true;
  }
}

std::vector<rational> roots_in_domain(std::vector<rational> coefficients, count_variable v) {
  const bool mass = v == count_variable::M || v == count_variable::m_r || v == count_variable::m_m;
  const bool rational_valued = mass || v == count_variable::C;
  std::vector<rational> roots;
  if (coefficients.empty()) return roots;  // 0 everywhere: any value, left to the scopes
  auto in_domain = [&](const rational& x) {
    return v == count_variable::C ? x > 0 : x >= 0 && (mass || denominator(x) == 1);
  };
  std::size_t zeros = 0;
  while (zeros < coefficients.size() && coefficients[zeros] == 0) ++zeros;
  if (zeros > 0 && in_domain(rational(0))) roots.push_back(0);
  coefficients.erase(coefficients.begin(), coefficients.begin() + static_cast<std::ptrdiff_t>(zeros));
  auto value_at = [&](const rational& x) {
    rational total = 0;
    for (std::size_t k = coefficients.size(); k-- > 0;) total = total * x + coefficients[k];
    return total;
  };
  auto add = [&](const rational& x) {
    if (in_domain(x) && value_at(x) == 0 && std::find(roots.begin(), roots.end(), x) == roots.end()) roots.push_back(x);
  };
  if (coefficients.size() == 2) {
    add(rational(-coefficients[0] / coefficients[1]));
  } else if (coefficients.size() > 2) {
    // With integer coefficients, a root p/q in lowest terms has p dividing the constant term and q the
    // leading coefficient (an integer root: q = 1).
    integer common = 1;
    for (const rational& c : coefficients) common = boost::multiprecision::lcm(common, denominator(c));
    const integer constant_term = abs(numerator(rational(coefficients.front() * rational(common))));
    const integer leading = abs(numerator(rational(coefficients.back() * rational(common))));
    const integer most(1'000'000'000'000ull);
    auto divisors = [](const integer& value) {
      std::vector<std::uint64_t> found;
      const std::uint64_t n = value.convert_to<std::uint64_t>();
      for (std::uint64_t d = 1; d * d <= n; ++d)
        if (n % d == 0) {
          found.push_back(d);
          if (d != n / d) found.push_back(n / d);
        }
      return found;
    };
    if (constant_term <= most && (!rational_valued || leading <= most)) {
      const std::vector<std::uint64_t> denominators =
          rational_valued ? divisors(leading) : std::vector<std::uint64_t>{1};
      for (std::uint64_t p : divisors(constant_term))
        for (std::uint64_t q : denominators) add(fraction(integer(p), integer(q)));
    }
  }
  std::sort(roots.begin(), roots.end());
  return roots;
}

}  // namespace detail

}  // namespace normcheck
