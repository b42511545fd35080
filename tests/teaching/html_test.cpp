// The HTML renderer of the teaching page: escaping, JSON inside a script element, and demo documents.

#include "normcheck/teaching/html.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck.h>

#include <cstdint>
#include <string>
#include <vector>

using normcheck::demo_document;
using normcheck::html_escape;
using normcheck::render_html;
using normcheck::script_json_string;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The inverse of html_escape, for the round-trip law.
std::string unescape(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    bool matched = false;
    for (const auto& [entity, c] : {std::pair<std::string, char>{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'},
                                    {"&quot;", '"'}, {"&#39;", '\''}}) {
      if (text.compare(i, entity.size(), entity) == 0) {
        out += c;
        i += entity.size();
        matched = true;
        break;
      }
    }
    if (!matched) out += text[i++];
  }
  return out;
}

std::string utf8(const std::vector<std::uint32_t>& code_points) {
  std::string out;
  for (std::uint32_t c : code_points) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

demo_document sample() {
  demo_document d;
  d.title = "Title <with> & \"quotes\" and 'apostrophes'";
  d.sections.push_back({"First <section>", {normcheck::demo_paragraph{"a < b & c > d, see `normcheck demo <x>` for -3/2"},
                                            normcheck::demo_display{{"∇L = (0 + (-6)) / 4 = -3/2", "x < y && z"}}}});
  normcheck::demo_table table;
  table.header = {"rank", "Sᵣ/nᵣ", "a\"b"};
  table.rows = {{"0", "1/2", "<td>"}, {"1", "1/4", "&amp;"}};
  d.sections.push_back({"Second", {table, normcheck::demo_paragraph{"an unpaired ` backtick"}}});
  return d;
}

}  // namespace

TEST_CASE("html_escape escapes the five characters of markup and keeps everything else") {
  CHECK(html_escape("<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  CHECK(html_escape("θ = −3/2 ≈ 1.5") == "θ = −3/2 ≈ 1.5");
  CHECK(html_escape("") == "");
}

TEST_CASE("html_escape leaves no markup character and unescapes to its input") {
  CHECK(rc::check("unescape(html_escape(s)) == s and no raw <, >, quote or apostrophe", [](const std::string& s) {
    const std::string escaped = html_escape(s);
    RC_ASSERT(escaped.find_first_of("<>\"'") == std::string::npos);
    RC_ASSERT(unescape(escaped) == s);
  }));
}

TEST_CASE("script_json_string is JSON that cannot close its script element") {
  CHECK(script_json_string("</script><!-- & \"q\" \\ \n\t\x01") ==
        "\"\\u003c/script\\u003e\\u003c!-- \\u0026 \\\"q\\\" \\\\ \\n\\t\\u0001\"");
  CHECK(rc::check("a JSON string of s, without <, > or &", [] {
    // Valid UTF-8 of any code points (nlohmann rejects invalid UTF-8, as JSON does).
    const auto code_points = *rc::gen::container<std::vector<std::uint32_t>>(rc::gen::oneOf(
        rc::gen::inRange<std::uint32_t>(0, 0x80), rc::gen::inRange<std::uint32_t>(0x80, 0xD800),
        rc::gen::inRange<std::uint32_t>(0xE000, 0x110000)));
    const std::string s = utf8(code_points);
    const std::string json = script_json_string(s);
    RC_ASSERT(json.find_first_of("<>&") == std::string::npos);
    const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
    RC_ASSERT(!parsed.is_discarded());
    RC_ASSERT(parsed.get<std::string>() == s);
  }));
}

TEST_CASE("a demo document becomes an article with every text escaped") {
  const std::string html = render_html(sample(), {"demo-id", "<p>lead</p>\n", {}});
  CHECK(html.rfind("<article id=\"demo-id\" class=\"demo\" aria-labelledby=\"demo-id-title\">", 0) == 0);
  CHECK(contains(html, "<h2 id=\"demo-id-title\">Title &lt;with&gt; &amp; &quot;quotes&quot; and &#39;apostrophes&#39;</h2>\n<p>lead</p>"));
  CHECK(contains(html, "<h3 id=\"demo-id-1\">First &lt;section&gt;</h3>"));
  CHECK(contains(html, "<h3 id=\"demo-id-2\">Second</h3>"));
  CHECK(contains(html, "<p>a &lt; b &amp; c &gt; d, see <code>normcheck demo &lt;x&gt;</code> for -3/2</p>"));
  CHECK(contains(html, "<pre class=\"display\">∇L = (0 + (-6)) / 4 = -3/2\nx &lt; y &amp;&amp; z</pre>"));
  CHECK(contains(html, "<th scope=\"col\">rank</th><th scope=\"col\">Sᵣ/nᵣ</th><th scope=\"col\">a&quot;b</th>"));
  CHECK(contains(html, "<tr><td>0</td><td>1/2</td><td>&lt;td&gt;</td></tr>"));
  CHECK(contains(html, "<tr><td>1</td><td>1/4</td><td>&amp;amp;</td></tr>"));
  CHECK(contains(html, "<p>an unpaired ` backtick</p>"));
  // Wide blocks scroll in their own focusable region, named after their section.
  CHECK(contains(html, "<div class=\"scroll\" role=\"region\" tabindex=\"0\" aria-label=\"Table: Second\"><table>"));
  CHECK(contains(html, "aria-label=\"Algebra: First &lt;section&gt;\"><pre"));
  CHECK_FALSE(contains(html, "http"));
  CHECK_FALSE(contains(html, "<td>\"<"));
}

TEST_CASE("inserts follow their section, and one past the last section ends the article") {
  const std::string html =
      render_html(sample(), {"d", "", {{0, "<figure>one</figure>\n"}, {7, "<figure>end</figure>\n"}}});
  const std::size_t first_end = html.find("</section>");
  CHECK(html.find("<figure>one</figure>") == first_end + std::string("</section>\n").size());
  CHECK(html.find("<figure>end</figure>\n</article>") != std::string::npos);
}
