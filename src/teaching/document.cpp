#include "normcheck/teaching/document.hpp"

#include "normcheck/io/text.hpp"

namespace normcheck {

namespace {

constexpr std::size_t wrap_columns = 100;

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
    const std::size_t width = display_width(word);
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
      widths[c] = std::max(widths[c], display_width(row[c]));
  };
  widen(table.header);
  for (const auto& row : table.rows) widen(row);
  return widths;
}

void write_text_row(std::ostream& out, const std::vector<std::string>& row, const std::vector<std::size_t>& widths) {
  std::string line = "  ";
  for (std::size_t c = 0; c < widths.size(); ++c) {
    const std::string cell = c < row.size() ? row[c] : std::string();
    line += c + 1 < widths.size() ? padded(cell, widths[c] + 2) : cell;
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
  out << document.title << "\n" << std::string(display_width(document.title), '=') << "\n";
  for (const demo_section& section : document.sections) {
    out << "\n" << section.heading << "\n" << std::string(display_width(section.heading), '-') << "\n";
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

}  // namespace normcheck
