#pragma once
/// \file check/names_report.hpp
/// `normcheck names`: every name normcheck reads or gives, listed from the tables that define them (the
/// objectives, reducers, dtypes and verdicts; the normalizations, other names and factors the gate's
/// diagnoses are made of), so that a front end that spells them, such as the Python package, is held to them.

#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The version of the listing's layout, its first member.
inline constexpr std::string_view names_format = "normcheck-names/1";

/// One kind of name: its key in the listing, what it names, and its spellings in the core's order.
struct name_list {
  std::string_view kind;
  std::string_view what;
  std::vector<std::string> names;
};

/// Every kind, in the listing's order.
std::vector<name_list> name_lists();

/// `{"format": "normcheck-names/1", "objectives": [...], ..., "factors": [...]}`.
std::string names_json();

/// The lists for a screen: one line per kind, then how the gate composes a diagnosis's name.
std::string names_text();

}  // namespace normcheck
