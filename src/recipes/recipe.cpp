#include "normcheck/recipes/recipe.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/sequence_join.hpp"
#include "normcheck/core/utf8.hpp"

#include <algorithm>

namespace normcheck {

namespace {

constexpr std::array<std::string_view, all_count_variables.size()> variable_names{
    "W", "N", "n_r", "n_m", "G", "M", "m_r", "m_m", "B", "b_r", "b_m", "n_s", "C"};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::string_view variable_name(count_variable v) noexcept { return variable_names[variable_index(v)]; }

// Recursive descent: expression := term (('+'|'-') term)*, term := factor (('*'|'/') factor)*,
// factor := ('-'|'+') factor | number | name | '(' expression ')'. Nesting is bounded.
class recipe_parser {
public:
  explicit recipe_parser(std::string_view text) : text_(text) {}

  recipe_expression parse() {
    result_.text_ = std::string(text_);
    skip_spaces();
    if (pos_ == text_.size()) fail("the recipe is empty: expected an expression such as W / N");
    result_.root_ = expression();
    skip_spaces();
    if (pos_ != text_.size()) fail("expected an operator (+ - * /) or the end of the recipe");
    return std::move(result_);
  }

private:
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  [[noreturn]] void fail_at(std::size_t at, const std::string& what) const {
    // Column in characters, so that the caret lines up under multi-byte text.
    auto characters = [](std::string_view text) {
      std::size_t count = 0;
      for (char c : text)
        if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++count;
      return count;
    };
    location where;
    where.line = 1;
    where.column = characters(text_.substr(0, std::min(at, text_.size()))) + 1;
    where.offset = at;
    // The message shows the text around the position (a long recipe only near it), every character visible.
    constexpr std::size_t context = 30;
    std::size_t from = at > context ? at - context : 0;
    std::size_t to = std::min(text_.size(), at + context);
    while (from > 0 && (static_cast<unsigned char>(text_[from]) & 0xC0) == 0x80) --from;
    while (to < text_.size() && (static_cast<unsigned char>(text_[to]) & 0xC0) == 0x80) ++to;
    const std::string before = (from > 0 ? "…" : "") + printable(text_.substr(from, std::min(at, text_.size()) - from));
    const std::string shown = before +
                              printable(text_.substr(std::min(at, text_.size()), to - std::min(at, text_.size()))) +
                              (to < text_.size() ? "…" : "");
    throw error(error_code::recipe_error,
                what + "\n  " + shown + "\n  " + std::string(characters(before), ' ') + "^", where);
  }

  void skip_spaces() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }

  int add(recipe_expression::node n) {
    if (result_.nodes_.size() == recipe_max_nodes)
      fail("the recipe holds more than " + std::to_string(recipe_max_nodes) +
                           " numbers, counts and operations, the limit of a recipe");
    result_.nodes_.push_back(std::move(n));
    return static_cast<int>(result_.nodes_.size() - 1);
  }

  int binary(recipe_expression::kind what, int left, int right) {
    recipe_expression::node n{what, 0, count_variable::W, left, right, result_.nodes_[left].begin,
                               result_.nodes_[right].end};
    return add(std::move(n));
  }

  int expression() {
    int left = term();
    for (skip_spaces(); pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'); skip_spaces()) {
      const auto what = text_[pos_++] == '+' ? recipe_expression::kind::add : recipe_expression::kind::subtract;
      left = binary(what, left, term());
    }
    return left;
  }

  int term() {
    int left = factor();
    for (skip_spaces(); pos_ < text_.size() && (text_[pos_] == '*' || text_[pos_] == '/'); skip_spaces()) {
      const auto what = text_[pos_++] == '*' ? recipe_expression::kind::multiply : recipe_expression::kind::divide;
      left = binary(what, left, factor());
    }
    return left;
  }

