#include "normcheck/check/names_report.hpp"

#include "normcheck/core/dtype.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/gate/gate.hpp"
#include "normcheck/gate/mistakes.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/text.hpp"
#include "normcheck/recipes/recipe.hpp"

#include <algorithm>

namespace normcheck {

namespace {

std::vector<std::string> names_listed(const std::vector<std::string_view>& spellings) {
  return {spellings.begin(), spellings.end()};
}

// The counts every recipe may read (`prove --scale`, a file's `recipe`).
std::vector<std::string> recipe_counts() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < update_variables; ++i) names.emplace_back(variable_name(all_count_variables[i]));
  return names;
}

// The names `spelling` gives beyond every update's, for an example mesh or term: "DP, CP, TP, N_dp, N_cp".
std::string names_beyond_the_update(const recipe_names& names) {
  const std::vector<std::string> every_update = recipe_counts();
  std::vector<std::string> beyond;
  for (count_variable v : all_count_variables) {
    const std::string spelled = names.spelling(v);
    if (!spelled.empty() && std::find(every_update.begin(), every_update.end(), spelled) == every_update.end())
      beyond.push_back(spelled);
  }
  return join(beyond);
}

// The dtypes that round: every one but exact arithmetic.
std::vector<std::string> rounding_dtypes() {
  std::vector<std::string> names;
  for (const std::string_view name : dtype_spellings())
    if (unit_roundoff(*dtype_from_name(name)) != 0) names.emplace_back(name);
  return names;
}

}  // namespace

std::vector<name_list> name_lists() {
  diagnosis_names gate = gate_names();
  return {
      {"objectives", "what a step claims to compute", names_listed(objective_spellings())},
      {"reducers", "how the ranks' gradients are combined", names_listed(reducer_spellings())},
      {"dtypes", "what a document's numbers were computed in", names_listed(dtype_spellings())},
      {"float_dtypes", "the dtypes that round", rounding_dtypes()},
      {"verdicts", "the gate's conclusions", names_listed(verdict_spellings())},
      {"normalizations", "the normalizations the gate names, from the strategy table",
       names_listed(gate.normalizations)},
      {"other_names", "what else the gate names", names_listed(gate.others)},
      {"factors", "factors on top of a computation", std::move(gate.factors)},
      {"recipe_counts", "the counts a recipe reads", recipe_counts()},
  };
}

std::string names_json() {
  std::string out;
  json_writer json(out);
  json.begin_object(json_layout::lines).member("format", names_format);
  for (const name_list& list : name_lists()) json.member(list.kind, list.names);
  json.end_object();
  return out + "\n";
}

std::string names_text() {
  std::string out;
  for (const name_list& list : name_lists())
    out += std::string(list.kind) + " (" + std::string(list.what) + "): " + join(list.names) + "\n";
  out +=
      "A diagnosis is a normalization or another name, or another loss's count (\"count_of(mtp)\"); "
      "\"objective\" followed by a factor; a normalization followed by a factor, or by another objective in "
      "parentheses; any of these after a site's name and \": \", or after \"term \", an auxiliary term's name "
      "and \": \". A factor is also the size of mesh dimensions or their product (\"/cp\", \"×(dp·tp)\") or a "
      "plain number (\"×4\", \"/3\").\n";
  const recipe_names mesh(recipe_names::parse_mesh("dp:data,cp:sequence,tp:replica"), "");
  const recipe_names term({}, "mtp");
  out += "A recipe on a mesh (prove --mesh dp:data,cp:sequence,tp:replica) also reads " +
         names_beyond_the_update(mesh) +
         ": each dimension's size, its name in capitals, and N_ and a data or sequence dimension's name, the rank's "
         "count reduced over that dimension only; beside a term (prove --term mtp), the term's own counts " +
         names_beyond_the_update(term) + " (N, n_r and n_m are then the main loss's).\n";
  return out;
}

}  // namespace normcheck
