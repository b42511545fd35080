#include "normcheck/io/text.hpp"

namespace normcheck {

std::size_t display_width(std::string_view text) noexcept {
  std::size_t width = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++width;
  return width;
}

std::string padded(std::string_view text, std::size_t width) {
  std::string out(text);
  const std::size_t have = display_width(text);
  if (have < width) out.append(width - have, ' ');
  return out;
}

std::string on_screen(const rational& value) { return shorten(to_string(value)); }

std::string on_screen(const std::optional<rational>& value) { return value ? on_screen(*value) : "undefined"; }

std::string canonical_or_undefined(const std::optional<rational>& value) {
  return value ? to_string(*value) : std::string("undefined");
}

std::string or_dash(const std::string& text) { return text.empty() ? "—" : text; }

std::string join(const std::vector<std::string>& items, std::string_view none) {
  if (items.empty()) return std::string(none);
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string join_ranks(const std::vector<std::uint64_t>& ranks) {
  std::string out;
  for (std::uint64_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string ranks_phrase(const std::vector<std::uint64_t>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(ranks);
}

}  // namespace normcheck
