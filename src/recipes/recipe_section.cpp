#include "normcheck/recipes/recipe_section.hpp"

#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/text.hpp"

namespace normcheck {

namespace {

const std::optional<rational>& objective_of(const gradient_set& gradients) { return gradients[0]; }

}  // namespace

void recipe_section::read(std::string_view, field_reader& in) {
  if (in.peek() != json_kind::object)
    in.fail_type("recipe", "an object with scale (an expression such as \"W / N\") and reducer");
  offset_ = in.value_offset();
  in.begin_object();
  recipe parsed;
  bool saw_scale = false;
  std::string_view key;
  while (in.next_member(key)) {
    if (key == "scale") {
      // Parsed once the whole file is read (`settle`): a mesh's names (N_dp, CP, …) may follow the recipe.
      scale_offset_ = in.value_offset();
      scale_text_ = std::string(in.text("recipe.scale"));
      saw_scale = true;
    } else if (key == "reducer") {
      parsed.reducer = in.named("recipe.reducer", reducer_from_name, reducer_alternatives());
      reducer_given_ = true;
    } else {
      in.fail_unknown_key(key, "in recipe (it has scale and reducer)");
    }
  }
  if (!saw_scale) in.fail(error_code::schema_error, "recipe needs a scale, e.g. \"W / N\"", offset_);
  normalization_ = std::move(parsed);
}

void recipe_section::read_expect(std::string_view, field_reader& in) {
  if (in.peek() == json_kind::null) {
    in.null_value();
    expected_.emplace(std::nullopt);
  } else {
    expected_.emplace(in.exact("the expected recipe gradient"));
  }
}

void recipe_section::settle(const partition_file& document, field_reader& in) {
  if (!normalization_) return;
  try {
    normalization_->scale = recipe_expression::parse(scale_text_, recipe_names::of_document(document.update.mesh));
  } catch (const error& e) {
    // The expression's column, counted from the string's opening quote.
    const std::uint64_t inside = e.where() ? e.where()->offset : 0;
    error located(e.code(), e.message(), in.locate(scale_offset_ + 1 + inside));
    in.mark_if_cut_off(located);  // a cut-off file never meets its expect_error
    throw located;
  }
  if (!reducer_given_) normalization_->reducer = document.update.reducer;
  if (document.update.objective != objective_kind::weighted_token_mean)
    if (const std::optional<count_variable> mass = normalization_->scale.mass_variable())
      in.fail(error_code::recipe_error,
              "the recipe uses " + std::string(variable_name(*mass)) +
                  ", a weight mass, but the objective is token_mean (set \"objective\": \"weighted_token_mean\" and "
                  "give weights)",
              offset_);
  if (document.update.objective != objective_kind::constant && normalization_->scale.uses(count_variable::C))
    in.fail(error_code::recipe_error,
            "the recipe uses C, the declared normalizer, but the objective is " +
                std::string(objective_name(document.update.objective)) +
                " (set \"objective\": \"constant\" and \"normalizer\": C)",
            offset_);
}

void recipe_section::judge(const partition_file& document, const gradient_set& gradients,
                           std::vector<std::string>& failures) {
  if (!normalization_) {
    if (expected_) failures.push_back("expect names a recipe gradient but the file has no recipe");
    return;
  }
  const recipe_value& result = result_.emplace(recipe_gradient(document.update, *normalization_));
  const std::string name = "recipe \"" + normalization_->scale.text() + "\"";
  if (expected_) {
    if (*expected_ != result.value)
      failures.push_back("expect " + name + " = " + canonical_or_undefined(*expected_) + ", but it is " +
                         canonical_or_undefined(result.value));
    return;
  }
  const std::optional<rational>& objective = objective_of(gradients);
  if (!result.value)
    failures.push_back(name + " divides by zero on this partition: " + result.zero_divisor + " is 0");
  else if (*result.value != *objective)
    failures.push_back(name + " gives " + to_string(*result.value) + ", not the objective's " + to_string(*objective));
}

void recipe_section::print_text(std::ostream& out, const partition_file&, const gradient_set& gradients) const {
  if (!result_) return;
  const recipe& r = *normalization_;
  const std::optional<rational>& value = result_->value;
  out << "      " << padded("recipe", 16)
      << padded("\"" + r.scale.text() + "\" (" + std::string(reducer_name(r.reducer)) + ")", 18) << " = ";
  if (value)
    out << padded(on_screen(value), 14) << " " << padded("≈ " + approximate(*value), 16)
        << (*value == *objective_of(gradients) ? "equals the objective" : "differs from the objective") << "\n";
  else
    out << "undefined: it divides by zero (" << result_->zero_divisor << " is 0)\n";
  if (expected_ && *expected_ == value) out << "      expect recipe = " << on_screen(*expected_) << ": holds\n";
}

void recipe_section::write_json(json_writer& json, const partition_file&, const gradient_set& gradients) const {
  if (!result_) return;
  const recipe& r = *normalization_;
  const std::optional<rational>& value = result_->value;
  json.key("recipe")
      .begin_object()
      .member("scale", r.scale.text())
      .member("reducer", reducer_name(r.reducer))
      .member("gradient", value)
      .key("zero_divisor");
  if (value) json.null();
  else json.string(result_->zero_divisor);
  json.member("equals_objective", value && *value == *objective_of(gradients));
  if (expected_) json.member("expected", *expected_);
  json.end_object();
}

}  // namespace normcheck
