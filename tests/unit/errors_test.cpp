// The error type: its code, its message, and what() kept in step with the message.

#include "normcheck/core/errors.hpp"

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

TEST_CASE("an error's what() follows its message after mark_cut_off_later") {
  normcheck::error e(normcheck::error_code::schema_error, "unknown key \"x\"");
  e.mark_cut_off_later();
  CHECK(std::string(e.what()) == e.message());
  CHECK(std::string(e.what()).find("cut off") != std::string::npos);
  const std::runtime_error& base = e;
  CHECK(std::string(base.what()) == e.message());
}
