#pragma once
/// \file recipes/recipe_section.hpp
/// A recipe's part of a normcheck/1 document: `recipe` (the scale and reducer the code applies) and
/// `expect.recipe` (the gradient a file claims for it), read, judged and reported here.

#include "normcheck/documents/section.hpp"
#include "normcheck/recipes/recipe.hpp"

#include <optional>

namespace normcheck {

/// The handler of `recipe` and `expect.recipe`.
class recipe_section final : public section {
public:
  std::vector<std::string_view> keys() const override { return {"recipe"}; }
  std::vector<std::string_view> expect_keys() const override { return {"recipe"}; }
  void read(std::string_view key, field_reader& in) override;
  void read_expect(std::string_view key, field_reader& in) override;
  void settle(const partition_file& document, field_reader& in) override;
  bool present() const override { return normalization_.has_value(); }
  void judge(const partition_file& document, const gradient_set& gradients,
             std::vector<std::string>& failures) override;
  void print_text(std::ostream& out, const partition_file& document, const gradient_set& gradients) const override;
  void write_json(json_writer& json, const partition_file& document, const gradient_set& gradients) const override;

  /// `recipe`, as read (its reducer the file's when the recipe names none).
  const std::optional<recipe>& normalization() const noexcept { return normalization_; }
  /// `expect.recipe`: the claimed gradient (inner nullopt: claimed undefined).
  const std::optional<std::optional<rational>>& expected() const noexcept { return expected_; }
  /// The recipe's gradient on the file's partition, once judged.
  const std::optional<recipe_value>& result() const noexcept { return result_; }

private:
  std::optional<recipe> normalization_;
  bool reducer_given_ = false;
  std::uint64_t offset_ = 0;
  std::string scale_text_;          // the scale as written, parsed with the mesh's names in `settle`
  std::uint64_t scale_offset_ = 0;  // where its string begins
  std::optional<std::optional<rational>> expected_;
  std::optional<recipe_value> result_;
};

}  // namespace normcheck
