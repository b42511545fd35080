// The HTML renderer of the teaching page: demo documents as articles, every text escaped.

#include "normcheck/teaching/html.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using normcheck::demo_document;
using normcheck::render_html;

namespace {

bool html_has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

demo_document sample() {
  demo_document d;
  d.title = "Title <with> & \"quotes\" and 'apostrophes'";
  d.sections.push_back({"First <section>",
                        {normcheck::demo_paragraph{"a < b & c > d, see `normcheck demo <x>` for -3/2"},
                         normcheck::demo_display{{"∇L = (0 + (-6)) / 4 = -3/2", "x < y && z"}}}});
  normcheck::demo_table table;
  table.header = {"rank", "Sᵣ/nᵣ", "a\"b"};
  table.rows = {{"0", "1/2", "<td>"}, {"1", "1/4", "&amp;"}};
  d.sections.push_back({"Second", {table, normcheck::demo_paragraph{"an unpaired ` backtick"}}});
  return d;
}

}  // namespace

TEST_CASE("a demo document becomes an article with every text escaped") {
  const std::string html = render_html(sample(), {"demo-id", "<p>lead</p>\n", {}});
  CHECK(html.rfind("<article id=\"demo-id\" class=\"demo\" aria-labelledby=\"demo-id-title\">", 0) == 0);
  CHECK(html_has(html, "<h2 id=\"demo-id-title\">Title &lt;with&gt; &amp; &quot;quotes&quot; and "
                       "&apos;apostrophes&apos;</h2>\n<p>lead</p>"));
  CHECK(html_has(html, "<h3 id=\"demo-id-1\">First &lt;section&gt;</h3>"));
  CHECK(html_has(html, "<h3 id=\"demo-id-2\">Second</h3>"));
  CHECK(html_has(html, "<p>a &lt; b &amp; c &gt; d, see <code>normcheck demo &lt;x&gt;</code> for -3/2</p>"));
  CHECK(html_has(html, "<pre class=\"display\">∇L = (0 + (-6)) / 4 = -3/2\nx &lt; y &amp;&amp; z</pre>"));
  CHECK(html_has(html, "<th scope=\"col\">rank</th><th scope=\"col\">Sᵣ/nᵣ</th><th scope=\"col\">a&quot;b</th>"));
  CHECK(html_has(html, "<tr><td>0</td><td>1/2</td><td>&lt;td&gt;</td></tr>"));
  CHECK(html_has(html, "<tr><td>1</td><td>1/4</td><td>&amp;amp;</td></tr>"));
  CHECK(html_has(html, "<p>an unpaired ` backtick</p>"));
  // Wide blocks scroll in their own focusable region, named after their section.
  CHECK(html_has(html, "<div class=\"scroll\" role=\"region\" tabindex=\"0\" aria-label=\"Table: Second\"><table>"));
  CHECK(html_has(html, "aria-label=\"Algebra: First &lt;section&gt;\"><pre"));
  CHECK_FALSE(html_has(html, "http"));
  CHECK_FALSE(html_has(html, "<td>\"<"));
}

TEST_CASE("inserts follow their section, and one past the last section ends the article") {
  const std::string html =
      render_html(sample(), {"d", "", {{0, "<figure>one</figure>\n"}, {7, "<figure>end</figure>\n"}}});
  const std::size_t first_end = html.find("</section>");
  CHECK(html.find("<figure>one</figure>") == first_end + std::string("</section>\n").size());
  CHECK(html.find("<figure>end</figure>\n</article>") != std::string::npos);
}
