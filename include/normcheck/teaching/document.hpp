#pragma once
/// \file teaching/document.hpp
/// What a demo prints: titled sections of prose, displayed algebra and tables, written as plain text
/// or as Markdown. Demos compute their facts first, then build a document from them.

#include <ostream>
#include <string>
#include <variant>
#include <vector>

namespace normcheck {

/// A paragraph of prose.
struct demo_paragraph {
  std::string text;
};
/// Lines shown as they are: algebra evaluated on the example.
struct demo_display {
  std::vector<std::string> lines;
};
/// A table: a header row and rows of the same width.
struct demo_table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
/// One block of a section.
using demo_block = std::variant<demo_paragraph, demo_display, demo_table>;

/// A titled part of a demo.
struct demo_section {
  std::string heading;
  std::vector<demo_block> blocks;
};

/// What a demo prints.
struct demo_document {
  std::string title;
  std::vector<demo_section> sections;
};

/// Writes a document as plain text: paragraphs wrapped to 100 columns, tables aligned.
void render_text(std::ostream& out, const demo_document& document);
/// Writes a document as Markdown (headings, paragraphs, fenced algebra, pipe tables) for notes and slides.
void render_markdown(std::ostream& out, const demo_document& document);

}  // namespace normcheck
