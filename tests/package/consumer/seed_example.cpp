// The seed example through the installed library: rank 0 holds the target 0, rank 1 the targets 2, 2, 2,
// at θ = 0 under DDP's mean. Prints the objective's gradient, the averaged local means and the compensation.

#include <normcheck/core/gradients.hpp>
#include <normcheck/version.hpp>

#include <iostream>

int main() {
  using namespace normcheck;
  const partition update = make_partition({{token{0}}, {token{2}, token{2}, token{2}}});
  std::cout << "normcheck " << version << ": global_mean " << to_string(*gradient(update, strategy::global_mean))
            << ", local_mean " << to_string(*gradient(update, strategy::local_mean)) << ", scaled_sum "
            << to_string(*gradient(update, strategy::scaled_sum)) << "\n";
}
