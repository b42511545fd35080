#include "demo_support.hpp"

#include "normcheck/core/normalization.hpp"

namespace normcheck::demo_support {

namespace {

// ---- probes: the weight of a token is the gradient when only that token has derivative 1 ----

// The update with the same counts at θ = 0 in which every target is 0 except in the microbatches that
// `mark` selects: there one token (or, with `whole`, every token) has target −1, so derivative 1.
template <typename Mark>
partition probe(const partition& shape, Mark mark, bool whole) {
  partition probe_update = shape;
  probe_update.theta = 0;
  for (std::size_t r = 0; r < probe_update.ranks.size(); ++r) {
    std::vector<microbatch_stats>& microbatches = probe_update.ranks[r].microbatches;
    bool placed = false;
    for (std::size_t m = 0; m < microbatches.size(); ++m) {
      microbatch_stats& stats = microbatches[m];
      rational marked = 0;
      if (mark(r, m) && stats.valid_tokens > 0 && (whole || !placed)) {
        marked = whole ? rational(stats.valid_tokens) : rational(1);
        placed = true;
      }
      rational sum = -marked;
      stats.set_sums({std::move(sum), marked, {}});
    }
  }
  return probe_update;
}

}  // namespace

// ---- numbers as text ----

bool is_integer(const rational& value) { return boost::multiprecision::denominator(value) == 1; }

std::string exact(const rational& value) { return shorten(to_string(value)); }

std::string show(const rational& value) {
  std::string out = exact(value);
  if (!is_integer(value)) out += " (≈ " + approximate(value) + ")";
  return out;
}

std::string show(const std::optional<rational>& value) { return value ? show(*value) : std::string("undefined"); }
std::string exact(const std::optional<rational>& value) { return value ? exact(*value) : std::string("undefined"); }

// A term inside a sum: negative values in parentheses.
std::string term(const rational& value) { return value < 0 ? "(" + exact(value) + ")" : exact(value); }

// "(a + b)" for a few terms, a single term as it is, and the total for many.
std::string sum_text(const std::vector<rational>& terms) {
  if (terms.size() == 1) return term(terms.front());
  if (terms.size() > shown_terms) {
    rational total;
    for (const rational& t : terms) total += t;
    return term(total);
  }
  std::string out = "(";
  for (std::size_t i = 0; i < terms.size(); ++i) out += (i ? " + " : "") + term(terms[i]);
  return out + ")";
}

// "a, b, c" for a few values; the first few and a count for many.
std::string list_text(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < shown_terms; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > shown_terms) out += ", … (" + std::to_string(items.size()) + " in all)";
  return out;
}

std::string tokens_text(const std::vector<token>& tokens) {
  if (tokens.empty()) return "(none)";
  std::vector<std::string> items;
  for (const token& t : tokens) items.push_back(t ? exact(*t) : std::string("null"));
  return list_text(items);
}

std::vector<rational> rank_sums(const partition& p) {
  std::vector<rational> sums;
  for (const rank_stats& rank : p.ranks) sums.push_back(loss_gradient_sum(rank, p.theta));
  return sums;
}

// ---- building blocks of a document ----

demo_block paragraph(std::string text) { return demo_paragraph{std::move(text)}; }
demo_block display(std::vector<std::string> lines) { return demo_display{std::move(lines)}; }

std::string overflow_row_text(std::size_t total, std::string_view many) {
  return "… " + std::to_string(total - shown_rows) + " more " + std::string(many);
}

std::optional<rational> rank_probe(const partition& shape, std::size_t rank, strategy s) {
  return gradient(probe(shape, [rank](std::size_t r, std::size_t) { return r == rank; }, true), s);
}

std::optional<rational> token_probe(const partition& shape, std::size_t rank, std::size_t microbatch, strategy s) {
  return gradient(
      probe(shape, [rank, microbatch](std::size_t r, std::size_t m) { return r == rank && m == microbatch; }, false),
      s);
}

partition at_theta(const partition& p, const rational& theta) {
  partition moved = p;
  moved.theta = theta;
  return moved;
}

