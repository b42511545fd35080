#include "normcheck/teaching/accumulation.hpp"

#include "demo_support.hpp"

namespace normcheck {

using namespace demo_support;

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

  f.control =
      dealt_control(input, "accumulation", deal_microbatches_equally,
                    {"the same tokens of each rank dealt equally to its microbatches",
                     "the built-in tokens dealt equally to the microbatches", "these counts do not divide evenly"});
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
                            input.tokens ? tokens_text((*input.tokens)[r][m]) : exact(stats.target_sum()),
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
    s.blocks.push_back(
        paragraph(description_of(f.input) + " " + update_summary(p) +
                  " Each rank accumulates its microbatches into one "
                  "optimizer update (" +
                  (g ? "G = " + std::to_string(*g) + " on every rank" : std::string("Gᵣ differs by rank")) +
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
      // (1/Gᵣ)·Σₘ Sᵣₘ/nᵣₘ, as the normalization table has it.
      rational value = *local_scalar(p, "microbatch_mean", r);
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
    std::vector<rational> scaled;
    std::vector<std::string> items;
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
      rational local = *local_scalar(p, "scaled_sum", r);  // W·Sᵣ/N, as the normalization table has it
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
    const bool hidden = f.control_microbatch_means && *f.control_microbatch_means == f.control_objective;
    d.sections.push_back(control_section(
        "Control: equal microbatches", f.control, microbatch_table(f.control),
        {"per-microbatch means: " + show(f.control_microbatch_means),
         "objective:            " + show(f.control_objective)},
        hidden ? "When every microbatch holds the same number of valid tokens the per-microbatch denominators agree "
                 "with the objective: a fixed-length, unpadded batch hides the mistake."
               : "Even with these microbatches the per-microbatch means miss the objective."));
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

}  // namespace normcheck
