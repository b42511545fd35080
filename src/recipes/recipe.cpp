#include "normcheck/recipes/recipe.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/normalization.hpp"
#include "normcheck/core/sequence_join.hpp"
#include "normcheck/core/utf8.hpp"

#include <algorithm>

namespace normcheck {

namespace {

constexpr std::array<std::string_view, update_variables> variable_names{"W",   "N", "n_r", "n_m", "G",   "M", "m_r",
                                                                        "m_m", "B", "b_r", "b_m", "n_s", "C"};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string in_capitals(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

// The role whose dimension's size `v` is, and whether `v` is a count reduced over that role's dimension.
std::optional<mesh_role> role_of(count_variable v) {
  switch (v) {
    case count_variable::data_size:
    case count_variable::over_data:
      return mesh_role::data;
    case count_variable::sequence_size:
    case count_variable::over_sequence:
      return mesh_role::sequence;
    case count_variable::replica_size:
      return mesh_role::replica;
    default:
      return std::nullopt;
  }
}

// The spellings `names` offers, each with its variable, in index order.
std::vector<std::pair<count_variable, std::string>> offered(const recipe_names& names) {
  std::vector<std::pair<count_variable, std::string>> out;
  for (count_variable v : all_count_variables)
    if (std::string spelled = names.spelling(v); !spelled.empty()) out.emplace_back(v, std::move(spelled));
  return out;
}

// The first two offered variables spelled alike, if any.
std::optional<std::string> clashing_spelling(const recipe_names& names) {
  const auto all = offered(names);
  for (std::size_t i = 0; i < all.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (all[i].second == all[j].second) return all[i].second;
  return std::nullopt;
}

}  // namespace

std::string_view variable_name(count_variable v) noexcept {
  return variable_index(v) < update_variables ? variable_names[variable_index(v)] : std::string_view{};
}

recipe_names::recipe_names(std::vector<mesh_dim> mesh, std::string term)
    : mesh_(std::move(mesh)), term_(std::move(term)) {
  for (std::size_t i = 0; i < mesh_.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      if (mesh_[i].name == mesh_[j].name)
        throw error(error_code::usage_error, "the mesh names the dimension \"" + mesh_[i].name + "\" twice");
      if (mesh_[i].role == mesh_[j].role)
        throw error(error_code::usage_error,
                    "the dimensions \"" + mesh_[j].name + "\" and \"" + mesh_[i].name + "\" both have the role " +
                        std::string(mesh_role_name(mesh_[i].role)) +
                        ": a recipe names one dimension of each role (their sizes would multiply)");
    }
  if (!term_.empty() && (!is_identifier(term_) || term_ == "main"))
    throw error(error_code::usage_error,
                "a term's name is [a-z][a-z0-9_]* other than main, not \"" + printable(term_) + "\"");
  if (const std::optional<std::string> clash = clashing_spelling(*this))
    throw error(error_code::usage_error, "two names of this mesh and term would both be spelled " + *clash +
                                             " in a recipe: rename a dimension or the term");
}

recipe_names recipe_names::of_document(const std::vector<mesh_dim>& mesh) {
  recipe_names names;
  for (const mesh_dim& dim : mesh) {
    const auto same_role =
        std::count_if(mesh.begin(), mesh.end(), [&](const mesh_dim& d) { return d.role == dim.role; });
    if (same_role != 1) continue;
    names.mesh_.push_back(dim);
    if (clashing_spelling(names)) names.mesh_.pop_back();
  }
  return names;
}

std::vector<mesh_dim> recipe_names::parse_mesh(std::string_view text) {
  std::vector<mesh_dim> dims;
  std::size_t at = 0;
  auto fail = [&](std::size_t column, const std::string& what) {
    location where;
    where.file = "--mesh";
    where.line = 1;
    where.column = column + 1;
    where.offset = column;
    throw error(error_code::usage_error,
                what + " (--mesh lists dimensions as name:role, e.g. dp:data,cp:sequence,tp:replica)", where);
  };
  if (text.empty()) fail(0, "the mesh is empty");
  for (;;) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, end - at);
    const std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) fail(at, "expected name:role, not \"" + printable(item) + "\"");
    mesh_dim dim;
    dim.name = std::string(item.substr(0, colon));
    if (!is_identifier(dim.name))
      fail(at, "a dimension's name is [a-z][a-z0-9_]*, not \"" + printable(dim.name) + "\"");
    const std::optional<mesh_role> role = mesh_role_from_name(item.substr(colon + 1));
    if (!role)
      fail(at + colon + 1,
           "a role is " + mesh_role_alternatives() + ", not \"" + printable(item.substr(colon + 1)) + "\"");
    dim.role = *role;
    dims.push_back(std::move(dim));
    if (end == text.size()) break;
    at = end + 1;
  }
  try {
    (void)recipe_names(dims, std::string());
  } catch (const error& e) {
    fail(0, e.message());
  }
  return dims;
}

