#include "normcheck/teaching/derivation.hpp"

#include "demo_support.hpp"
#include "normcheck/teaching/svg.hpp"

namespace normcheck {

using namespace demo_support;

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
  // Each rank's W·Sᵣ/N, as the normalization table has it.
  for (std::size_t r = 0; r < p.ranks.size(); ++r) reduced += *local_scalar(p, "scaled_sum", r);
  reduced /= world_size;
  const rational factored = (1 / world_size) * (world_size / valid_tokens) * sum_of(sums);
  const rational cancelled = sum_of(sums) / valid_tokens;
  f.algebra = {reduced, factored, cancelled};
  f.weights = measure_rank_weights(p);

  f.control = dealt_control(input, "derivation", deal_ranks_equally,
                            {"the same tokens dealt equally", "the built-in tokens dealt equally",
                             "these tokens do not divide evenly into W ranks"});
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
    const bool hidden = f.control_local_means && *f.control_local_means == f.control_objective;
    d.sections.push_back(control_section(
        "Control: the same tokens dealt equally", f.control, rank_table(f.control),
        {"averaged local means: " + show(f.control_local_means), "W·Sᵣ/N:               " + show(f.control_compensated),
         "objective:            " + show(f.control_objective)},
        hidden ? "With equal counts the averaged local means equal the objective as well, so a test on an equal "
                 "partition passes with either normalization. Only unequal counts tell them apart: keep equal "
                 "partitions as a control, never as the only test."
               : "Even with these counts the averaged local means miss the objective."));
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


std::string derivation_figure(const derivation_facts& f) {
  const std::size_t ranks = f.weights.size();
  const std::int64_t panel_width = 420;
  const std::int64_t panel_height = 260;
  const std::int64_t top = 100;
  const std::int64_t left_margin = 50;
  svg_canvas canvas(2 * static_cast<std::uint32_t>(panel_width) + 140,
                    static_cast<std::uint32_t>(top + panel_height + 60),
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
    const rational bar = group * fraction(3, 10);
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

}  // namespace normcheck
