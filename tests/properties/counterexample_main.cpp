// Runs the law "compensation" against one planted wrong normalization and prints the shrunk
// counterexample: the failure report and the RC_PARAMS line that replays it on standard error, the
// first failing normcheck/1 document on standard output (with --documented, the same tokens with the
// true values as `expect`, a file that holds and keeps the mistake on record).
//
//   normcheck_counterexample NORMALIZATION [--documented] > counterexample.json
//
// Exit status: 0 a counterexample was printed, 1 the law held, 2 misuse.

#include "laws.hpp"

#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <iostream>
#include <string>

using namespace normcheck;
using namespace normcheck::properties;

namespace {

int usage() {
  std::cerr << "usage: normcheck_counterexample NORMALIZATION [--documented]\nplanted normalizations:";
  for (const normalization_under_test& n : planted_wrong_normalizations()) std::cerr << " \"" << n.name << "\"";
  std::cerr << "\n";
  return 2;
}

// The failing claim's tokens with the values the library computes, and a description that says what is wrong.
std::string documented(const normalization_under_test& n, const claim& failing) {
  const partition update = to_partition(failing.tokens);
  document_options options;
  std::string wrong;
  const std::optional<rational> objective = gradient(update, strategy::global_mean);
  for (const expectation& e : failing.expect) {
    const std::optional<rational> actual = gradient(update, e.name);
    options.expect.push_back({e.name, actual});
    if (actual != e.value)
      wrong += std::string(wrong.empty() ? "" : "; ") + std::string(strategy_name(e.name)) + " is " + show(actual);
  }
  if (std::none_of(options.expect.begin(), options.expect.end(),
                   [](const expectation& e) { return e.name == strategy::global_mean; }))
    options.expect.push_back({strategy::global_mean, objective});
  options.description = "Counterexample the law \"compensation\" found for the planted normalization \"" +
                        n.describe() + "\" under the " + std::string(reducer_name(failing.tokens.reducer)) +
                        " reducer: " + wrong + " where the objective global_mean is " + show(objective) +
                        ". The expected values are the true ones, so this file holds and keeps the mistake on record.";
  return write_document(failing.tokens, options);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) return usage();
  const bool with_true_values = argc == 3 && std::string(argv[2]) == "--documented";
  if (argc == 3 && !with_true_values) return usage();
  const std::optional<normalization_under_test> n = normalization_named(argv[1]);
  if (!n) return usage();

  const std::string name = "compensation for " + n->name;
  const rc::detail::TestResult result = run_law(name, compensation(*n));
  rc::detail::FailureResult failure;
  if (!result.match(failure)) {
    std::cerr << "the law \"" << name << "\" held: no counterexample\n";
    return 1;
  }
  const counterexample& found = last_counterexample();
  std::cerr << failure.description << "\nTo reproduce: " << reproduce_params(name, failure) << "\n";
  std::cout << (with_true_values ? documented(*n, found.failing_claims.front()) : found.failing_documents.front());
  return 0;
}
