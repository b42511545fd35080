// The executable's one mapping from how a command ends to its exit status: a defect in normcheck (any
// exception that is not a normcheck::error) is never reported as rejected input.

#include "exit_status.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/rational.hpp"

#include <doctest/doctest.h>

#include <new>
#include <sstream>
#include <stdexcept>

using normcheck::cli::run_mapped;

TEST_CASE("an outcome passes through with its own status") {
  std::ostringstream errors;
  CHECK(run_mapped([] { return normcheck::cli::exit_status(normcheck::cli::outcome::holds); }, errors) == 0);
  CHECK(run_mapped([] { return normcheck::cli::exit_status(normcheck::cli::outcome::check_failed); }, errors) == 1);
  CHECK(run_mapped([] { return normcheck::cli::exit_status(normcheck::cli::outcome::rejected); }, errors) == 2);
  CHECK(errors.str().empty());
}

TEST_CASE("a normcheck error is rejected input: exit 2 and its description") {
  std::ostringstream errors;
  const int status = run_mapped(
      []() -> int { throw normcheck::error(normcheck::error_code::bad_number, "number 'x' is not a number"); },
      errors);
  CHECK(status == 2);
  CHECK(errors.str() == "normcheck: bad_number: number 'x' is not a number\n");
}

TEST_CASE("any other exception is an internal error: exit 3, said so, never exit 2") {
  SUBCASE("Boost's division by zero") {
    std::ostringstream errors;
    const int status = run_mapped(
        []() -> int {
          const normcheck::rational zero = 0;
          const normcheck::rational one = 1;
          normcheck::rational quotient = one / zero;  // Boost throws std::overflow_error
          return quotient == 0 ? 0 : 1;
        },
        errors);
    CHECK(status == normcheck::cli::exit_internal_error);
    CHECK(status == 3);
    CHECK(errors.str().rfind("normcheck: internal error: ", 0) == 0);
    CHECK(errors.str().find("please report") != std::string::npos);
  }
  SUBCASE("a logic error") {
    std::ostringstream errors;
    CHECK(run_mapped([]() -> int { throw std::logic_error("an invariant broke"); }, errors) == 3);
    CHECK(errors.str().find("internal error: an invariant broke") != std::string::npos);
  }
  SUBCASE("something that is not a std::exception") {
    std::ostringstream errors;
    CHECK(run_mapped([]() -> int { throw 42; }, errors) == 3);
    CHECK(errors.str().find("internal error") != std::string::npos);
  }
  SUBCASE("exhausted memory") {
    std::ostringstream errors;
    CHECK(run_mapped([]() -> int { throw std::bad_alloc(); }, errors) == 3);
    CHECK(errors.str().find("out of memory") != std::string::npos);
  }
}