const mesh_dim* recipe_names::dimension(mesh_role role) const {
  for (const mesh_dim& dim : mesh_)
    if (dim.role == role) return &dim;
  return nullptr;
}

std::string recipe_names::spelling(count_variable v) const {
  using cv = count_variable;
  if (!term_.empty()) {
    switch (v) {
      case cv::N:
        return "N_" + term_;
      case cv::n_r:
        return "n_r_" + term_;
      case cv::n_m:
        return "n_m_" + term_;
      case cv::main_N:
        return "N";
      case cv::main_n_r:
        return "n_r";
      case cv::main_n_m:
        return "n_m";
      default:
        break;
    }
  }
  if (variable_index(v) < update_variables) return std::string(variable_name(v));
  const std::optional<mesh_role> role = role_of(v);
  const mesh_dim* dim = role ? dimension(*role) : nullptr;
  if (!dim) return {};
  return v == cv::over_data || v == cv::over_sequence ? "N_" + dim->name : in_capitals(dim->name);
}

std::optional<count_variable> recipe_names::find(std::string_view name) const {
  for (const auto& [v, spelled] : offered(*this))
    if (spelled == name) return v;
  return std::nullopt;
}

std::string recipe_names::listed() const {
  std::string out;
  for (const auto& [v, spelled] : offered(*this)) out += (out.empty() ? "" : ", ") + spelled;
  return out;
}

// Recursive descent: expression := term (('+'|'-') term)*, term := factor (('*'|'/') factor)*,
// factor := ('-'|'+') factor | number | name | '(' expression ')'. Nesting is bounded.
class recipe_parser {
public:
  recipe_parser(std::string_view text, const recipe_names& names) : text_(text), names_(names) {}

  recipe_expression parse() {
    result_.text_ = std::string(text_);
    result_.names_ = names_;
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
      const std::optional<count_variable> found = names_.find(name);
      if (!found) {
        const bool more = !names_.mesh().empty() || !names_.term().empty();
        fail_at(start, "unknown name \"" + std::string(name) +
                           "\": a recipe uses W, N, n_r, n_m, G (and M, m_r, m_m for weighted objectives; B, b_r, "
                           "b_m, n_s for sequences; C for the constant objective" +
                           (more ? "; here: " + names_.listed() : std::string("; on a mesh or beside a term, more")) +
                           ")");
      }
      result = add({recipe_expression::kind::variable, 0, *found, -1, -1, start, pos_});
    } else {
      fail("expected a number, a count (W, N, n_r, n_m, G) or '('");
    }
    --depth_;
    return result;
  }

  std::string_view text_;
  const recipe_names& names_;
  std::size_t pos_ = 0;
  int depth_ = 0;
  recipe_expression result_;
};

recipe_expression recipe_expression::parse(std::string_view text, const recipe_names& names) {
  return recipe_parser(text, names).parse();
}

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

std::optional<count_variable> recipe_expression::mesh_or_term_variable() const {
  for (std::size_t i = update_variables; i < all_count_variables.size(); ++i)
    if (uses(all_count_variables[i])) return all_count_variables[i];
  return std::nullopt;
}

std::pair<unsigned, unsigned> recipe_expression::degree_bound() const { return degree_of(root_); }

namespace {

// The update's and a rank's counts, computed once per update and per rank; for a rank on a mesh also its count
// reduced over the data dimensions only and over the sequence dimensions only.
struct part_counts {
  std::uint64_t valid_tokens;
  rational mass;
  std::uint64_t sequences;
  rational over_data = 0;
  rational over_sequence = 0;
};

// The counts of a group, given the update's and its rank's totals; `join` counts the sequences (B, b_r, b_m and
// n_s count whole sequences, the slices of one sequence joined).
count_values counts_at(const partition& update, std::size_t r, std::size_t m, std::size_t g, const part_counts& all,
                       const part_counts& rank_counts, const sequence_join& join, const partition* main) {
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
  values[variable_index(count_variable::data_size)] = update.mesh_extent(mesh_role::data);
  values[variable_index(count_variable::sequence_size)] = update.mesh_extent(mesh_role::sequence);
  values[variable_index(count_variable::replica_size)] = update.mesh_extent(mesh_role::replica);
  values[variable_index(count_variable::over_data)] = rank_counts.over_data;
  values[variable_index(count_variable::over_sequence)] = rank_counts.over_sequence;
  // The main loss's counts, where a term's scale reads them (the loss itself's otherwise).
  const partition& loss = main ? *main : update;
  values[variable_index(count_variable::main_N)] = loss.valid_tokens();
  values[variable_index(count_variable::main_n_r)] = loss.ranks[r].valid_tokens();
  const std::vector<microbatch_stats>& loss_microbatches = loss.ranks[r].microbatches;
  values[variable_index(count_variable::main_n_m)] =
      m < loss_microbatches.size() ? loss_microbatches[m].valid_tokens : 0;
  return values;
}

part_counts counts_of(const partition& update, const sequence_join& join) {
  return {update.valid_tokens(), update.mass(), join.sequences()};
}

// The counts reduced over one role's dimensions are the core's (objective_units, in valid tokens); without a
// sequence dimension the count over the data dimensions is N and the count over the sequence dimensions nᵣ.
part_counts counts_of(const partition& update, std::size_t r, const sequence_join& join,
                      const std::optional<objective_units>& tokens) {
  const rank_stats& rank = update.ranks[r];
  part_counts counts{rank.valid_tokens(), rank.mass(), join.rank_sequences(r)};
  counts.over_data = rational(update.valid_tokens());
  counts.over_sequence = rational(counts.valid_tokens);
  if (tokens) {
    if (std::optional<rational> over = tokens->over_data_dims(r)) counts.over_data = *over;
    if (std::optional<rational> over = tokens->over_sequence_dims(r)) counts.over_sequence = *over;
  }
  return counts;
}

std::optional<objective_units> token_units_if_read(const partition& update, const recipe_expression& scale) {
  if (!scale.uses(count_variable::over_data) && !scale.uses(count_variable::over_sequence)) return std::nullopt;
  return objective_units(update, objective_kind::token_mean);
}

}  // namespace

