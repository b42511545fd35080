// A recipe is an expression over counts; its size is bounded so that no recipe, however long, can
// exhaust the stack. A flat chain of 30,000 terms crashed check and prove before the bound.

#include "normcheck/core/errors.hpp"
#include "normcheck/recipes/recipe.hpp"

#include "process.hpp"

#include <doctest/doctest.h>

#include <string>

namespace {

std::string flat_chain(std::size_t terms) {
  std::string text = "W / N";
  for (std::size_t i = 0; i < terms; ++i) text += "+0";
  return text;
}

}  // namespace

TEST_CASE("a recipe beyond the size limit is a recipe_error that names the limit") {
  try {
    (void)normcheck::recipe_expression::parse(flat_chain(30000));
    FAIL("a 30000-term recipe was accepted");
  } catch (const normcheck::error& e) {
    CHECK(e.code() == normcheck::error_code::recipe_error);
    CHECK(e.message().find(std::to_string(normcheck::recipe_max_nodes)) != std::string::npos);
  }
  CHECK_NOTHROW((void)normcheck::recipe_expression::parse(flat_chain(normcheck::recipe_max_nodes / 2 - 2)));
}

TEST_CASE("check and prove reject a 30000-term recipe without crashing") {
  hardening::temporary_directory dir;
  const std::string recipe = flat_chain(30000);
  hardening::write_text(dir / "long.json", "{\"format\": \"normcheck/1\", \"ranks\": [{\"targets\": [1]}], \"recipe\": "
                                           "{\"scale\": \"" + recipe + "\"}}");
  hardening::write_text(dir / "fine.json", "{\"format\": \"normcheck/1\", \"ranks\": [{\"targets\": [1]}]}");
  const hardening::process_result checked =
      hardening::run_process({NORMCHECK_EXECUTABLE, "check", "--json", "--output", dir / "report.json", dir.path});
  CHECK(checked.signal == 0);
  CHECK(checked.status == 2);
  CHECK(checked.out.find("\"code\": \"recipe_error\"") != std::string::npos);
  CHECK(checked.out.find("\"passed\": 1") != std::string::npos);  // the other file is still checked
  CHECK(hardening::slurp(dir / "report.json").find("recipe_error") != std::string::npos);
  const hardening::process_result proved = hardening::run_process({NORMCHECK_EXECUTABLE, "prove", "--scale", recipe});
  CHECK(proved.signal == 0);
  CHECK(proved.status == 2);
  CHECK(proved.err.find("recipe_error") != std::string::npos);
}
