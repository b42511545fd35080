#include "normcheck/teaching/demo.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/teaching/svg.hpp"

#include <algorithm>
#include <array>

namespace normcheck {

namespace {

// Rows of a table beyond which the rest of the ranks or microbatches are summarized in one line.
constexpr std::size_t shown_rows = 16;
// Terms of a sum written out one by one; longer sums are shown by their value.
constexpr std::size_t shown_terms = 6;
constexpr std::size_t wrap_columns = 100;

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

rational sum_of(const std::vector<rational>& values) {
  rational total;
  for (const rational& v : values) total += v;
  return total;
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
      stats.target_sum = -marked;
      stats.target_abs_sum = marked;
    }
  }
  return probe_update;
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

}  // namespace

// ---------------------------------------------------------------------------------------------
// Rendering

namespace {

std::size_t text_width(std::string_view text) {
  std::size_t width = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++width;
  return width;
}

std::string pad(const std::string& text, std::size_t width) {
  const std::size_t w = text_width(text);
  return w >= width ? text : text + std::string(width - w, ' ');
}

// The words of a paragraph; "=" is glued to its neighbours so that "θ = 0" never breaks across lines.
std::vector<std::string> wrap_units(const std::string& text) {
  std::vector<std::string> units;
  bool glue_next = false;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    const std::size_t start = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i == start) break;
    std::string word = text.substr(start, i - start);
    const bool is_glue = word == "=";
    if ((is_glue || glue_next) && !units.empty()) units.back() += " " + word;
    else units.push_back(std::move(word));
    glue_next = is_glue;
  }
  return units;
}

void write_wrapped(std::ostream& out, const std::string& text) {
  std::size_t column = 0;
  for (const std::string& word : wrap_units(text)) {
    const std::size_t width = text_width(word);
    if (column > 0 && column + 1 + width > wrap_columns) {
      out << "\n";
      column = 0;
    }
    if (column > 0) {
      out << ' ';
      ++column;
    }
    out << word;
    column += width;
  }
  out << "\n";
}

std::vector<std::size_t> column_widths(const demo_table& table) {
  std::vector<std::size_t> widths(table.header.size(), 0);
  auto widen = [&widths](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size() && c < widths.size(); ++c)
      widths[c] = std::max(widths[c], text_width(row[c]));
  };
  widen(table.header);
  for (const auto& row : table.rows) widen(row);
  return widths;
}

