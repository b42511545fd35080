#include "normcheck/teaching/html.hpp"

#include "normcheck/io/markup.hpp"

#include <variant>

namespace normcheck {

namespace {

// Paragraph text: `code` spans become <code>; a backtick without its partner stays as it is.
std::string inline_html(std::string_view text) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t open = text.find('`', i);
    const std::size_t close = open == std::string_view::npos ? open : text.find('`', open + 1);
    if (close == std::string_view::npos) {
      out += xml_escape(text.substr(i));
      break;
    }
    out += xml_escape(text.substr(i, open - i));
    out += "<code>" + xml_escape(text.substr(open + 1, close - open - 1)) + "</code>";
    i = close + 1;
  }
  return out;
}

std::string scroll_region(std::string_view label, const std::string& inner) {
  return "<div class=\"scroll\" role=\"region\" tabindex=\"0\" aria-label=\"" + xml_escape(label) + "\">" + inner +
         "</div>\n";
}

std::string table_html(const demo_table& table) {
  std::string out = "<table>\n<thead><tr>";
  for (const std::string& cell : table.header) out += "<th scope=\"col\">" + xml_escape(cell) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const std::vector<std::string>& row : table.rows) {
    out += "<tr>";
    for (const std::string& cell : row) out += "<td>" + xml_escape(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>";
}

std::string display_html(const demo_display& display) {
  std::string out = "<pre class=\"display\">";
  for (std::size_t i = 0; i < display.lines.size(); ++i) out += (i ? "\n" : "") + xml_escape(display.lines[i]);
  return out + "</pre>";
}

}  // namespace

std::string render_html(const demo_document& document, const html_document_options& options) {
  const std::string id = xml_escape(options.id);
  std::string out = "<article id=\"" + id + "\" class=\"demo\" aria-labelledby=\"" + id + "-title\">\n";
  out += "<h2 id=\"" + id + "-title\">" + xml_escape(document.title) + "</h2>\n";
  out += options.lead_html;
  for (std::size_t s = 0; s < document.sections.size(); ++s) {
    const demo_section& section = document.sections[s];
    const std::string heading_id = id + "-" + std::to_string(s + 1);
    out += "<section aria-labelledby=\"" + heading_id + "\">\n<h3 id=\"" + heading_id + "\">" +
           xml_escape(section.heading) + "</h3>\n";
    for (const demo_block& block : section.blocks) {
      if (const auto* p = std::get_if<demo_paragraph>(&block)) {
        out += "<p>" + inline_html(p->text) + "</p>\n";
      } else if (const auto* d = std::get_if<demo_display>(&block)) {
        out += scroll_region("Algebra: " + section.heading, display_html(*d));
      } else if (const auto* t = std::get_if<demo_table>(&block)) {
        out += scroll_region("Table: " + section.heading, table_html(*t));
      }
    }
    out += "</section>\n";
    for (const html_insert& insert : options.inserts)
      if (insert.after_section == s) out += insert.html;
  }
  for (const html_insert& insert : options.inserts)
    if (insert.after_section >= document.sections.size()) out += insert.html;
  return out + "</article>\n";
}

}  // namespace normcheck
