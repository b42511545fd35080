#include "normcheck/teaching/disguise.hpp"

#include "demo_support.hpp"
#include "normcheck/teaching/svg.hpp"

namespace normcheck {

using namespace demo_support;

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
    table.header = {"optimizer", "first step where A ≠ B", "A − B there",
                    "A − B at step " + std::to_string(f.parameters.steps)};
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

}  // namespace normcheck
