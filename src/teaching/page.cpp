#include "normcheck/teaching/page.hpp"

#include "demo_support.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/markup.hpp"
#include "normcheck/teaching/html.hpp"
#include "normcheck/teaching/lab.hpp"

#include <stdexcept>
#include <utility>

namespace normcheck {

namespace {

constexpr std::string_view page_style =
#include "page_style.css.inc"
    ;

constexpr std::string_view page_script =
#include "page_script.js.inc"
    ;

using demo_support::exact;
using demo_support::mistaken_color;
using demo_support::show;

// ---- the lab's data for the script ----

// How the lab words the literal reader's failures: the text of each with a gap for the literal, and how
// the reader cuts a long literal when it quotes it.
struct literal_failure_texts {
  std::size_t quote_limit = 0;
  std::string ellipsis;
  std::vector<std::pair<std::string, std::string>> texts;  // failure kind, text with the gap {0}
};

[[noreturn]] void unexpected_reply(std::string_view probe, const std::string& why) {
  throw std::logic_error("the lab's reply to 'set x " + std::string(probe.substr(0, 20)) + "' " + why);
}

// Each failure provoked once through the lab itself, so the page shows exactly what the command line shows.
// The kinds are the names the page's script gives the reader's checks.
literal_failure_texts probe_literal_failures() {
  const number_limits limits;
  const std::string digits_probe(limits.max_digits + 1, '1');
  const std::vector<std::pair<std::string_view, std::string>> probes{
      {"no_leading_digit", "a"},
      {"no_denominator", "1/"},
      {"trailing_characters", "1x"},
      {"leading_zero", "01"},
      {"zero_denominator", "1/0"},
      {"no_fraction_digit", "1."},
      {"no_exponent_digit", "1e"},
      {"no_hex_digit", "0x"},
      {"no_binary_exponent", "0x1"},
      {"exponent_too_large", "1e" + std::to_string(limits.max_exponent + 1)},
      {"too_many_digits", digits_probe},
  };
  const std::string prefix = lab_say(lab_message::malformed, {""});
  literal_failure_texts out;
  for (const auto& [kind, probe] : probes) {
    lab_session session;
    const lab_reply reply = session.execute("set x " + probe);
    if (reply.status != lab_status::malformed || reply.lines.size() != 1 || reply.lines[0].rfind(prefix, 0) != 0)
      unexpected_reply(probe, "is not one malformed line");
    std::string text = reply.lines[0].substr(prefix.size());
    // The literal appears once, between the first two apostrophes.
    const std::size_t open = text.find('\'');
    const std::size_t close = open == std::string::npos ? open : text.find('\'', open + 1);
    if (close == std::string::npos) unexpected_reply(probe, "does not quote the literal");
    const std::string quoted = text.substr(open + 1, close - open - 1);
    if (probe == digits_probe) {
      const std::size_t kept = quoted.find_first_not_of('1');
      if (kept == 0 || kept == std::string::npos || kept >= probe.size())
        unexpected_reply(probe, "does not cut the long literal");
      out.quote_limit = kept;
      out.ellipsis = quoted.substr(kept);
    } else if (quoted != probe) {
      unexpected_reply(probe, "quotes the literal as '" + quoted + "'");
    }
    text.replace(open + 1, close - open - 1, "{0}");
    out.texts.emplace_back(std::string(kind), std::move(text));
  }
  return out;
}

// ---- figures ----

// The library's figure is a standalone SVG file; inline in HTML it loses the XML prolog and the namespace
// declaration (HTML implies it) and gains its role and text alternative.
std::string inline_figure(std::string svg, std::string_view id, const std::string& description) {
  const std::string prolog = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  if (svg.rfind(prolog, 0) == 0) svg.erase(0, prolog.size());
  const std::string namespace_declaration = " xmlns=\"http://www.w3.org/2000/svg\"";
  const std::size_t declared = svg.find(namespace_declaration);
  if (declared != std::string::npos) svg.erase(declared, namespace_declaration.size());
  const std::string title_open = "<title>";
  const std::size_t title = svg.find(title_open);
  const std::size_t title_end = svg.find("</title>");
  if (svg.rfind("<svg ", 0) != 0 || title == std::string::npos || title_end == std::string::npos)
    throw std::logic_error("a figure is not an SVG document with a title");
  const std::string name(id);
  svg.insert(title_end + 8, "\n  <desc id=\"" + name + "-desc\">" + xml_escape(description) + "</desc>");
  svg.replace(title, title_open.size(), "<title id=\"" + name + "-title\">");
  svg.insert(4, " role=\"img\" aria-labelledby=\"" + name + "-title " + name + "-desc\"");
  // The caption repeats the description for sighted readers; the image's name already holds it.
  // In a narrow window the figure keeps a legible size and scrolls inside its frame.
  return "<figure id=\"" + name +
         "\" class=\"figure\">\n<div class=\"scroll\" role=\"region\" tabindex=\"0\" "
         "aria-label=\"Figure (scrolls sideways in a narrow window)\">\n" +
         svg + "</div>\n<figcaption aria-hidden=\"true\">" + xml_escape(description) + "</figcaption>\n</figure>\n";
}

std::string tokens_phrase(std::uint64_t count) {
  return count == 0 ? "no valid token" : std::to_string(count) + (count == 1 ? " valid token" : " valid tokens");
}

std::string optional_exact(const std::optional<rational>& value) { return value ? exact(*value) : std::string("none"); }

std::string derivation_description(const derivation_facts& f) {
  std::string shares;
  std::string tokens;
  for (std::size_t r = 0; r < f.weights.size(); ++r) {
    const rank_weight& w = f.weights[r];
    const std::string separator = r + 1 < f.weights.size() ? "; " : ".";
    shares += "rank " + std::to_string(r) + " (" + tokens_phrase(w.valid_tokens) + ") " +
              optional_exact(w.rank_share_local_means) + " versus " + exact(w.rank_share_objective) + separator;
    tokens += "rank " + std::to_string(r) + " " + optional_exact(w.token_weight_local_means) + " versus " +
              optional_exact(w.token_weight_objective) + separator;
  }
  return "Bars in pairs, one pair per rank: in each pair the hatched bar is the averaged local means and the "
         "plain bar the objective. Each rank's share of the gradient: " + shares +
         " The weight of one token on the rank: " + tokens;
}

std::string disguise_description(const disguise_facts& f) {
  std::string out = "One panel per optimizer: x_t of run A (the gradient times k = " + exact(f.factor) +
                    ", learning rate η) as a solid line with dots, and of run B (the correct gradient, learning "
                    "rate k·η) as a dashed line, from t = 0 to t = " + std::to_string(f.parameters.steps) + ".";
  for (const disguise_run& run : f.runs) {
    out += " " + run.feature + ": ";
    out += run.parts ? "they part at step " + std::to_string(run.parts->step) +
                           ", where A − B = " + show(run.parts->gap) + "."
                     : "A and B agree at every step.";
  }
  return out;
}

// ---- the derivation's numbers at a glance, each marked with the fact it is ----

std::string fact(std::string_view name, const std::optional<rational>& value) {
  if (!value) return "<span data-fact=\"" + std::string(name) + "\" data-undefined=\"\">undefined</span>";
  return "<data data-fact=\"" + std::string(name) + "\" value=\"" + xml_escape(to_string(*value)) + "\">" +
         xml_escape(show(*value)) + "</data>";
}

std::string glance_row(std::string_view what, const std::string& values) {
  return "<tr><td>" + xml_escape(what) + "</td><td>" + values + "</td></tr>\n";
}

std::string derivation_glance(const derivation_facts& f) {
  const partition& p = f.input.update;
  std::string rows;
  rows += glance_row("The update: valid tokens N, ranks W, the parameter θ",
                     "N = " + fact("N", rational(p.valid_tokens())) + ", W = " + fact("W", rational(p.world_size())) +
                         ", θ = " + fact("theta", p.theta));
  rows += glance_row("∇L, the objective's gradient ΣSᵣ/N", fact("objective", f.objective));
  for (std::size_t r = 0; r < f.weights.size(); ++r) {
    const rank_stats& rank = p.ranks[r];
    const rational sum = loss_gradient_sum(rank, p.theta);
    std::optional<rational> mean;
    if (rank.valid_tokens() > 0) mean = sum / rational(rank.valid_tokens());
    const std::string index = std::to_string(r);
    rows += glance_row("Rank " + index + ": its sum Sᵣ and its local mean Sᵣ/nᵣ",
                       "Sᵣ = " + fact("rank-sum-" + index, sum) + ", Sᵣ/nᵣ = " + fact("rank-mean-" + index, mean));
  }
  rows += glance_row("Averaged local means, (1/W)·Σ Sᵣ/nᵣ", fact("local-means", f.local_means));
  rows += glance_row("W·Sᵣ/N on every rank, after the reducer", fact("compensated", f.compensated));
  for (std::size_t r = 0; r < f.weights.size(); ++r) {
    const rank_weight& w = f.weights[r];
    const std::string index = std::to_string(r);
    rows += glance_row("Rank " + index + "'s share: averaged local means versus the objective",
                       fact("share-local-means-" + index, w.rank_share_local_means) + " versus " +
                           fact("share-objective-" + index, w.rank_share_objective));
    rows += glance_row("One token's weight on rank " + index + ": averaged local means versus the objective",
                       fact("token-weight-local-means-" + index, w.token_weight_local_means) + " versus " +
                           fact("token-weight-objective-" + index, w.token_weight_objective));
  }
  rows += glance_row("Control, " + f.control.origin + ": averaged local means, W·Sᵣ/N, objective",
                     fact("control-local-means", f.control_local_means) + ", " +
                         fact("control-compensated", f.control_compensated) + ", " +
                         fact("control-objective", f.control_objective));
  rows += glance_row("With one more rank that holds no token: averaged local means, W·Sᵣ/N, objective",
                     fact("empty-local-means", f.empty_local_means) + ", " +
                         fact("empty-compensated", f.empty_compensated) + ", " +
                         fact("empty-objective", f.empty_objective));
  const std::string rejection = f.all_empty_rejection ? std::string(code_name(*f.all_empty_rejection)) : "accepted";
  rows += glance_row("No valid token on any rank", "<span data-fact=\"all-empty\">" + xml_escape(rejection) +
                                                       "</span>");
  return "<section class=\"glance\" aria-labelledby=\"derivation-glance\">\n"
         "<h3 id=\"derivation-glance\">The derivation's numbers at a glance</h3>\n"
         "<div class=\"scroll\" role=\"region\" tabindex=\"0\" aria-label=\"Table: the derivation's numbers\">\n"
         "<table>\n<thead><tr><th scope=\"col\">quantity</th><th scope=\"col\">value</th></tr></thead>\n<tbody>\n" +
         rows + "</tbody>\n</table>\n</div>\n</section>\n";
}

std::size_t section_starting(const demo_document& document, std::string_view heading, std::size_t fallback) {
  for (std::size_t s = 0; s < document.sections.size(); ++s)
    if (document.sections[s].heading.rfind(heading, 0) == 0) return s;
  return fallback;
}

// ---- the lab ----

std::string lesson_transcript() {
  lab_session session;
  std::string out;
  for (const char* command : {"reset", "set lr 0.1", "set x 2", "predict 1.8", "step", "reset", "set lr 0.2",
                              "set x 2", "step"}) {
    out += std::string("lab> ") + command + "\n";
    for (const std::string& line : session.execute(command).lines) out += line + "\n";
  }
  if (!out.empty()) out.pop_back();
  return out;
}

std::string lab_row(std::string_view form, std::string_view input, std::string_view label, std::string_view mode,
                    std::string_view button) {
  return "<form id=\"" + std::string(form) + "\" class=\"lab-row\">\n<label for=\"" + std::string(input) + "\">" +
         std::string(label) + "</label>\n<input id=\"" + std::string(input) +
         "\" name=\"value\" type=\"text\" inputmode=\"" + std::string(mode) +
         "\" autocomplete=\"off\" autocapitalize=\"off\" spellcheck=\"false\">\n<button type=\"submit\">" +
         std::string(button) + "</button>\n</form>\n";
}

std::string lab_section() {
  const std::vector<std::string> banner = lab_banner();
  std::string help;
  for (const std::string& line : lab_help()) help += (help.empty() ? "" : "\n") + xml_escape(line);
  std::string out =
      "<section id=\"lab\" class=\"lab\" aria-labelledby=\"lab-title\">\n"
      "<h2 id=\"lab-title\">The optimization lab</h2>\n"
      "<p>" +
      xml_escape(banner.front()) +
      "</p>\n"
      "<p class=\"lab-note\" id=\"lab-limits\"><strong>What this instrument lacks.</strong> " +
      xml_escape(lab_limits()) +
      "</p>\n"
      "<p>Set the step size and the start, predict the next iterate, then step: the lab says whether your "
      "prediction equals the exact iterate. Values are read exactly, as the command-line lab reads them: a "
      "decimal is the fraction it names, not the nearest binary float, and fractions <code>p/q</code> and "
      "hexadecimal floats are accepted too. The controls type the lab's commands for you; the last field takes "
      "any command of <code>normcheck lab</code>.</p>\n"
      "<fieldset id=\"lab-controls\">\n<legend>Controls</legend>\n" +
      lab_row("lab-form-lr", "lab-lr", "Step size (set lr)", "decimal", "Set lr") +
      lab_row("lab-form-x", "lab-x", "Start (set x)", "decimal", "Set x") +
      lab_row("lab-form-predict", "lab-predict", "Next iterate (predict)", "decimal", "Predict") +
      lab_row("lab-form-step", "lab-steps", "Steps K (step, blank for one)", "numeric", "Step") +
      "<div class=\"lab-row\">\n<button type=\"button\" id=\"lab-reset\">Reset</button>\n"
      "<button type=\"button\" id=\"lab-show\">Show</button>\n<button type=\"button\" id=\"lab-help\">Help</button>\n"
      "</div>\n" +
      lab_row("lab-form-command", "lab-command", "Any lab command", "text", "Run") +
      "</fieldset>\n"
      "<p id=\"lab-ended\" class=\"lab-note\" hidden>The session has ended (quit). Start over for a new one.</p>\n"
      "<div class=\"lab-row\"><button type=\"button\" id=\"lab-start-over\">Start over</button></div>\n"
      "<h3 id=\"lab-transcript-title\">Transcript</h3>\n"
      "<div id=\"lab-log\" class=\"lab-log\" role=\"log\" aria-live=\"polite\" "
      "aria-labelledby=\"lab-transcript-title\" "
      "tabindex=\"0\"></div>\n"
      "<noscript><p class=\"lab-note\">The lab needs JavaScript; the rest of the page does not.</p></noscript>\n"
      "<h3 id=\"lab-lesson\">The lesson, as the command-line lab runs it</h3>\n"
      "<div class=\"scroll\" role=\"region\" tabindex=\"0\" aria-labelledby=\"lab-lesson\">"
      "<pre class=\"display transcript\">" +
      xml_escape(lesson_transcript()) +
      "</pre></div>\n"
      "<h3 id=\"lab-commands\">The lab's commands</h3>\n"
      "<div class=\"scroll\" role=\"region\" tabindex=\"0\" aria-labelledby=\"lab-commands\">"
      "<pre class=\"display\">" +
      help +
      "</pre></div>\n"
      "</section>\n";
  return out;
}

// The figures' mistaken series, hatched wherever it is filled: a pattern and the rule that applies it.
std::string hatch_rule() {
  return "figure svg rect[fill=\"" + std::string(mistaken_color) + "\"] { fill: url(#hatch-mistaken); }\n";
}

std::string hatch_patterns() {
  const std::string color(mistaken_color);
  return "<svg class=\"patterns\" aria-hidden=\"true\" focusable=\"false\"><defs>"
         "<pattern id=\"hatch-mistaken\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" "
         "patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"" + color + "\"/>"
         "<rect width=\"3\" height=\"8\" fill=\"#ffffff\"/></pattern></defs></svg>\n";
}

}  // namespace

std::string lab_page_data() {
  const literal_failure_texts literal = probe_literal_failures();
  const number_limits limits;
  std::string out;
  json_writer json(out, json_context::script_element);
  json.begin_object(json_layout::lines)
      .member("banner", lab_banner())
      .member("limits", lab_limits())
      .member("help", lab_help())
      .member("max_steps", lab_max_steps)
      .member("significant_digits", std::uint64_t{lab_significant_digits})
      .key("literal")
      .begin_object()
      .member("quote_limit", std::uint64_t{literal.quote_limit})
      .member("ellipsis", literal.ellipsis)
      .member("max_digits", std::uint64_t{limits.max_digits})
      .member("max_exponent", static_cast<std::uint64_t>(limits.max_exponent))
      .end_object()
      .key("messages")
      .begin_object(json_layout::lines);
  for (const lab_message_text& message : lab_messages()) json.member(message.name, message.text);
  for (const auto& [kind, text] : literal.texts) json.member("literal_" + kind, text);
  json.end_object().end_object();
  return out;
}

std::string teaching_page(const std::optional<demo_input>& input) {
  auto chosen = [&input](std::string_view name) { return input ? *input : builtin_input(name); };
  const derivation_facts derivation = compute_derivation(chosen("derivation"));
  const accumulation_facts accumulation = compute_accumulation(chosen("accumulation"));
  const demo_document reducers = reducers_document(chosen("reducers"));
  const disguise_facts disguise = compute_disguise(chosen("disguise"), default_disguise_parameters());

  const demo_document derivation_text = derivation_document(derivation);
  html_document_options derivation_options{"derivation", derivation_glance(derivation), {}};
  derivation_options.inserts.push_back(
      {section_starting(derivation_text, "Weights", 0),
       inline_figure(derivation_figure(derivation), "derivation-figure", derivation_description(derivation))});
  const demo_document disguise_text = disguise_document(disguise);
  html_document_options disguise_options{"disguise", "", {}};
  disguise_options.inserts.push_back(
      {0, inline_figure(disguise_figure(disguise), "disguise-figure", disguise_description(disguise))});

  std::string contents;
  for (const demo_info& info : demo_catalog())
    contents += "<li><a href=\"#" + std::string(info.name) + "\">" + std::string(info.name) + "</a>: " +
                xml_escape(info.summary) + "</li>\n";
  contents += "<li><a href=\"#lab\">lab</a>: " + xml_escape(lab_banner().front()) + "</li>\n";

  const std::string computed_on =
      input ? "on " + input->origin : std::string("each demo on its built-in example");
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      // Nothing may be fetched: no script, style, font, image or connection from anywhere.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
      "script-src 'unsafe-inline'\">\n"
      "<title>The token mean, derived: normcheck's teaching page</title>\n<style>" +
      std::string(page_style) + hatch_rule() +
      "</style>\n</head>\n<body>\n<a class=\"skip\" href=\"#lab\">Skip to the lab</a>\n" + hatch_patterns() +
      "<header>\n<h1>The token mean, derived</h1>\n"
      "<p>Why each rank of a data-parallel update backpropagates W·Sᵣ/N, what goes wrong otherwise, and a lab to "
      "try a step size by hand. Every number on this page was computed exactly, in rational arithmetic, by "
      "normcheck when the page was generated, " +
      xml_escape(computed_on) +
      ". The page needs no network: its style, figures and script are all in this one file.</p>\n"
      "<nav aria-label=\"Contents\">\n<ul>\n" +
      contents + "</ul>\n</nav>\n</header>\n<main>\n" + render_html(derivation_text, derivation_options) +
      render_html(accumulation_document(accumulation), {"accumulation", "", {}}) +
      render_html(reducers, {"reducers", "", {}}) + render_html(disguise_text, disguise_options) + lab_section() +
      "</main>\n<footer>\n<p>Generated by <code>normcheck demo --html</code>. The demos as text: "
      "<code>normcheck demo NAME</code>; the lab at a terminal: <code>normcheck lab</code>.</p>\n</footer>\n"
      "<script type=\"application/json\" id=\"lab-data\">" +
      lab_page_data() + "</script>\n<script>" + std::string(page_script) + "</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace normcheck
