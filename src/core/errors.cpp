#include "normcheck/core/errors.hpp"

#include "normcheck/core/names.hpp"
#include "normcheck/core/utf8.hpp"

namespace normcheck {

namespace {
constexpr name_table code_names{std::array<std::pair<error_code, std::string_view>, 10>{{
    {error_code::parse_error, "parse_error"},
    {error_code::schema_error, "schema_error"},
    {error_code::bad_number, "bad_number"},
    {error_code::number_out_of_range, "number_out_of_range"},
    {error_code::world_size_mismatch, "world_size_mismatch"},
    {error_code::no_valid_tokens, "no_valid_tokens"},
    {error_code::limit_exceeded, "limit_exceeded"},
    {error_code::recipe_error, "recipe_error"},
    {error_code::io_error, "io_error"},
    {error_code::usage_error, "usage_error"},
}}};
}  // namespace

std::string_view code_name(error_code code) noexcept { return code_names.name(code); }

std::optional<error_code> code_from_name(std::string_view name) noexcept { return code_names.find(name); }

error::error(error_code code, std::string message, std::optional<location> where)
    : std::runtime_error(message), code_(code), message_(std::move(message)), where_(std::move(where)) {}

error& error::mark_cut_off_later() {
  if (!truncated_)
    message_ += "; besides, the document is cut off (it ends with a bracket or string still open), so it can "
                "never pass";
  truncated_ = true;
  return *this;
}

void error::locate(location where) {
  if (!where_) where_ = std::move(where);
}

std::string describe(const error& e) {
  std::string out;
  if (const auto& w = e.where()) {
    out += escaped_name(w->file);
    if (w->line > 0) out += ":" + std::to_string(w->line) + ":" + std::to_string(w->column);
    out += ": ";
  }
  out += code_name(e.code());
  out += ": ";
  out += e.message();
  return out;
}

}  // namespace normcheck
