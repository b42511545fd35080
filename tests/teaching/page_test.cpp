// The teaching page: self-contained, every demo's text and numbers present, the lab's data complete.

#include "normcheck/io/markup.hpp"
#include "normcheck/teaching/page.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/teaching/html.hpp"
#include "normcheck/teaching/lab.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <regex>
#include <set>
#include <sstream>
#include <string>

using normcheck::teaching_page;

namespace {

bool page_has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

const std::string& builtin_page() {
  static const std::string page = teaching_page(std::nullopt);
  return page;
}

// Every text of a document as the page shows it: escaped, paragraphs with their backtick spans as <code>.
std::vector<std::string> shown_texts(const normcheck::demo_document& document) {
  std::vector<std::string> texts{normcheck::xml_escape(document.title)};
  for (const normcheck::demo_section& section : document.sections) {
    texts.push_back(normcheck::xml_escape(section.heading));
    for (const normcheck::demo_block& block : section.blocks) {
      if (const auto* p = std::get_if<normcheck::demo_paragraph>(&block)) {
        const std::string html = normcheck::render_html({"", {{"", {*p}}}}, {"x", "", {}});
        const std::size_t open = html.find("<p>");
        texts.push_back(html.substr(open, html.find("</p>", open) + 4 - open));
      } else if (const auto* d = std::get_if<normcheck::demo_display>(&block)) {
        for (const std::string& line : d->lines) texts.push_back(normcheck::xml_escape(line));
      } else if (const auto* t = std::get_if<normcheck::demo_table>(&block)) {
        for (const std::string& cell : t->header)
          texts.push_back("<th scope=\"col\">" + normcheck::xml_escape(cell) + "</th>");
        for (const auto& row : t->rows)
          for (const std::string& cell : row) texts.push_back("<td>" + normcheck::xml_escape(cell) + "</td>");
      }
    }
  }
  return texts;
}

nlohmann::json page_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"lab-data\">";
  const std::size_t start = page.find(open) + open.size();
  return nlohmann::json::parse(page.substr(start, page.find("</script>", start) - start));
}

}  // namespace

