#include "normcheck/check/junit_report.hpp"

#include "normcheck/check/text_report.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/io/markup.hpp"

#include <sstream>

namespace normcheck {

namespace {

// One line that names what went wrong, for the failure message attribute.
std::string failure_message(const file_report& report) {
  if (report.rejection && report.status != file_status::pass) return describe(*report.rejection);
  if (report.document)
    for (const std::shared_ptr<section>& part : report.document->sections)
      if (std::optional<std::string> summary = part->failure_summary()) return *summary;
  return report.failures.empty() ? std::string("failed") : report.failures.front();
}

}  // namespace

std::string junit_report(const std::vector<file_report>& reports) {
  const run_summary summary = summarize(reports);
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"normcheck\" tests=\"" << reports.size()
      << "\" failures=\"" << summary.failed << "\" errors=\"" << summary.errors << "\">\n"
      << "  <testsuite name=\"normcheck check\" tests=\"" << reports.size() << "\" failures=\"" << summary.failed
      << "\" errors=\"" << summary.errors << "\" skipped=\"0\">\n";
  for (const file_report& report : reports) {
    out << "    <testcase classname=\"normcheck." << xml_escape(document_kind_name(report.kind)) << "\" name=\""
        << xml_escape(escaped_name(report.file)) << "\"";
    if (report.status == file_status::pass) {
      out << "/>\n";
      continue;
    }
    std::ostringstream text;
    print_text(text, report);
    const char* element = report.status == file_status::error ? "error" : "failure";
    out << ">\n      <" << element << " message=\"" << xml_escape(failure_message(report)) << "\" type=\""
        << (report.rejection ? code_name(report.rejection->code()) : std::string_view("check_failed")) << "\">"
        << xml_escape(text.str()) << "</" << element << ">\n    </testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
  return out.str();
}

}  // namespace normcheck
