#include "exit_status.hpp"

#include "normcheck/core/errors.hpp"

#include <exception>
#include <new>
#include <ostream>

namespace normcheck::cli {

int exit_status(outcome result) noexcept {
  switch (result) {
    case outcome::holds: return exit_holds;
    case outcome::check_failed: return exit_check_failed;
    case outcome::rejected: return exit_rejected;
  }
  return exit_rejected;
}

int run_mapped(const std::function<int()>& command, std::ostream& errors) {
  try {
    return command();
  } catch (const normcheck::error& e) {
    errors << "normcheck: " << normcheck::describe(e) << "\n";
    return exit_rejected;
  } catch (const std::bad_alloc&) {
    errors << "normcheck: out of memory: the run needed more memory than it could get, so it has no verdict "
              "(the reader's limits, --max-*, bound what one document may cost)\n";
    return exit_internal_error;
  } catch (const std::exception& e) {
    errors << "normcheck: internal error: " << e.what()
           << "; this is a defect in normcheck, not a verdict on the input: please report it with the command "
              "line and the input\n";
    return exit_internal_error;
  } catch (...) {
    errors << "normcheck: internal error: an unknown exception; this is a defect in normcheck, not a verdict on "
              "the input: please report it with the command line and the input\n";
    return exit_internal_error;
  }
}

}  // namespace normcheck::cli