void write_text_row(std::ostream& out, const std::vector<std::string>& row, const std::vector<std::size_t>& widths) {
  std::string line = "  ";
  for (std::size_t c = 0; c < widths.size(); ++c) {
    const std::string cell = c < row.size() ? row[c] : std::string();
    line += c + 1 < widths.size() ? pad(cell, widths[c] + 2) : cell;
  }
  out << line << "\n";
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

void render_text(std::ostream& out, const demo_document& document) {
  out << document.title << "\n" << std::string(text_width(document.title), '=') << "\n";
  for (const demo_section& section : document.sections) {
    out << "\n" << section.heading << "\n" << std::string(text_width(section.heading), '-') << "\n";
    for (const demo_block& block : section.blocks) {
      out << "\n";
      if (const auto* p = std::get_if<demo_paragraph>(&block)) {
        write_wrapped(out, p->text);
      } else if (const auto* d = std::get_if<demo_display>(&block)) {
        for (const std::string& line : d->lines) out << "    " << line << "\n";
      } else if (const auto* t = std::get_if<demo_table>(&block)) {
        const std::vector<std::size_t> widths = column_widths(*t);
        write_text_row(out, t->header, widths);
        std::vector<std::string> rule;
        for (std::size_t w : widths) rule.push_back(std::string(w, '-'));
        write_text_row(out, rule, widths);
        for (const auto& row : t->rows) write_text_row(out, row, widths);
      }
    }
  }
}

void render_markdown(std::ostream& out, const demo_document& document) {
  out << "# " << document.title << "\n";
  for (const demo_section& section : document.sections) {
    out << "\n## " << section.heading << "\n";
    for (const demo_block& block : section.blocks) {
      out << "\n";
      if (const auto* p = std::get_if<demo_paragraph>(&block)) {
        out << p->text << "\n";
      } else if (const auto* d = std::get_if<demo_display>(&block)) {
        out << "```text\n";
        for (const std::string& line : d->lines) out << line << "\n";
        out << "```\n";
      } else if (const auto* t = std::get_if<demo_table>(&block)) {
        auto row = [&out](const std::vector<std::string>& cells) {
          out << "|";
          for (const std::string& cell : cells) out << " " << markdown_cell(cell) << " |";
          out << "\n";
        };
        row(t->header);
        out << "|";
        for (std::size_t c = 0; c < t->header.size(); ++c) out << "---|";
        out << "\n";
        for (const auto& r : t->rows) row(r);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Catalog and inputs

const std::vector<demo_info>& demo_catalog() {
  static const std::vector<demo_info> catalog{
      {"derivation", "why each rank backpropagates W·Sᵣ/N: local means, per-rank versus per-token weights, "
                     "the equal-count control, an empty rank, an update without tokens", true},
      {"accumulation", "the same story one level down: a denominator per microbatch versus the update's N", false},
      {"reducers", "the mean and the sum reducer: what W compensation does under each, and the factor of each "
                   "mistake", false},
      {"disguise", "a gradient off by k versus the learning rate times k: equal under plain SGD, parted by weight "
                   "decay and clipping", true},
  };
  return catalog;
}

std::optional<demo_info> find_demo(std::string_view name) {
  for (const demo_info& info : demo_catalog())
    if (info.name == name) return info;
  return std::nullopt;
}

demo_input example_input(const token_layout& tokens, const rational& theta, reducer_kind reducer,
                         std::string origin) {
  demo_input input;
  input.update = make_accumulated_partition(tokens, theta, reducer);
  input.origin = std::move(origin);
  input.tokens = tokens;
  return input;
}

demo_input builtin_input(std::string_view demo_name) {
  const token_layout one_and_three{{{token{0}}}, {{token{2}, token{2}, token{2}}}};
  if (demo_name == "accumulation") {
    const token_layout accumulated{{{token{0}}, {token{2}, token{2}, token{2}}},
                                   {{token{2}, token{2}}, {token{2}, token{2}}}};
    return example_input(accumulated, 0, reducer_kind::mean);
  }
  // Three ranks keep W, N and N/W apart, so every factor names one count.
  const token_layout three_ranks{{{token{0}}}, {{token{2}, token{2}, token{2}}}, {{token{2}, token{2}}}};
  if (demo_name == "disguise") return example_input(three_ranks, 0, reducer_kind::sum);
  if (demo_name == "reducers") return example_input(three_ranks, 0, reducer_kind::mean);
  return example_input(one_and_three, 0, reducer_kind::mean);
}

// ---------------------------------------------------------------------------------------------
// Weights

std::vector<rank_weight> measure_rank_weights(const partition& update) {
  std::vector<rank_weight> weights;
  for (std::size_t r = 0; r < update.ranks.size() && r < shown_rows; ++r) {
    rank_weight w;
    w.valid_tokens = update.ranks[r].valid_tokens();
    w.rank_share_local_means = rank_probe(update, r, strategy::local_mean);
    w.rank_share_objective = *rank_probe(update, r, strategy::global_mean);
    if (w.valid_tokens > 0) {
      std::size_t m = 0;
      while (update.ranks[r].microbatches[m].valid_tokens == 0) ++m;
      w.token_weight_local_means = token_probe(update, r, m, strategy::local_mean);
      w.token_weight_objective = token_probe(update, r, m, strategy::global_mean);
    }
    weights.push_back(std::move(w));
  }
  return weights;
}

// ---------------------------------------------------------------------------------------------
// derivation

derivation_facts compute_derivation(const demo_input& input) {
  derivation_facts f;
  f.input = input;
  if (input.update.reducer != reducer_kind::mean) {
    f.input.update.reducer = reducer_kind::mean;
    f.input.origin += " (taken under the mean reducer; the file names sum, which `normcheck demo reducers` covers)";
  }
  const partition& p = f.input.update;
  f.objective = *gradient(p, strategy::global_mean);
  f.local_means = gradient(p, strategy::local_mean);
  f.compensated = *gradient(p, strategy::scaled_sum);

  const rational world_size(p.world_size());
  const rational valid_tokens(p.valid_tokens());
  const std::vector<rational> sums = rank_sums(p);
  rational reduced;
  for (const rational& s : sums) reduced += world_size * s / valid_tokens;
  reduced /= world_size;
  const rational factored = (1 / world_size) * (world_size / valid_tokens) * sum_of(sums);
  const rational cancelled = sum_of(sums) / valid_tokens;
  f.algebra = {reduced, factored, cancelled};
  f.weights = measure_rank_weights(p);

  // The control deals the same tokens equally; a file's partition keeps only sums, so it uses the built-in tokens.
  std::optional<token_layout> control_tokens = input.tokens ? deal_ranks_equally(*input.tokens) : std::nullopt;
  rational control_theta = p.theta;
  std::string control_origin = "the same tokens dealt equally";
  if (!control_tokens) {
    const demo_input builtin = builtin_input("derivation");
    control_tokens = deal_ranks_equally(*builtin.tokens);
    control_theta = builtin.update.theta;
    control_origin = input.tokens ? "the built-in tokens dealt equally (these tokens do not divide evenly into W ranks)"
                                  : "the built-in tokens dealt equally (a file's partition keeps only sums, so its "
                                    "own tokens cannot be dealt anew)";
  }
  f.control = example_input(*control_tokens, control_theta, reducer_kind::mean, control_origin);
  f.control_local_means = gradient(f.control.update, strategy::local_mean);
  f.control_objective = *gradient(f.control.update, strategy::global_mean);
  f.control_compensated = *gradient(f.control.update, strategy::scaled_sum);

  f.with_empty_rank = f.input;
  f.with_empty_rank.update.ranks.push_back(rank_stats{{microbatch_stats{}}});
  if (f.with_empty_rank.tokens) f.with_empty_rank.tokens->push_back({{}});
  f.empty_local_means = gradient(f.with_empty_rank.update, strategy::local_mean);
  f.empty_objective = *gradient(f.with_empty_rank.update, strategy::global_mean);
  f.empty_compensated = *gradient(f.with_empty_rank.update, strategy::scaled_sum);

  partition all_empty = p;
  for (rank_stats& rank : all_empty.ranks) rank.microbatches = {microbatch_stats{}};
  try {
    (void)gradient(all_empty, strategy::scaled_sum);
  } catch (const error& e) {
    f.all_empty_rejection = e.code();
    f.all_empty_message = e.message();
  }
  return f;
}

namespace {

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
    table.rows.push_back({std::to_string(r), input.tokens ? tokens_text(flatten((*input.tokens)[r])) : exact(rank.target_sum()),
                          std::to_string(n), exact(s), mean ? exact(*mean) : std::string("undefined (nᵣ = 0)")});
  }
  return table;
}

std::string first_empty_rank(const partition& p) {
  for (std::size_t r = 0; r < p.ranks.size(); ++r)
    if (p.ranks[r].valid_tokens() == 0) return std::to_string(r);
  return "?";
}

bool counts_equal(const partition& p) {
  for (const rank_stats& rank : p.ranks)
    if (rank.valid_tokens() != p.ranks.front().valid_tokens()) return false;
  return true;
}

std::string update_summary(const partition& p) {
  return "The update holds N = " + std::to_string(p.valid_tokens()) + " valid tokens on W = " +
         std::to_string(p.world_size()) + " ranks, at θ = " + show(p.theta) + ".";
}

// "(1/W)·Σ Sᵣ/nᵣ = (a + b) / W = v" lines for the averaged local means.
std::vector<std::string> local_mean_lines(const partition& p, const std::optional<rational>& delivered) {
  std::vector<std::string> lines;
  std::vector<rational> means;
  for (const rank_stats& rank : p.ranks) {
    if (rank.valid_tokens() == 0) {
      lines.push_back("rank " + first_empty_rank(p) + " holds no valid token: its Sᵣ/nᵣ does not exist");
      lines.push_back("(1/W)·Σ Sᵣ/nᵣ is undefined");
      return lines;
    }
    rational mean = loss_gradient_sum(rank, p.theta) / rank.valid_tokens();
    means.push_back(std::move(mean));
  }
  std::vector<std::string> items;
  for (const rational& m : means) items.push_back(exact(m));
  lines.push_back("each rank backpropagates Sᵣ/nᵣ: " + list_text(items));
  lines.push_back("the reducer averages them: (1/W)·Σ Sᵣ/nᵣ = " + sum_text(means) + " / " +
                  std::to_string(p.world_size()) + " = " + show(delivered));
  return lines;
}

}  // namespace

demo_document derivation_document(const derivation_facts& f) {
  const partition& p = f.input.update;
  const rational world_size(p.world_size());
  const rational valid_tokens(p.valid_tokens());
  const std::vector<rational> sums = rank_sums(p);
  demo_document d;
  d.title = "The derivation: why each rank backpropagates W·Sᵣ/N";

  {
    demo_section s{"The update and its objective", {}};
    s.blocks.push_back(paragraph(
        description_of(f.input) + " " + update_summary(p) +
        " Every token's loss is ℓ(θ, y) = ½(θ − y)², whose derivative is θ − y. Sᵣ is the sum of these derivatives "
        "over the valid tokens of rank r and nᵣ their number. DDP's reducer sums the ranks' gradients and divides "
        "by W."));
    s.blocks.push_back(rank_table(f.input));
    s.blocks.push_back(display({"L = ΣSᵣ / N",
                                "∇L = " + sum_text(sums) + " / " + std::to_string(p.valid_tokens()) + " = " +
                                    show(f.objective)}));
    s.blocks.push_back(paragraph("This is the gradient of the objective: the mean over the update's valid tokens. "
                                 "A correct implementation delivers it however the tokens are dealt to ranks."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Averaging the local means", {}};
    s.blocks.push_back(display(local_mean_lines(p, f.local_means)));
    std::string verdict;
    if (!f.local_means) {
      verdict = "A rank without valid tokens has no mean to average, so this normalization does not even produce a "
                "gradient here.";
    } else if (*f.local_means != f.objective) {
      rational share = *f.local_means / f.objective;
      verdict = "The averaged local means give " + show(*f.local_means) + ", not the objective " +
                show(f.objective) + (f.objective != 0 ? ": " + exact(share) + " of it" : std::string()) +
                ". The gap is not rounding: they are the gradient of another objective, one that weights ranks "
                "instead of tokens.";
    } else if (counts_equal(p)) {
      verdict = "Here they equal the objective, because every rank holds the same number of valid tokens; "
                "unequal counts would part them.";
    } else {
      verdict = "Here they equal the objective although the counts differ: an accident of these values, not a "
                "property of the normalization (the weights below differ).";
    }
    s.blocks.push_back(paragraph(verdict));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Weights: each rank's share and each token's weight", {}};
    s.blocks.push_back(paragraph(
        "Each weight is measured with the library: the gradient of an update with the same counts in which one "
        "token (or all tokens of one rank) has derivative 1 and every other token derivative 0."));
    demo_table table;
    table.header = {"rank", "nᵣ", "rank's share, local means", "rank's share, objective",
                    "token's weight, local means", "token's weight, objective"};
    for (std::size_t r = 0; r < f.weights.size(); ++r) {
      const rank_weight& w = f.weights[r];
      table.rows.push_back({std::to_string(r), std::to_string(w.valid_tokens), exact(w.rank_share_local_means),
                            exact(w.rank_share_objective),
                            w.valid_tokens ? exact(w.token_weight_local_means) : std::string("no token"),
                            w.valid_tokens ? exact(w.token_weight_objective) : std::string("no token")});
    }
    if (p.ranks.size() > f.weights.size())
      table.rows.push_back({overflow_row_text(p.ranks.size(), "ranks"), "", "", "", "", ""});
    s.blocks.push_back(table);
    const rational per_rank = 1 / world_size;
    const rational per_token = 1 / valid_tokens;
    s.blocks.push_back(paragraph(
        "Averaging local means gives every rank the same share 1/W = " + exact(per_rank) +
        ", whatever it holds, so the weight 1/(W·nᵣ) of a token falls as its rank holds more tokens. The objective "
        "gives every token the same weight 1/N = " + exact(per_token) +
        ", so the share nᵣ/N of a rank grows with its count."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Why W·Sᵣ/N compensates the reducer", {}};
    std::vector<std::string> scaled_items;
    std::vector<rational> scaled;
    for (const rational& sum : sums) {
      rational local = world_size * sum / valid_tokens;
      scaled_items.push_back(std::to_string(p.world_size()) + "·" + term(sum) + "/" + std::to_string(p.valid_tokens()) +
                             " = " + exact(local));
      scaled.push_back(std::move(local));
    }
    const rational w_over_n = world_size / valid_tokens;
    s.blocks.push_back(display({
        "each rank backpropagates W·Sᵣ/N: " + list_text(scaled_items),
        "the reducer averages:  (1/W)·Σ W·Sᵣ/N = " + sum_text(scaled) + " / " + std::to_string(p.world_size()) +
            " = " + show(f.algebra[0]),
        "W/N leaves the sum:    (1/W)·(W/N)·ΣSᵣ = (1/" + std::to_string(p.world_size()) + ")·(" + exact(w_over_n) +
            ")·" + term(sum_of(sums)) + " = " + show(f.algebra[1]),
        "1/W and W cancel:      ΣSᵣ/N = " + term(sum_of(sums)) + " / " + std::to_string(p.valid_tokens()) + " = " +
            show(f.algebra[2]),
    }));
    const bool holds = f.compensated == f.objective;
    s.blocks.push_back(paragraph(
        "The library's gradient for W·Sᵣ/N is " + show(f.compensated) + " and the objective's is " +
        show(f.objective) + (holds ? ": they are equal." : ": they differ, which would be a defect.") +
        " The reducer divides by W and every local scalar carries a factor W, so the two cancel; the common "
        "denominator N then gives every token the weight 1/N. A rank without valid tokens has Sᵣ = 0 and adds "
        "exactly 0, without forming a mean it cannot form."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Control: the same tokens dealt equally", {}};
    s.blocks.push_back(paragraph(description_of(f.control) + " " + update_summary(f.control.update)));
    s.blocks.push_back(rank_table(f.control));
    s.blocks.push_back(display({"averaged local means: " + show(f.control_local_means),
                                "W·Sᵣ/N:               " + show(f.control_compensated),
                                "objective:            " + show(f.control_objective)}));
    const bool hidden = f.control_local_means && *f.control_local_means == f.control_objective;
    s.blocks.push_back(paragraph(
        hidden ? "With equal counts the averaged local means equal the objective as well, so a test on an equal "
                 "partition passes with either normalization. Only unequal counts tell them apart: keep equal "
                 "partitions as a control, never as the only test."
               : "Even with these counts the averaged local means miss the objective."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"A rank that holds no valid token", {}};
    const partition& e = f.with_empty_rank.update;
    s.blocks.push_back(paragraph("The same update with one more rank that holds no valid token. " +
                                 update_summary(e)));
    std::vector<std::string> scaled_items;
    std::vector<rational> scaled;
    const rational e_world(e.world_size());
    const rational e_tokens(e.valid_tokens());
    for (const rational& sum : rank_sums(e)) {
      rational local = e_world * sum / e_tokens;
      scaled_items.push_back(exact(local));
      scaled.push_back(std::move(local));
    }
    s.blocks.push_back(display({
        "W·Sᵣ/N per rank:      " + list_text(scaled_items),
        "(1/W)·Σ W·Sᵣ/N:       " + sum_text(scaled) + " / " + std::to_string(e.world_size()) + " = " +
            show(f.empty_compensated),
        "objective:            " + show(f.empty_objective),
        "averaged local means: " + show(f.empty_local_means),
    }));
    s.blocks.push_back(paragraph(
        "The empty rank still joins the reduction, so W counts it (W = " + std::to_string(e.world_size()) +
        "), and its contribution is exactly 0. The compensated gradient " +
        (f.empty_compensated == f.empty_objective ? std::string("still equals") : std::string("does not equal")) +
        " the objective; the averaged local means " +
        (f.empty_local_means ? "give " + show(*f.empty_local_means) : std::string("do not exist")) + "."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"No valid token on any rank", {}};
    s.blocks.push_back(display(
        {"the " + std::to_string(p.world_size()) + " ranks, all empty: " +
         (f.all_empty_rejection ? "rejected with " + std::string(code_name(*f.all_empty_rejection))
                                : std::string("NOT rejected, which would be a defect"))}));
    s.blocks.push_back(paragraph(
        "With N = 0 the mean over valid tokens does not exist, and no choice of local scalar repairs that. N is a "
        "sum over all ranks, so a rank whose own count is 0 cannot know whether any other rank holds a token. If "
        "each rank decided alone, one could skip its backward pass and its collectives while another waits for it, "
        "or the ranks could disagree on whether an update happened. The counts are reduced first, and every rank "
        "then applies the same rule to the same N, for example skipping the update together."));
    d.sections.push_back(std::move(s));
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// accumulation

namespace {

// The common number of microbatches, when every rank accumulates the same number.
std::optional<std::size_t> common_microbatch_count(const partition& p) {
  const std::size_t g = p.ranks.front().microbatches.size();
  for (const rank_stats& rank : p.ranks)
    if (rank.microbatches.size() != g) return std::nullopt;
  return g;
}

// Microbatch m of every rank, as an update of its own.
partition slice(const partition& p, std::size_t m) {
  partition s;
  s.theta = p.theta;
  s.reducer = p.reducer;
  for (const rank_stats& rank : p.ranks) s.ranks.push_back(rank_stats{{rank.microbatches[m]}});
  return s;
}

std::optional<rational> gradient_or_undefined(const partition& p, strategy s) {
  try {
    return gradient(p, s);
  } catch (const error& e) {
    if (e.code() != error_code::no_valid_tokens) throw;
    return std::nullopt;
  }
}

// Each rank's microbatches dealt equally: the same tokens of the rank in Gᵣ equal runs.
std::optional<token_layout> deal_microbatches_equally(const token_layout& tokens) {
  token_layout layout;
  for (const auto& rank : tokens) {
    std::optional<std::vector<std::vector<token>>> dealt = deal_equally(flatten(rank), rank.size());
    if (!dealt) return std::nullopt;
    layout.push_back(std::move(*dealt));
  }
  return layout;
}

}  // namespace

accumulation_facts compute_accumulation(const demo_input& input) {
  accumulation_facts f;
  f.input = input;
  f.input.update.reducer = reducer_kind::mean;
  const partition& p = f.input.update;
  f.objective = *gradient(p, strategy::global_mean);
  f.microbatch_means = gradient(p, strategy::microbatch_mean);
  f.rank_means = gradient(p, strategy::local_mean);
  f.update_count = *gradient(p, strategy::scaled_sum);

  const std::optional<std::size_t> g = common_microbatch_count(p);
  if (g) {
    rational total;
    bool defined = true;
    for (std::size_t m = 0; m < *g; ++m) {
      const std::optional<rational> value = gradient_or_undefined(slice(p, m), strategy::global_mean);
      if (!value) {
        defined = false;
        break;
      }
      f.slice_objectives.push_back(*value);
      total += *value;
    }
    if (defined) {
      total /= *g;
      f.microbatch_global_counts = total;
    } else {
      f.slice_objectives.clear();
    }
  }

  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    for (std::size_t m = 0; m < p.ranks[r].microbatches.size(); ++m) {
      if (f.weights.size() == shown_rows) break;
      microbatch_weight w;
      w.rank = r;
      w.microbatch = m;
      w.valid_tokens = p.ranks[r].microbatches[m].valid_tokens;
      if (w.valid_tokens > 0) {
        w.per_microbatch_mean = token_probe(p, r, m, strategy::microbatch_mean);
        w.update_count = token_probe(p, r, m, strategy::global_mean);
        if (f.microbatch_global_counts) {
          const partition one_slice = slice(p, m);
          const std::optional<rational> slice_weight = token_probe(one_slice, r, 0, strategy::global_mean);
          if (slice_weight) {
            rational averaged = *slice_weight / *g;
            w.per_microbatch_count = averaged;
          }
        }
      }
      f.weights.push_back(std::move(w));
    }
  }

  std::optional<token_layout> control_tokens = input.tokens ? deal_microbatches_equally(*input.tokens) : std::nullopt;
  rational control_theta = p.theta;
  std::string control_origin = "the same tokens of each rank dealt equally to its microbatches";
  if (!control_tokens) {
    const demo_input builtin = builtin_input("accumulation");
    control_tokens = deal_microbatches_equally(*builtin.tokens);
    control_theta = builtin.update.theta;
    control_origin = input.tokens ? "the built-in tokens dealt equally to the microbatches (these counts do not "
                                    "divide evenly)"
                                  : "the built-in tokens dealt equally to the microbatches (a file's partition "
                                    "keeps only sums, so its own tokens cannot be dealt anew)";
  }
  f.control = example_input(*control_tokens, control_theta, reducer_kind::mean, control_origin);
  f.control_microbatch_means = gradient(f.control.update, strategy::microbatch_mean);
  f.control_objective = *gradient(f.control.update, strategy::global_mean);

  f.with_empty_microbatch = f.input;
  f.with_empty_microbatch.origin = "the same update with one more microbatch on rank 0 that holds no valid token";
  f.with_empty_microbatch.update.ranks.front().microbatches.push_back(microbatch_stats{});
  if (f.with_empty_microbatch.tokens) f.with_empty_microbatch.tokens->front().push_back({});
  f.empty_microbatch_means = gradient(f.with_empty_microbatch.update, strategy::microbatch_mean);
  f.empty_objective = *gradient(f.with_empty_microbatch.update, strategy::global_mean);
  f.empty_update_count = *gradient(f.with_empty_microbatch.update, strategy::scaled_sum);
  return f;
}

namespace {

demo_table microbatch_table(const demo_input& input) {
  const partition& p = input.update;
  demo_table table;
  table.header = {"rank", "microbatch", input.tokens ? "targets" : "Σy", "nᵣₘ", "Sᵣₘ", "Sᵣₘ/nᵣₘ"};
  std::size_t rows = 0;
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    for (std::size_t m = 0; m < p.ranks[r].microbatches.size(); ++m) {
      if (rows++ == shown_rows) {
        table.rows.push_back({"…", "", "", "", "", ""});
        return table;
      }
      const microbatch_stats& stats = p.ranks[r].microbatches[m];
      const rational s = loss_gradient_sum(stats, p.theta);
      std::optional<rational> mean;
      if (stats.valid_tokens > 0) mean = s / stats.valid_tokens;
      table.rows.push_back({std::to_string(r), std::to_string(m),
                            input.tokens ? tokens_text((*input.tokens)[r][m]) : exact(stats.target_sum),
                            std::to_string(stats.valid_tokens), exact(s),
                            mean ? exact(*mean) : std::string("undefined (nᵣₘ = 0)")});
    }
  }
  return table;
}

std::string compare(const std::optional<rational>& value, const rational& objective) {
  if (!value) return "undefined";
  return *value == objective ? "equal to the objective" : "not the objective " + exact(objective);
}

}  // namespace

demo_document accumulation_document(const accumulation_facts& f) {
  const partition& p = f.input.update;
  const std::optional<std::size_t> g = common_microbatch_count(p);
  demo_document d;
  d.title = "Accumulation: the denominator belongs to the update";
  {
    demo_section s{"The update and its microbatches", {}};
    s.blocks.push_back(paragraph(
        description_of(f.input) + " " + update_summary(p) + " Each rank accumulates its microbatches into one "
        "optimizer update (" + (g ? "G = " + std::to_string(*g) + " on every rank" : std::string("Gᵣ differs by rank")) +
        "); Sᵣₘ and nᵣₘ are the derivative sum and the valid-token count of microbatch m on rank r."));
    s.blocks.push_back(microbatch_table(f.input));
    std::vector<rational> sums;
    for (const rank_stats& rank : p.ranks)
      for (const microbatch_stats& m : rank.microbatches) sums.push_back(loss_gradient_sum(m, p.theta));
    s.blocks.push_back(display({"∇L = ΣSᵣₘ / N = " + sum_text(sums) + " / " + std::to_string(p.valid_tokens()) +
                                " = " + show(f.objective)}));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"A denominator per microbatch", {}};
    std::vector<std::string> lines;
    std::vector<rational> rank_values;
    bool defined = true;
    for (std::size_t r = 0; r < p.ranks.size() && defined; ++r) {
      std::vector<rational> means;
      for (const microbatch_stats& m : p.ranks[r].microbatches) {
        if (m.valid_tokens == 0) {
          defined = false;
          break;
        }
        rational mean = loss_gradient_sum(m, p.theta) / m.valid_tokens;
        means.push_back(std::move(mean));
      }
      if (!defined) break;
      rational value = sum_of(means) / means.size();
      if (r < shown_terms)
        lines.push_back("rank " + std::to_string(r) + ": (1/Gᵣ)·Σₘ Sᵣₘ/nᵣₘ = " + sum_text(means) + " / " +
                        std::to_string(means.size()) + " = " + exact(value));
      rank_values.push_back(std::move(value));
    }
    if (defined)
      lines.push_back("the reducer averages the ranks: " + sum_text(rank_values) + " / " +
                      std::to_string(p.world_size()) + " = " + show(f.microbatch_means));
    else
      lines.push_back("a microbatch without valid tokens has no mean: the result is undefined");
    s.blocks.push_back(display(lines));
    std::string text = "Each microbatch divided by its own count and averaged over the microbatches gives " +
                       show(f.microbatch_means) + ": " + compare(f.microbatch_means, f.objective) + ".";
    if (f.rank_means) {
      text += " Dividing each rank's sum over the whole update by its count nᵣ and averaging the ranks gives " +
              show(*f.rank_means) + ", " + compare(f.rank_means, f.objective);
      text += (*f.rank_means == f.objective && f.microbatch_means != f.objective)
                  ? ": the ranks hold equal counts, so the trouble sits one level down, in the microbatch "
                    "denominators."
                  : ".";
    }
    s.blocks.push_back(paragraph(text));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"A global count per microbatch", {}};
    if (f.microbatch_global_counts) {
      std::vector<std::string> lines;
      for (std::size_t m = 0; m < f.slice_objectives.size() && m < shown_terms; ++m) {
        const partition one_slice = slice(p, m);
        lines.push_back("microbatch " + std::to_string(m) + ": Nₘ = " + std::to_string(one_slice.valid_tokens()) +
                        ", ΣᵣSᵣₘ/Nₘ = " + exact(f.slice_objectives[m]));
      }
      lines.push_back("(1/G)·Σₘ ΣᵣSᵣₘ/Nₘ = " + sum_text(f.slice_objectives) + " / " + std::to_string(*g) + " = " +
                      show(f.microbatch_global_counts));
      s.blocks.push_back(display(lines));
      s.blocks.push_back(paragraph(
          "Counting tokens across ranks but per microbatch (each rank backpropagates W·Sᵣₘ/(G·Nₘ)) gives " +
          show(f.microbatch_global_counts) + ": " + compare(f.microbatch_global_counts, f.objective) +
          ". It repairs the ranks but averages the microbatches' means, so a token in a sparse microbatch still "
          "weighs more than one in a full microbatch."));
    } else {
      s.blocks.push_back(paragraph(
          g ? std::string("Some microbatch index holds no valid token on any rank, so a per-microbatch global count "
                          "would divide by zero.")
            : std::string("The ranks accumulate different numbers of microbatches, so there is no common microbatch "
                          "index to count across ranks.")));
    }
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"The update's N", {}};
    const rational world_size(p.world_size());
    const rational valid_tokens(p.valid_tokens());
    std::vector<rational> scaled;
    std::vector<std::string> items;
    for (const rank_stats& rank : p.ranks) {
      rational local = world_size * loss_gradient_sum(rank, p.theta) / valid_tokens;
      items.push_back(exact(local));
      scaled.push_back(std::move(local));
    }
    s.blocks.push_back(display({
        "every microbatch backpropagates W·Sᵣₘ/N; accumulation adds them to W·Sᵣ/N per rank: " + list_text(items),
        "(1/W)·Σᵣ W·Sᵣ/N = " + sum_text(scaled) + " / " + std::to_string(p.world_size()) + " = " +
            show(f.update_count),
    }));
    s.blocks.push_back(paragraph(
        "With one denominator for the whole update, N = " + std::to_string(p.valid_tokens()) +
        ", the accumulated gradient is " + show(f.update_count) + ": " + compare(f.update_count, f.objective) +
        ". N must be known before the first microbatch's backward pass, so the counts of the whole update are "
        "gathered first."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Weights of one token in each microbatch", {}};
    demo_table table;
    table.header = {"rank", "microbatch", "nᵣₘ", "per-microbatch mean", "per-microbatch global count",
                    "update's N"};
    for (const microbatch_weight& w : f.weights)
      table.rows.push_back({std::to_string(w.rank), std::to_string(w.microbatch), std::to_string(w.valid_tokens),
                            w.valid_tokens ? exact(w.per_microbatch_mean) : std::string("no token"),
                            w.valid_tokens ? exact(w.per_microbatch_count) : std::string("no token"),
                            w.valid_tokens ? exact(w.update_count) : std::string("no token")});
    s.blocks.push_back(table);
    s.blocks.push_back(paragraph(
        "Only the last column is the same for every token. Each weight is the library's gradient on an update with "
        "the same counts in which that one token has derivative 1 and all others 0."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Control: equal microbatches", {}};
    s.blocks.push_back(paragraph(description_of(f.control) + " " + update_summary(f.control.update)));
    s.blocks.push_back(microbatch_table(f.control));
    s.blocks.push_back(display({"per-microbatch means: " + show(f.control_microbatch_means),
                                "objective:            " + show(f.control_objective)}));
    const bool hidden = f.control_microbatch_means && *f.control_microbatch_means == f.control_objective;
    s.blocks.push_back(paragraph(hidden ? "When every microbatch holds the same number of valid tokens the "
                                          "per-microbatch denominators agree with the objective: a fixed-length, "
                                          "unpadded batch hides the mistake."
                                        : "Even with these microbatches the per-microbatch means miss the objective."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"A microbatch without valid tokens", {}};
    s.blocks.push_back(paragraph(description_of(f.with_empty_microbatch)));
    s.blocks.push_back(display({"per-microbatch means: " + show(f.empty_microbatch_means),
                                "update's N:           " + show(f.empty_update_count),
                                "objective:            " + show(f.empty_objective)}));
    s.blocks.push_back(paragraph(
        std::string(f.empty_microbatch_means ? "The per-microbatch means still exist here. "
                                             : "The per-microbatch mean of an empty microbatch does not exist. ") +
        "With the update's N the empty microbatch adds exactly 0 and the gradient " +
        (f.empty_update_count == f.empty_objective ? "stays the objective." : "misses the objective.")));
    d.sections.push_back(std::move(s));
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// reducers

namespace {

rational objective_at(const partition& p, const rational& theta) {
  return *gradient(at_theta(p, theta), strategy::global_mean);
}

// The ratio of a strategy's gradient to the objective's at θ; nullopt where either is undefined or 0.
std::optional<rational> ratio_at(const partition& p, strategy s, const rational& theta) {
  const partition moved = at_theta(p, theta);
  const std::optional<rational> value = gradient(moved, s);
  const rational objective = *gradient(moved, strategy::global_mean);
  if (!value || objective == 0) return std::nullopt;
  rational ratio = *value / objective;
  return ratio;
}

// The names of the count expressions equal to `factor`, e.g. "W" or "N/W" ("" when none is).
std::string factor_in_counts(const rational& factor, const partition& p) {
  const rational w(p.world_size());
  const rational n(p.valid_tokens());
  const std::array<std::pair<std::string_view, rational>, 6> candidates{{
      {"W", w}, {"N", n}, {"N/W", n / w}, {"1/W", 1 / w}, {"1/N", 1 / n}, {"W/N", w / n}}};
  std::string names;
  for (const auto& [name, value] : candidates)
    if (value == factor) names += (names.empty() ? "" : " = ") + std::string(name);
  return names;
}

std::string relation_text(const strategy_relation& r, const partition& p) {
  if (!r.delivered && !r.factor && !r.ratio_at_first) return "undefined";
  if (r.factor) {
    if (*r.factor == 1) return "equal";
    const std::string names = factor_in_counts(*r.factor, p);
    return "× " + exact(*r.factor) + (names.empty() ? "" : " (= " + names + ")");
  }
  if (r.ratio_at_first && r.ratio_at_second)
    return "no fixed factor: × " + exact(*r.ratio_at_first) + " at θ = " + exact(r.first_theta) + ", × " +
           exact(*r.ratio_at_second) + " at θ = " + exact(r.second_theta);
  return "undefined";
}

const strategy_relation& relation_of(const reducer_facts& f, strategy s) {
  for (const strategy_relation& r : f.relations)
    if (r.name == s) return r;
  throw error(error_code::usage_error, "no relation computed for " + std::string(strategy_name(s)));
}

std::string reducer_heading(reducer_kind reducer) {
  return reducer == reducer_kind::mean ? "The mean reducer: (1/W)·Σᵣ, DDP's default" : "The sum reducer: Σᵣ";
}

}  // namespace

reducer_facts compute_reducer(const partition& update) {
  reducer_facts f;
  f.reducer = update.reducer;
  f.objective = *gradient(update, strategy::global_mean);
  // The objective's gradient θ − ȳ vanishes at one θ at most, so one of any two neighbours will do.
  rational first = update.theta;
  if (objective_at(update, first) == 0) first += 1;
  rational second = first + 1;
  if (objective_at(update, second) == 0) second += 1;
  for (strategy s : all_strategies) {
    if (s == strategy::global_mean) continue;
    strategy_relation r;
    r.name = s;
    r.delivered = gradient(update, s);
    r.equals_objective = r.delivered && *r.delivered == f.objective;
    r.first_theta = first;
    r.second_theta = second;
    const std::optional<rational> at_first = ratio_at(update, s, first);
    const std::optional<rational> at_second = ratio_at(update, s, second);
    if (at_first && at_second) {
      if (*at_first == *at_second) {
        r.factor = at_first;
      } else {
        r.ratio_at_first = at_first;
        r.ratio_at_second = at_second;
      }
    }
    f.relations.push_back(std::move(r));
  }
  return f;
}

demo_document reducers_document(const demo_input& input) {
  demo_document d;
  d.title = "Reducers: what W compensation does under a mean and under a sum";
  partition mean_update = input.update;
  mean_update.reducer = reducer_kind::mean;
  partition sum_update = input.update;
  sum_update.reducer = reducer_kind::sum;
  const std::array<reducer_facts, 2> facts{compute_reducer(mean_update), compute_reducer(sum_update)};
  const partition& p = mean_update;
  {
    demo_section s{"The update", {}};
    s.blocks.push_back(paragraph(description_of(input) + " " + update_summary(p) +
                                 " Both reducers are applied to the same ranks; the objective does not depend on "
                                 "the reducer: ∇L = ΣSᵣ/N = " + show(facts[0].objective) + "."));
    s.blocks.push_back(rank_table(input));
    d.sections.push_back(std::move(s));
  }
  for (const reducer_facts& f : facts) {
    const partition& update = f.reducer == reducer_kind::mean ? mean_update : sum_update;
    demo_section s{reducer_heading(f.reducer), {}};
    demo_table table;
    table.header = {"each rank backpropagates", "name", "delivered", "relation to the objective"};
    std::vector<std::string> correct;
    for (const strategy_relation& r : f.relations) {
      table.rows.push_back({std::string(strategy_formula(r.name)), std::string(strategy_name(r.name)),
                            exact(r.delivered), relation_text(r, update)});
      if (r.factor && *r.factor == 1) correct.push_back(std::string(strategy_formula(r.name)));
    }
    s.blocks.push_back(table);
    s.blocks.push_back(paragraph(
        correct.empty() ? std::string("No local scalar delivers the objective under this reducer.")
                        : "Under this reducer the objective is delivered, at every θ, by " + list_text(correct) +
                              ". The relation is measured as the ratio to the objective at θ = " +
                              exact(f.relations.front().first_theta) + " and at θ = " +
                              exact(f.relations.front().second_theta) +
                              "; equal ratios mean a fixed factor."));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"W compensation under each reducer", {}};
    const strategy_relation& under_mean = relation_of(facts[0], strategy::scaled_sum);
    const strategy_relation& under_sum = relation_of(facts[1], strategy::scaled_sum);
    auto against_objective = [](const strategy_relation& r, const partition& update) {
      if (!r.factor) return relation_text(r, update);
      if (*r.factor == 1) return std::string("the objective");
      const std::string names = factor_in_counts(*r.factor, update);
      return exact(*r.factor) + " × the objective" + (names.empty() ? "" : " (" + exact(*r.factor) + " = " + names + ")");
    };
    s.blocks.push_back(display({"mean: W·Sᵣ/N delivers " + show(under_mean.delivered) + ": " +
                                    against_objective(under_mean, mean_update),
                                "sum:  W·Sᵣ/N delivers " + show(under_sum.delivered) + ": " +
                                    against_objective(under_sum, sum_update)}));
    const strategy_relation& share_under_sum = relation_of(facts[1], strategy::global_share);
    std::string text = "Under the mean reducer the factor W in each local scalar cancels the reducer's division by W. "
                       "A summing reducer does not divide, so the same local scalar ";
    text += under_sum.factor && *under_sum.factor != 1
                ? "scales the gradient by " + exact(*under_sum.factor) + "."
                : "happens to deliver the objective here (W = 1).";
    text += share_under_sum.factor && *share_under_sum.factor == 1
                ? " Under a sum, Sᵣ/N delivers the objective instead"
                : " Under a sum, Sᵣ/N does not deliver the objective either";
    text += ": the W in the local scalar must be the divisor of the reduction actually in use, not a constant of "
            "the recipe.";
    s.blocks.push_back(paragraph(text));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"The factor each mistake produces", {}};
    demo_table table;
    table.header = {"reducer", "each rank backpropagates", "factor", "in counts"};
    std::vector<std::string> reweighting;
    for (const reducer_facts& f : facts) {
      const partition& update = f.reducer == reducer_kind::mean ? mean_update : sum_update;
      for (const strategy_relation& r : f.relations) {
        if (r.factor && *r.factor != 1) {
          const std::string names = factor_in_counts(*r.factor, update);
          table.rows.push_back({std::string(reducer_name(f.reducer)), std::string(strategy_formula(r.name)),
                                exact(*r.factor), names.empty() ? std::string("—") : names});
        } else if (!r.factor && r.ratio_at_first) {
          reweighting.push_back(std::string(strategy_formula(r.name)) + " under " +
                                std::string(reducer_name(f.reducer)));
        }
      }
    }
    s.blocks.push_back(table);
    s.blocks.push_back(paragraph(
        "A fixed factor is a scale error: the direction is right and the size is wrong by a count of the run, so it "
        "changes whenever W or N changes. " +
        (reweighting.empty()
             ? std::string("Every other mistake here is a fixed factor as well.")
             : "The others (" + list_text(reweighting) +
                   ") have no fixed factor at all: their ratio to the objective moves with θ, because they weight "
                   "tokens differently. `normcheck demo disguise` shows why even a fixed factor is not a "
                   "learning-rate matter.")));
    d.sections.push_back(std::move(s));
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// disguise

disguise_parameters default_disguise_parameters() {
  disguise_parameters parameters;
  parameters.learning_rate = read_number("0.1", literal_form::json_number);
  parameters.weight_decay = read_number("0.1", literal_form::json_number);
  parameters.momentum = read_number("0.9", literal_form::json_number);
  parameters.steps = 8;
  return parameters;
}

strategy disguise_mistake(reducer_kind reducer) {
  return reducer == reducer_kind::sum ? strategy::scaled_sum : strategy::local_sum;
}

disguise_facts compute_disguise(const demo_input& input, const disguise_parameters& parameters) {
  disguise_facts f;
  f.input = input;
  f.parameters = parameters;
  const partition p = input.update;
  f.mistake = disguise_mistake(p.reducer);
  const reducer_facts relations = compute_reducer(p);
  const strategy_relation& relation = relation_of(relations, f.mistake);
  if (!relation.factor)
    throw error(error_code::usage_error, "the mistake " + std::string(strategy_name(f.mistake)) +
                                             " is not a fixed factor of the objective on this update");
  f.factor = *relation.factor;
  f.start = p.theta;
  // ∇L(x) = x − ȳ, so the optimum is x − ∇L(x) at any x.
  f.optimum = p.theta - objective_at(p, p.theta);

  const strategy mistake = f.mistake;
  const gradient_function correct = [p](const rational& x) { return objective_at(p, x); };
  const gradient_function mistaken = [p, mistake](const rational& x) { return *gradient(at_theta(p, x), mistake); };
  f.clip_threshold = abs(correct(f.start));

  struct feature {
    std::string name;
    optimizer_settings settings;
  };
  std::vector<feature> features;
  features.push_back({"plain SGD", {}});
  features.push_back({"weight decay", {}});
  features.back().settings.weight_decay = parameters.weight_decay;
  features.push_back({"momentum", {}});
  features.back().settings.momentum = parameters.momentum;
  features.push_back({"momentum and weight decay", {}});
  features.back().settings.momentum = parameters.momentum;
  features.back().settings.weight_decay = parameters.weight_decay;
  features.push_back({"clipping by value", {}});
  features.back().settings.clip_value = f.clip_threshold;
  features.push_back({"clipping by norm", {}});
  features.back().settings.clip_norm = f.clip_threshold;

  for (feature& each : features) {
    disguise_run run;
    run.feature = each.name;
    run.mistaken = each.settings;
    run.mistaken.learning_rate = parameters.learning_rate;
    run.disguised = each.settings;
    run.disguised.learning_rate = f.factor * parameters.learning_rate;
    run.mistaken_path = trajectory(mistaken, f.start, run.mistaken, parameters.steps);
    run.disguised_path = trajectory(correct, f.start, run.disguised, parameters.steps);
    run.parts = first_parting(run.mistaken_path, run.disguised_path);
    f.runs.push_back(std::move(run));
  }
  return f;
}

namespace {

std::string why_it_parts(const disguise_run& run, const disguise_facts& f, bool same_as_value_clipping) {
  const optimizer_settings& s = run.mistaken;
  if (!run.parts) {
    if (s.momentum != 0)
      return "They never part. The momentum buffer is a sum of past gradients weighted by powers of μ, so scaling "
             "every gradient by k scales the buffer by k, and k·η on the correct buffer takes the same step. "
             "Momentum on its own carries the disguise along; it breaks as soon as something in the step does not "
             "scale with the gradient.";
    return "They never part: η·(k·g) and (k·η)·g are the same number at every step, so plain SGD cannot tell a "
           "scaled gradient from a scaled learning rate.";
  }
  if (s.clip_value || s.clip_norm) {
    std::string text = "Clipping looks at the size of the gradient. The threshold c = " + exact(f.clip_threshold) +
                       " is the size of the correct gradient at x₀, so run B is not cut there";
    text += f.factor > 1 ? ", while k times that gradient exceeds c and run A's step is cut."
                         : "; k times that gradient is smaller still, so the runs part only once run B is cut.";
    if (s.clip_norm && same_as_value_clipping)
      text += " The trajectories equal those of clipping by value: in one dimension the norm is |g|, so scaling g "
              "down to norm c and clamping it to [−c, c] give the same gradient.";
    return text;
  }
  if (s.weight_decay != 0)
    return "Weight decay adds λ·x to the gradient, and that term is not multiplied by k: run A moves by "
           "η·(k·g + λ·x), run B by k·η·(g + λ·x). They agree only while x = 0, and part one step after x leaves 0." +
           std::string(s.momentum != 0 ? " Momentum then carries the gap into every later step." : "");
  return "They part.";
}

std::string path_header(bool mistaken) {
  return mistaken ? "A: k·∇L with η" : "B: ∇L with k·η";
}

}  // namespace

demo_document disguise_document(const disguise_facts& f) {
  const partition& p = f.input.update;
  demo_document d;
  d.title = "Disguise: a learning rate cannot hide a scale error";
  {
    demo_section s{"The mistake and its factor", {}};
    s.blocks.push_back(paragraph(description_of(f.input) + " " + update_summary(p) + " The reducer is " +
                                 std::string(reducer_name(p.reducer)) + ", and every rank backpropagates " +
                                 std::string(strategy_formula(f.mistake)) + " (" +
                                 std::string(strategy_name(f.mistake)) + ")."));
    const reducer_facts relations = compute_reducer(p);
    const strategy_relation& relation = relation_of(relations, f.mistake);
    std::vector<std::string> lines;
    for (const rational& theta : {relation.first_theta, relation.second_theta}) {
      const partition moved = at_theta(p, theta);
      lines.push_back("at θ = " + exact(theta) + ": delivered " + exact(*gradient(moved, f.mistake)) +
                      ", objective " + exact(*gradient(moved, strategy::global_mean)));
    }
    const std::string names = factor_in_counts(f.factor, p);
    lines.push_back("k = delivered / objective = " + exact(f.factor) + (names.empty() ? "" : " (= " + names + ")") +
                    " at both");
    lines.push_back("∇L(x) = 0 at x = " + show(f.optimum));
    s.blocks.push_back(display(lines));
    s.blocks.push_back(paragraph(
        "Two runs start at x₀ = θ = " + show(f.start) + " and take " + std::to_string(f.parameters.steps) +
        " steps on the update's objective L(x), the mean of ½(x − y)² over its valid tokens. Run A keeps the "
        "mistake, whose gradient is k·∇L, and the learning rate η = " + show(f.parameters.learning_rate) +
        ". Run B fixes the normalization and multiplies the learning rate by k instead: k·η = " +
        show(f.runs.front().disguised.learning_rate) + ". Each run's gradient is the library's, at every step."));
    d.sections.push_back(std::move(s));
  }
  for (const disguise_run& run : f.runs) {
    demo_section s{run.feature, {}};
    s.blocks.push_back(paragraph("A: " + describe(run.mistaken) + ". B: " + describe(run.disguised) + "."));
    demo_table table;
    table.header = {"t", path_header(true), path_header(false), "A − B"};
    for (std::size_t t = 0; t < run.mistaken_path.size(); ++t) {
      rational gap = run.mistaken_path[t] - run.disguised_path[t];
      table.rows.push_back({std::to_string(t), exact(run.mistaken_path[t]), exact(run.disguised_path[t]),
                            gap == 0 ? std::string("0") : exact(gap)});
    }
    s.blocks.push_back(table);
    std::string verdict;
    if (run.parts)
      verdict = "They part at step " + std::to_string(run.parts->step) + ", by A − B = " + show(run.parts->gap) + ". ";
    bool same_as_value_clipping = false;
    for (const disguise_run& other : f.runs)
      if (other.mistaken.clip_value && !other.mistaken.clip_norm)
        same_as_value_clipping = other.mistaken_path == run.mistaken_path && other.disguised_path == run.disguised_path;
    s.blocks.push_back(paragraph(verdict + why_it_parts(run, f, same_as_value_clipping)));
    d.sections.push_back(std::move(s));
  }
  {
    demo_section s{"Summary", {}};
    demo_table table;
    table.header = {"optimizer", "first step where A ≠ B", "A − B there", "A − B at step " + std::to_string(f.parameters.steps)};
    for (const disguise_run& run : f.runs) {
      rational last = run.mistaken_path.back() - run.disguised_path.back();
      table.rows.push_back({run.feature, run.parts ? std::to_string(run.parts->step) : std::string("never"),
                            run.parts ? show(run.parts->gap) : std::string("—"), last == 0 ? "0" : show(last)});
    }
    s.blocks.push_back(table);
    s.blocks.push_back(paragraph(
        "A retuned learning rate reproduces the mistaken run only while the optimizer is linear in the gradient. "
        "Weight decay, clipping, and any other term that does not scale with the gradient tell the two apart, and "
        "the factor itself moves whenever W or N changes. Fix the normalization; do not tune the learning rate "
        "around it."));
    d.sections.push_back(std::move(s));
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Figures

namespace {

constexpr std::string_view mistaken_color = "#c0392b";
constexpr std::string_view correct_color = "#1f6f8b";
constexpr std::string_view axis_color = "#555555";

rational px(std::int64_t value) { return rational(value); }

}  // namespace

std::string derivation_figure(const derivation_facts& f) {
  const std::size_t ranks = f.weights.size();
  const std::int64_t panel_width = 420;
  const std::int64_t panel_height = 260;
  const std::int64_t top = 100;
  const std::int64_t left_margin = 50;
  svg_canvas canvas(2 * static_cast<std::uint32_t>(panel_width) + 140, static_cast<std::uint32_t>(top + panel_height + 60),
                    "Each rank's share and each token's weight: averaged local means versus the objective");
  canvas.text(px(20), px(28), "Averaged local means (Sᵣ/nᵣ) versus the objective (W·Sᵣ/N)", 16);
  canvas.rect(px(20), px(42), px(14), px(14), mistaken_color);
  canvas.text(px(40), px(54), "averaged local means", 12);
  canvas.rect(px(220), px(42), px(14), px(14), correct_color);
  canvas.text(px(240), px(54), "objective: every token 1/N", 12);

  struct panel {
    std::string title;
    std::vector<std::optional<rational>> mistaken;
    std::vector<std::optional<rational>> correct;
  };
  std::array<panel, 2> panels;
  panels[0].title = "each rank's share";
  panels[1].title = "weight of one token on the rank";
  for (const rank_weight& w : f.weights) {
    panels[0].mistaken.push_back(w.rank_share_local_means);
    panels[0].correct.push_back(w.rank_share_objective);
    panels[1].mistaken.push_back(w.token_weight_local_means);
    panels[1].correct.push_back(w.token_weight_objective);
  }
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const panel& pn = panels[k];
    const rational x0 = px(left_margin + static_cast<std::int64_t>(k) * (panel_width + 60));
    const rational y_base = px(top + panel_height);
    rational highest;
    for (const auto* series : {&pn.mistaken, &pn.correct})
      for (const std::optional<rational>& v : *series)
        if (v && *v > highest) highest = *v;
    if (highest == 0) highest = 1;
    const linear_scale height(0, highest, 0, px(panel_height - 40));
    canvas.text(x0, px(top - 12), pn.title, 13);
    canvas.line(x0, y_base, x0 + px(panel_width), y_base, axis_color, 1);
    canvas.line(x0, y_base, x0, px(top + 10), axis_color, 1);
    const rational group = px(panel_width) / rational(ranks == 0 ? 1 : ranks);
    const rational bar = group * rational(3, 10);
    for (std::size_t r = 0; r < ranks; ++r) {
      const rational gx = x0 + group * r + group / 10;
      for (int side = 0; side < 2; ++side) {
        const std::optional<rational>& v = side == 0 ? pn.mistaken[r] : pn.correct[r];
        const rational bx = gx + bar * side + (side ? group / 20 : rational(0));
        if (!v) {
          canvas.text(bx + bar / 2, y_base - 6, "n/a", 11, text_anchor::middle);
          continue;
        }
        const rational h = height(*v);
        canvas.rect(bx, y_base - h, bar, h, side == 0 ? mistaken_color : correct_color);
        if (ranks <= 8) canvas.text(bx + bar / 2, y_base - h - 4, exact(*v), 11, text_anchor::middle);
      }
      if (ranks <= 16)
        canvas.text(gx + bar, y_base + 16, "rank " + std::to_string(r) + " (n=" +
                                               std::to_string(f.weights[r].valid_tokens) + ")",
                    11, text_anchor::middle);
    }
  }
  return canvas.str();
}

std::string disguise_figure(const disguise_facts& f) {
  const std::int64_t columns = 3;
  const std::int64_t panel_width = 300;
  const std::int64_t panel_height = 200;
  const std::int64_t gap = 60;
  const std::int64_t top = 70;
  const std::int64_t rows = (static_cast<std::int64_t>(f.runs.size()) + columns - 1) / columns;
  svg_canvas canvas(static_cast<std::uint32_t>(columns * (panel_width + gap) + gap),
                    static_cast<std::uint32_t>(top + rows * (panel_height + gap + 20)),
                    "Run A (gradient times k, learning rate η) and run B (correct gradient, learning rate k·η)");
  canvas.text(px(gap), px(26), "x_t of run A (k·∇L, η) and run B (∇L, k·η), k = " + exact(f.factor), 16);
  canvas.line(px(gap), px(44), px(gap + 30), px(44), mistaken_color, 3);
  canvas.text(px(gap + 36), px(48), "A: the mistake", 12);
  canvas.line(px(gap + 170), px(44), px(gap + 200), px(44), correct_color, 3, true);
  canvas.text(px(gap + 206), px(48), "B: the disguise", 12);
  for (std::size_t i = 0; i < f.runs.size(); ++i) {
    const disguise_run& run = f.runs[i];
    const std::int64_t column = static_cast<std::int64_t>(i) % columns;
    const std::int64_t row = static_cast<std::int64_t>(i) / columns;
    const rational x0 = px(gap + column * (panel_width + gap));
    const rational y0 = px(top + row * (panel_height + gap + 20) + 20);
    rational low = run.mistaken_path.front();
    rational high = low;
    for (const auto* path : {&run.mistaken_path, &run.disguised_path})
      for (const rational& v : *path) {
        if (v < low) low = v;
        if (v > high) high = v;
      }
    if (low == high) {
      low -= 1;
      high += 1;
    }
    const rational steps(run.mistaken_path.size() - 1);
    const linear_scale x_of(0, steps, x0, x0 + px(panel_width));
    const linear_scale y_of(low, high, y0 + px(panel_height), y0);
    std::string title = run.feature + ": ";
    title += run.parts ? "parts at step " + std::to_string(run.parts->step) : std::string("never parts");
    canvas.text(x0, y0 - 8, title, 13);
    canvas.line(x0, y0 + px(panel_height), x0 + px(panel_width), y0 + px(panel_height), axis_color, 1);
    canvas.line(x0, y0, x0, y0 + px(panel_height), axis_color, 1);
    if (run.parts) {
      const rational at = x_of(rational(run.parts->step));
      canvas.line(at, y0, at, y0 + px(panel_height), "#999999", 1, true);
    }
    std::vector<svg_point> a;
    std::vector<svg_point> b;
    for (std::size_t t = 0; t < run.mistaken_path.size(); ++t) {
      a.emplace_back(x_of(rational(t)), y_of(run.mistaken_path[t]));
      b.emplace_back(x_of(rational(t)), y_of(run.disguised_path[t]));
    }
    canvas.polyline(a, mistaken_color, 3);
    canvas.polyline(b, correct_color, 2, true);
    for (const svg_point& point : a) canvas.circle(point.first, point.second, 3, mistaken_color);
    canvas.text(x0 - 4, y0 + 4, approximate(high), 10, text_anchor::end);
    canvas.text(x0 - 4, y0 + px(panel_height), approximate(low), 10, text_anchor::end);
    canvas.text(x0, y0 + px(panel_height + 16), "t = 0", 11);
    canvas.text(x0 + px(panel_width), y0 + px(panel_height + 16), "t = " + exact(steps), 11, text_anchor::end);
  }
  return canvas.str();
}

// ---------------------------------------------------------------------------------------------
// Running a demo

demo_output run_demo(std::string_view name, const std::optional<demo_input>& input, bool want_figure) {
  const std::optional<demo_info> info = find_demo(name);
  std::vector<std::string> names;
  std::vector<std::string> with_figures;
  for (const demo_info& each : demo_catalog()) {
    names.emplace_back(each.name);
    if (each.has_figure) with_figures.emplace_back(each.name);
  }
  if (!info)
    throw error(error_code::usage_error, "unknown demo '" + std::string(name) + "': expected one of " +
                                             list_text(names));
  if (want_figure && !info->has_figure)
    throw error(error_code::usage_error, "the demo '" + std::string(name) + "' has no figure: --svg works with " +
                                             list_text(with_figures));
  const demo_input chosen = input ? *input : builtin_input(name);
  demo_output out;
  if (name == "derivation") {
    const derivation_facts facts = compute_derivation(chosen);
    out.document = derivation_document(facts);
    if (want_figure) out.figure = derivation_figure(facts);
  } else if (name == "accumulation") {
    out.document = accumulation_document(compute_accumulation(chosen));
  } else if (name == "reducers") {
    out.document = reducers_document(chosen);
  } else {
    const disguise_facts facts = compute_disguise(chosen, default_disguise_parameters());
    out.document = disguise_document(facts);
    if (want_figure) out.figure = disguise_figure(facts);
  }
  return out;
}

}  // namespace normcheck