count_values counts_at(const partition& update, std::size_t r, std::size_t m, std::size_t g) {
  const sequence_join join(update);
  const objective_units tokens(update, objective_kind::token_mean);
  return counts_at(update, r, m, g, counts_of(update, join), counts_of(update, r, join, tokens), join, nullptr);
}

namespace {

// Calls `each(rank, microbatch, group, scale)` for every group the scale is computed at (a microbatch where it
// does not read n_s), with the scale there; returns the zero divisor met first, if any.
template <typename Each>
std::optional<recipe_value> each_scaled_group(const partition& update, const recipe& r, const partition* main,
                                              bool per_group, Each&& each) {
  if (main && main->ranks.size() != update.ranks.size())
    throw error(error_code::schema_error, "a term stands on the main loss's ranks");
  const sequence_join join(update);
  const part_counts all = counts_of(update, join);
  const std::optional<objective_units> tokens = token_units_if_read(update, r.scale);
  for (std::size_t rank = 0; rank < update.ranks.size(); ++rank) {
    const part_counts rank_counts = counts_of(update, rank, join, tokens);
    for (std::size_t m = 0; m < update.ranks[rank].microbatches.size(); ++m) {
      const microbatch_stats& microbatch = update.ranks[rank].microbatches[m];
      const std::size_t groups = per_group ? microbatch.group_count() : 1;
      for (std::size_t g = 0; g < groups; ++g) {
        recipe_value scale = r.scale.evaluate(counts_at(update, rank, m, g, all, rank_counts, join, main));
        if (!scale.value) return scale;
        each(rank, m, g, *scale.value);
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<recipe_components> recipe_group_components(const partition& update, const recipe& r,
                                                         const partition* main) {
  recipe_components out;
  const rational divisor = r.reducer == reducer_kind::mean ? rational(update.world_size()) : rational(1);
  const std::optional<recipe_value> undefined =
      each_scaled_group(update, r, main, true, [&](std::size_t rank, std::size_t m, std::size_t g, const rational& c) {
        const group_stats& group = update.ranks[rank].microbatches[m].group(g);
        const rational n(group.valid_tokens);
        out.components.push_back(c * loss_gradient_sum(group, update.theta) / divisor);
        // Σⱼ (θ − j) over j = 1 … n.
        out.witness.push_back(c * (n * update.theta - n * (n + 1) / 2) / divisor);
      });
  if (undefined) return std::nullopt;
  return out;
}

recipe_value recipe_gradient(const partition& update, const recipe& r, const partition* main) {
  // Totals once, so that the cost is linear in the groups. Σ c·S_g = θ·Σ c·m_g − Σ c·Σw·y: θ once, each sum
  // added in a balanced tree. A scale that does not read n_s is the same for every group of a microbatch, so it
  // is computed once per microbatch and multiplies the microbatch's sums.
  const bool per_group = r.scale.uses(count_variable::n_s);
  tree_sum scaled_masses;
  tree_sum scaled_sums;
  const std::optional<recipe_value> undefined = each_scaled_group(
      update, r, main, per_group, [&](std::size_t rank, std::size_t m, std::size_t g, const rational& c) {
        const microbatch_stats& microbatch = update.ranks[rank].microbatches[m];
        const group_stats& group = per_group ? microbatch.group(g) : microbatch;
        scaled_masses.add(c * group.mass());
        scaled_sums.add(c * group.weighted_target_sum());
      });
  if (undefined) return *undefined;
  rational total = update.theta * scaled_masses.value();
  total -= scaled_sums.value();
  if (r.reducer == reducer_kind::mean) total /= update.world_size();
  return {total, {}};
}

}  // namespace normcheck
