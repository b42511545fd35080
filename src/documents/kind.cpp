#include "normcheck/documents/kind.hpp"

#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/documents/scenario.hpp"

namespace normcheck {

namespace {

// Reads the top-level members that precede any problem and hands each key to `visit`, which reads its
// value and returns true to stop. Never throws.
template <typename Visit>
void scan_members(std::string_view text, const reader_limits& limits, Visit visit) {
  try {
    json_reader json(text, "", limits);
    if (json.peek() != json_kind::object) return;
    json.begin_object();
    std::string_view key;
    while (json.next_member(key)) {
      if (visit(key, json)) return;
      json.skip_value();
    }
  } catch (const error&) {
  }
}

// Whether the first non-blank line of `text` is a JSON object with "op" and "rank": one collective call.
bool looks_like_trace(std::string_view text, const reader_limits& limits) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    bool op = false;
    bool rank = false;
    scan_members(line, limits, [&](std::string_view key, json_reader&) {
      op = op || key == "op";
      rank = rank || key == "rank";
      return false;
    });
    return op && rank;
  }
  return false;
}

}  // namespace

std::string_view document_kind_name(document_kind kind) noexcept {
  switch (kind) {
    case document_kind::partition: return "partition";
    case document_kind::scenario: return "scenario";
    case document_kind::trace: return "trace";
    case document_kind::unknown: break;
  }
  return "unknown";
}

std::string_view kind_description(document_kind kind) noexcept {
  switch (kind) {
    case document_kind::partition: return "a normcheck/1 partition file";
    case document_kind::scenario: return "a normcheck-scenario/1 scenario file";
    case document_kind::trace: return "a collective-call trace (JSON lines)";
    case document_kind::unknown: break;
  }
  return "not a document normcheck reads";
}

std::string_view kind_command(document_kind kind) noexcept {
  switch (kind) {
    case document_kind::partition: return "check";
    case document_kind::scenario: return "simulate";
    case document_kind::trace: return "collectives";
    case document_kind::unknown: break;
  }
  return "";
}

std::optional<std::string> declared_format(std::string_view text, const reader_limits& limits) {
  std::optional<std::string> format;
  scan_members(text, limits, [&](std::string_view key, json_reader& json) {
    if (key != "format") return false;
    if (json.peek() == json_kind::string) format = std::string(json.string_value());
    return true;
  });
  return format;
}

document_kind identify(std::string_view text, const reader_limits& limits) {
  if (const std::optional<std::string> format = declared_format(text, limits)) {
    if (*format == format_name) return document_kind::partition;
    if (*format == scenario_format_name) return document_kind::scenario;
    return document_kind::unknown;
  }
  return looks_like_trace(text, limits) ? document_kind::trace : document_kind::unknown;
}

error wrong_kind(document_kind kind, std::string_view command, const std::string& source) {
  location where;
  where.file = source;
  return error(error_code::usage_error,
               "is " + std::string(kind_description(kind)) + ": `normcheck " + std::string(kind_command(kind)) +
                   "` takes it, not `normcheck " + std::string(command) + "`",
               where);
}

void require_kind(std::string_view text, document_kind wanted, std::string_view command, const std::string& source,
                  const reader_limits& limits) {
  const document_kind kind = identify(text, limits);
  if (kind != wanted && kind != document_kind::unknown) throw wrong_kind(kind, command, source);
}

std::optional<error_code> find_expected_error(std::string_view text, const reader_limits& limits) {
  std::optional<error_code> code;
  scan_members(text, limits, [&](std::string_view key, json_reader& json) {
    if (key != "expect_error" || json.peek() != json_kind::string) return false;
    code = code_from_name(json.string_value());
    return true;
  });
  return code;
}

}  // namespace normcheck