TEST_CASE("the page refers to nothing outside itself") {
  const std::string& page = builtin_page();
  CHECK(page.rfind("<!DOCTYPE html>\n<html lang=\"en\">", 0) == 0);
  for (const char* external : {"http://", "https://", " src=", "<link", "@import", "<img", "<iframe", "<?xml"})
    CHECK_MESSAGE(!page_has(page, external), external);
  CHECK(occurrences(page, "<script") == 2);
  CHECK(occurrences(page, "<script>") == 1);
  CHECK(occurrences(page, "<script type=\"application/json\" id=\"lab-data\">") == 1);
  CHECK(page_has(page, "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none';"));
  // Links stay on the page.
  const std::regex href("href=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), href); it != std::sregex_iterator(); ++it)
    CHECK_MESSAGE((*it)[1].str().rfind('#', 0) == 0, (*it)[1].str());
}

TEST_CASE("every text and number of every demo is on the page") {
  const std::string& page = builtin_page();
  for (const normcheck::demo_info& info : normcheck::demo_catalog()) {
    const normcheck::demo_output output = normcheck::run_demo(info.name, std::nullopt, false);
    for (const std::string& text : shown_texts(output.document)) {
      CAPTURE(info.name);
      CHECK_MESSAGE(page_has(page, text), text);
    }
  }
}

TEST_CASE("the derivation's numbers are marked with the facts they are") {
  const std::string& page = builtin_page();
  for (const char* fact :
       {"data-fact=\"objective\" value=\"-3/2\">-3/2 (≈ -1.5)</data>",
        "data-fact=\"local-means\" value=\"-1\">-1</data>", "data-fact=\"rank-mean-1\" value=\"-2\">-2</data>",
        "data-fact=\"share-local-means-0\" value=\"1/2\">", "data-fact=\"share-objective-0\" value=\"1/4\">",
        "data-fact=\"compensated\" value=\"-3/2\">", "data-fact=\"empty-local-means\" data-undefined",
        "data-fact=\"all-empty\">no_valid_tokens</span>"})
    CHECK_MESSAGE(page_has(page, fact), fact);
}

TEST_CASE("both figures are inline images with a text alternative from the data") {
  const std::string& page = builtin_page();
  for (const char* id : {"derivation-figure", "disguise-figure"}) {
    const std::string name(id);
    CHECK(page_has(page, "<svg role=\"img\" aria-labelledby=\"" + name + "-title " + name + "-desc\" width="));
    CHECK(page_has(page, "<title id=\"" + name + "-title\">"));
    CHECK(page_has(page, "<desc id=\"" + name + "-desc\">"));
  }
  CHECK(page_has(page, "rank 0 (1 valid token) 1/2 versus 1/4; rank 1 (3 valid tokens) 1/2 versus 3/4."));
  CHECK(page_has(page, "weight decay: they part at step 2, where A − B = 1/100 (≈ 0.01)."));
  CHECK(page_has(page, "plain SGD: A and B agree at every step."));
}

TEST_CASE("the lab's data holds every message, the help, the limits and the literal reader's failures") {
  const nlohmann::json data = page_data(builtin_page());
  for (const normcheck::lab_message_text& message : normcheck::lab_messages())
    CHECK(data["messages"][std::string(message.name)] == std::string(message.text));
  CHECK(data["help"] == normcheck::lab_help());
  CHECK(data["banner"] == normcheck::lab_banner());
  CHECK(data["limits"] == normcheck::lab_limits());
  CHECK(data["max_steps"] == normcheck::lab_max_steps);
  CHECK(data["significant_digits"] == normcheck::lab_significant_digits);
  CHECK(data["literal"]["max_digits"] == normcheck::number_limits{}.max_digits);
  CHECK(data["literal"]["max_exponent"] == normcheck::number_limits{}.max_exponent);
  CHECK(data["literal"]["quote_limit"] == 40);
  CHECK(data["literal"]["ellipsis"] == "…");

  // Each failure text, filled with another literal, is what the lab says about that literal.
  const std::vector<std::pair<std::string, std::string>> literals{
      {"no_leading_digit", "zz"}, {"no_denominator", "22/"}, {"trailing_characters", "7.5e3q"},
      {"leading_zero", "007"}, {"zero_denominator", "-5/0"}, {"no_fraction_digit", "-3."},
      {"no_exponent_digit", "2E-"}, {"no_hex_digit", "-0X.p3"}, {"no_binary_exponent", "0x1.8"},
      {"exponent_too_large", "0x1p-20000"}};
  for (const auto& entry : literals) {
    const std::string& kind = entry.first;  // not a structured binding: CAPTURE's lambda cannot capture one in clang 14
    const std::string& literal = entry.second;
    CAPTURE(kind);
    normcheck::lab_session lab;
    const normcheck::lab_reply reply = lab.execute("set lr " + literal);
    REQUIRE(reply.lines.size() == 1);
    std::string text = data["messages"]["literal_" + kind].get<std::string>();
    text.replace(text.find("{0}"), 3, literal);
    CHECK(reply.lines.front() == normcheck::lab_say(normcheck::lab_message::malformed, {text}));
  }
}

TEST_CASE("the page on a user's partition shows that partition's numbers") {
  const normcheck::demo_input input =
      normcheck::example_input({{{normcheck::token{1}}}, {{normcheck::token{3}, normcheck::token{5}}}},
                               normcheck::rational(1, 2), normcheck::reducer_kind::mean, "a <test> partition");
  const std::string page = teaching_page(input);
  CHECK(page_has(page, "on a &lt;test&gt; partition."));
  const normcheck::derivation_facts facts = normcheck::compute_derivation(input);
  CHECK(page_has(page, "data-fact=\"objective\" value=\"" + normcheck::to_string(facts.objective) + "\""));
  CHECK(page_has(page, "data-fact=\"theta\" value=\"1/2\""));
  CHECK(facts.objective != normcheck::compute_derivation(normcheck::builtin_input("derivation")).objective);
}

TEST_CASE("a partition the demos reject is rejected by the page") {
  normcheck::demo_input input = normcheck::builtin_input("derivation");
  for (normcheck::rank_stats& rank : input.update.ranks) rank.microbatches = {normcheck::microbatch_stats{}};
  input.tokens.reset();
  CHECK_THROWS_AS(teaching_page(input), normcheck::error);
}

TEST_CASE("every id on the page is unique and every reference names one") {
  const std::string& page = builtin_page();
  std::set<std::string> ids;
  const std::regex id_attribute(" id=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), id_attribute); it != std::sregex_iterator(); ++it)
    CHECK_MESSAGE(ids.insert((*it)[1].str()).second, (std::string("id used twice: ") + (*it)[1].str()));
  const std::regex reference("(aria-labelledby|aria-describedby|for|href)=\"#?([^\"]*)\"");
  std::size_t references = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), reference); it != std::sregex_iterator(); ++it) {
    std::istringstream names((*it)[2].str());
    for (std::string name; names >> name; ++references)
      CHECK_MESSAGE(ids.count(name) == 1, (std::string("no element ") + name));
  }
  CHECK(references > 20);
  for (const char* control : {"lab-lr", "lab-x", "lab-predict", "lab-steps", "lab-command"})
    CHECK(page_has(page, "<label for=\"" + std::string(control) + "\">"));
}