// The tokens of each rank dealt into its microbatches (or the whole update into W ranks) in equal
// contiguous runs; nullopt when the counts do not divide evenly.
std::optional<std::vector<std::vector<token>>> deal_equally(const std::vector<token>& tokens, std::size_t parts) {
  std::vector<token> valid;
  for (const token& t : tokens)
    if (t) valid.push_back(t);
  if (parts == 0 || valid.size() % parts != 0) return std::nullopt;
  const std::size_t each = valid.size() / parts;
  std::vector<std::vector<token>> dealt(parts);
  for (std::size_t i = 0; i < valid.size(); ++i) dealt[i / each].push_back(valid[i]);
  return dealt;
}

std::vector<token> flatten(const std::vector<std::vector<token>>& microbatches) {
  std::vector<token> all;
  for (const std::vector<token>& m : microbatches) all.insert(all.end(), m.begin(), m.end());
  return all;
}

// Every valid token of the layout dealt to the same number of ranks in equal runs, one microbatch each.
std::optional<token_layout> deal_ranks_equally(const token_layout& tokens) {
  std::vector<token> all;
  for (const auto& rank : tokens) {
    const std::vector<token> flat = flatten(rank);
    all.insert(all.end(), flat.begin(), flat.end());
  }
  const std::optional<std::vector<std::vector<token>>> dealt = deal_equally(all, tokens.size());
  if (!dealt) return std::nullopt;
  token_layout layout;
  for (const std::vector<token>& rank : *dealt) layout.push_back({rank});
  return layout;
}

std::string description_of(const demo_input& input) {
  return "Computed on " + input.origin + ".";
}

demo_table rank_table(const demo_input& input) {
  const partition& p = input.update;
  demo_table table;
  table.header = {"rank", input.tokens ? "targets" : "Σy", "nᵣ", "Sᵣ", "Sᵣ/nᵣ"};
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    if (r == shown_rows) {
      table.rows.push_back({overflow_row_text(p.ranks.size(), "ranks"), "", "", "", ""});
      break;
    }
    const rank_stats& rank = p.ranks[r];
    const std::uint64_t n = rank.valid_tokens();
    const rational s = loss_gradient_sum(rank, p.theta);
    std::optional<rational> mean;
    if (n > 0) mean = s / n;
    table.rows.push_back({std::to_string(r),
                          input.tokens ? tokens_text(flatten((*input.tokens)[r])) : exact(rank.target_sum()),
                          std::to_string(n), exact(s), mean ? exact(*mean) : std::string("undefined (nᵣ = 0)")});
  }
  return table;
}

std::optional<rational> local_scalar(const partition& p, std::string_view name, std::size_t rank) {
  const objective_units units(p, p.objective);
  const normalization& n = *find_normalization(name);
  tree_sum total;
  const rank_stats& stats = p.ranks[rank];
  for (std::size_t m = 0; m < stats.microbatches.size(); ++m)
    for (std::size_t g = 0; g < stats.microbatches[m].group_count(); ++g) {
      const std::optional<rational> c = local_coefficient(units, n, {rank, m, g});
      if (!c) return std::nullopt;
      total.add(*c * loss_gradient_sum(stats.microbatches[m].group(g), p.theta));
    }
  return total.value();
}

std::string update_summary(const partition& p) {
  return "The update holds N = " + std::to_string(p.valid_tokens()) + " valid tokens on W = " +
         std::to_string(p.world_size()) + " ranks, at θ = " + show(p.theta) + ".";
}

rational objective_at(const partition& p, const rational& theta) {
  return *gradient(at_theta(p, theta), strategy::global_mean);
}

demo_section control_section(std::string heading, const demo_input& control, demo_table table,
                             std::vector<std::string> values, std::string lesson) {
  return {std::move(heading),
          {paragraph(description_of(control) + " " + update_summary(control.update)), std::move(table),
           display(std::move(values)), paragraph(std::move(lesson))}};
}

demo_input dealt_control(const demo_input& input, std::string_view demo_name,
                         std::optional<token_layout> (*deal)(const token_layout&), const control_origins& origins) {
  if (input.tokens)
    if (const std::optional<token_layout> dealt = deal(*input.tokens))
      return example_input(*dealt, input.update.theta, reducer_kind::mean, origins.dealt);
  const demo_input builtin = builtin_input(demo_name);
  const std::string why = input.tokens ? origins.uneven
                                       : "a file's partition keeps only sums, so its own tokens cannot be dealt anew";
  return example_input(*deal(*builtin.tokens), builtin.update.theta, reducer_kind::mean,
                       origins.builtin + " (" + why + ")");
}

}  // namespace normcheck::demo_support
