#pragma once
/// \file teaching/html.hpp
/// HTML for the teaching page: a demo document as an HTML fragment, every text escaped by io/markup.

#include "normcheck/teaching/demo.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// HTML placed after one section of a document, such as a figure.
struct html_insert {
  std::size_t after_section = 0;  ///< index of the section it follows; past the last: at the end
  std::string html;
};

/// How a document becomes an HTML fragment.
struct html_document_options {
  std::string id;                    ///< the article's id; section headings get "<id>-1", "<id>-2", …
  std::string lead_html;             ///< HTML right after the title, before the first section
  std::vector<html_insert> inserts;  ///< HTML after given sections
};

/// A demo document as an <article>: the title as <h2>, each section as a <section> with an <h3>,
/// paragraphs as <p> (`code` spans as <code>), displays as <pre>, tables with column header cells.
/// Tables and displays sit in a focusable region that scrolls on its own, so the page never does.
std::string render_html(const demo_document& document, const html_document_options& options);

}  // namespace normcheck