  int factor() {
    constexpr int deepest = 64;
    if (++depth_ > deepest) fail("the recipe nests deeper than 64 levels");
    skip_spaces();
    const std::size_t start = pos_;
    int result = -1;
    if (pos_ == text_.size()) fail("the recipe ends early: expected a number, a count (W, N, n_r, n_m, G) or '('");
    const char c = text_[pos_];
    if (c == '-' || c == '+') {
      ++pos_;
      const int operand = factor();
      result = c == '+' ? operand
                        : add({recipe_expression::kind::negate, 0, count_variable::W, operand, -1, start,
                               result_.nodes_[operand].end});
    } else if (c == '(') {
      ++pos_;
      result = expression();
      skip_spaces();
      if (pos_ == text_.size() || text_[pos_] != ')') fail("expected ')' to close the '(' opened earlier");
      ++pos_;
      result_.nodes_[result].begin = start;
      result_.nodes_[result].end = pos_;
    } else if ((c >= '0' && c <= '9') || c == '.') {
      while (pos_ < text_.size() && ((text_[pos_] >= '0' && text_[pos_] <= '9') || text_[pos_] == '.')) ++pos_;
      rational value;
      try {
        value = read_number(text_.substr(start, pos_ - start), literal_form::json_number);
      } catch (const error& e) {
        fail_at(start, "a constant is a decimal number such as 2 or 0.5: " + e.message());
      }
      result = add({recipe_expression::kind::constant, value, count_variable::W, -1, -1, start, pos_});
    } else if (is_name_char(c)) {
      while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
      const std::string_view name = text_.substr(start, pos_ - start);
      const auto found = std::find(variable_names.begin(), variable_names.end(), name);
      if (found == variable_names.end())
        fail_at(start, "unknown name \"" + std::string(name) +
                           "\": a recipe uses W, N, n_r, n_m, G (and M, m_r, m_m for weighted objectives; B, b_r, "
                           "b_m, n_s for sequences; C for the constant objective)");
      const auto v = all_count_variables[static_cast<std::size_t>(found - variable_names.begin())];
      result = add({recipe_expression::kind::variable, 0, v, -1, -1, start, pos_});
    } else {
      fail("expected a number, a count (W, N, n_r, n_m, G) or '('");
    }
    --depth_;
    return result;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  recipe_expression result_;
};

recipe_expression recipe_expression::parse(std::string_view text) { return recipe_parser(text).parse(); }

recipe_value recipe_expression::evaluate_node(int index, const count_values& values) const {
  const node& n = nodes_[static_cast<std::size_t>(index)];
  switch (n.what) {
    case kind::constant: return {n.constant, {}};
    case kind::variable: return {values[variable_index(n.variable)], {}};
    case kind::negate: {
      recipe_value operand = evaluate_node(n.left, values);
      if (operand.value) *operand.value = -*operand.value;
      return operand;
    }
    default: break;
  }
  recipe_value left = evaluate_node(n.left, values);
  if (!left.value) return left;
  recipe_value right = evaluate_node(n.right, values);
  if (!right.value) return right;
  rational result;
  switch (n.what) {
    case kind::add: result = *left.value + *right.value; break;
    case kind::subtract: result = *left.value - *right.value; break;
    case kind::multiply: result = *left.value * *right.value; break;
    case kind::divide: {
      if (*right.value == 0) {
        const node& divisor = nodes_[static_cast<std::size_t>(n.right)];
        return {std::nullopt, text_.substr(divisor.begin, divisor.end - divisor.begin)};
      }
      result = *left.value / *right.value;
      break;
    }
    default: break;
  }
  return {result, {}};
}

recipe_value recipe_expression::evaluate(const count_values& values) const { return evaluate_node(root_, values); }

bool recipe_expression::uses(count_variable v) const {
  return std::any_of(nodes_.begin(), nodes_.end(),
                     [v](const node& n) { return n.what == kind::variable && n.variable == v; });
}

// Degrees of numerator and denominator when each operation is carried out on fractions of polynomials
// without cancelling: a/b ± c/d = (ad ± cb)/(bd), and so on. Upper bounds, which is all a proof needs.
std::pair<unsigned, unsigned> recipe_expression::degree_of(int index) const {
  const node& n = nodes_[static_cast<std::size_t>(index)];
  switch (n.what) {
    case kind::constant: return {0, 0};
    case kind::variable: return {1, 0};
    case kind::negate: return degree_of(n.left);
    default: break;
  }
  const auto [a_num, a_den] = degree_of(n.left);
  const auto [b_num, b_den] = degree_of(n.right);
  switch (n.what) {
    case kind::add:
    case kind::subtract: return {std::max(a_num + b_den, b_num + a_den), a_den + b_den};
    case kind::multiply: return {a_num + b_num, a_den + b_den};
    case kind::divide: return {a_num + b_den, a_den + b_num};
    default: return {0, 0};
  }
}

std::optional<count_variable> recipe_expression::mass_variable() const {
  for (count_variable v : {count_variable::M, count_variable::m_r, count_variable::m_m})
    if (uses(v)) return v;
  return std::nullopt;
}

std::optional<count_variable> recipe_expression::sequence_variable() const {
  for (count_variable v : {count_variable::B, count_variable::b_r, count_variable::b_m, count_variable::n_s})
    if (uses(v)) return v;
  return std::nullopt;
}

std::pair<unsigned, unsigned> recipe_expression::degree_bound() const { return degree_of(root_); }

namespace {

// The update's and a rank's counts, computed once per update and per rank.
struct part_counts {
  std::uint64_t valid_tokens;
  rational mass;
  std::uint64_t sequences;
};

// The counts of a group, given the update's and its rank's totals; `join` counts the sequences (B, b_r, b_m and
// n_s count whole sequences, the slices of one sequence joined).
count_values counts_at(const partition& update, std::size_t r, std::size_t m, std::size_t g, const part_counts& all,
                       const part_counts& rank_counts, const sequence_join& join) {
  const rank_stats& rank = update.ranks[r];
  const microbatch_stats& microbatch = rank.microbatches[m];
  count_values values;
  values[variable_index(count_variable::W)] = update.world_size();
  values[variable_index(count_variable::N)] = all.valid_tokens;
  values[variable_index(count_variable::n_r)] = rank_counts.valid_tokens;
  values[variable_index(count_variable::n_m)] = microbatch.valid_tokens;
  values[variable_index(count_variable::G)] = rank.microbatches.size();
  // Masses are weight sums; without weights every token weighs 1 and they equal the counts.
  values[variable_index(count_variable::M)] = all.mass;
  values[variable_index(count_variable::m_r)] = rank_counts.mass;
  values[variable_index(count_variable::m_m)] = microbatch.mass();
  values[variable_index(count_variable::B)] = all.sequences;
  values[variable_index(count_variable::b_r)] = rank_counts.sequences;
  values[variable_index(count_variable::b_m)] = join.microbatch_sequences(r, m);
  values[variable_index(count_variable::n_s)] = join.sequence_tokens(r, m, g);
  values[variable_index(count_variable::C)] = update.normalizer;
  return values;
}

part_counts counts_of(const partition& update, const sequence_join& join) {
  return {update.valid_tokens(), update.mass(), join.sequences()};
}

part_counts counts_of(const partition& update, std::size_t r, const sequence_join& join) {
  const rank_stats& rank = update.ranks[r];
  return {rank.valid_tokens(), rank.mass(), join.rank_sequences(r)};
}

}  // namespace

count_values counts_at(const partition& update, std::size_t r, std::size_t m, std::size_t g) {
  const sequence_join join(update);
  return counts_at(update, r, m, g, counts_of(update, join), counts_of(update, r, join), join);
}

recipe_value recipe_gradient(const partition& update, const recipe& r) {
  // Totals once, so that the cost is linear in the groups. Σ c·S_g = θ·Σ c·m_g − Σ c·Σw·y: θ once, each sum
  // added in a balanced tree. A scale that does not read n_s is the same for every group of a microbatch, so it
  // is computed once per microbatch and multiplies the microbatch's sums.
  const bool per_group = r.scale.uses(count_variable::n_s);
  const sequence_join join(update);
  const part_counts all = counts_of(update, join);
  tree_sum scaled_masses;
  tree_sum scaled_sums;
  for (std::size_t rank = 0; rank < update.ranks.size(); ++rank) {
    const part_counts rank_counts = counts_of(update, rank, join);
    for (std::size_t m = 0; m < update.ranks[rank].microbatches.size(); ++m) {
      const microbatch_stats& microbatch = update.ranks[rank].microbatches[m];
      const std::size_t groups = per_group ? microbatch.group_count() : 1;
      for (std::size_t g = 0; g < groups; ++g) {
        recipe_value scale = r.scale.evaluate(counts_at(update, rank, m, g, all, rank_counts, join));
        if (!scale.value) return scale;
        const group_stats& group = per_group ? microbatch.group(g) : microbatch;
        scaled_masses.add(*scale.value * group.mass());
        scaled_sums.add(*scale.value * group.weighted_target_sum());
      }
    }
  }
  rational total = update.theta * scaled_masses.value();
  total -= scaled_sums.value();
  if (r.reducer == reducer_kind::mean) total /= update.world_size();
  return {total, {}};
}

}  // namespace normcheck
