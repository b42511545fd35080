// The checked read of a partition file, an inexact baseline: simdjson On-Demand parses the document
// and asks each token value's type (string or number) before reading it, skipping nulls, and sums the
// values as doubles (hexadecimal float strings through strtod). It computes what the Fraction peer and
// normcheck compute, per rank Sᵣ = Σ(θ − y) and nᵣ, and the three gradients, rounded at every step.
// The type test before every read makes it slower than the plain floor (floor.cpp), which reads each
// value as a double first; normcheck's speed targets are stated against the floor.
// Build: c++ -O2 -std=c++17 baseline_simdjson.cpp -lsimdjson

#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct rank_sums {
  double derivative_sum = 0;  // Σ(θ − y)
  unsigned long long valid = 0;
};

double value_of(simdjson::ondemand::value v) {
  if (v.type() == simdjson::ondemand::json_type::string) {
    std::string text(std::string_view(v.get_string()));
    return std::strtod(text.c_str(), nullptr);
  }
  return double(v.get_double());
}

void add_tokens(simdjson::ondemand::array tokens, double theta, rank_sums& sums) {
  for (simdjson::ondemand::value v : tokens) {
    if (v.is_null()) continue;
    sums.derivative_sum += theta - value_of(v);
    ++sums.valid;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  try {
    simdjson::padded_string json = simdjson::padded_string::load(argv[1]);
    simdjson::ondemand::parser parser;
    simdjson::ondemand::document doc = parser.iterate(json);
    double theta = 0;
    std::vector<rank_sums> ranks;
    for (simdjson::ondemand::field member : doc.get_object()) {
      std::string_view key = member.unescaped_key();
      if (key == "theta") {
        theta = value_of(member.value());
      } else if (key == "ranks") {
        for (simdjson::ondemand::object rank : member.value().get_array()) {
          rank_sums sums;
          for (simdjson::ondemand::field part : rank) {
            std::string_view name = part.unescaped_key();
            if (name == "targets") {
              add_tokens(part.value().get_array(), theta, sums);
            } else if (name == "microbatches") {
              for (simdjson::ondemand::array microbatch : part.value().get_array()) add_tokens(microbatch, theta, sums);
            }
          }
          ranks.push_back(sums);
        }
      }
    }
    const double world = double(ranks.size());
    double total = 0, local_mean = 0;
    unsigned long long valid = 0;
    for (const rank_sums& r : ranks) {
      total += r.derivative_sum;
      valid += r.valid;
      local_mean += r.valid ? r.derivative_sum / double(r.valid) : 0.0;
    }
    const double global_mean = total / double(valid);
    double scaled_sum = 0;
    for (const rank_sums& r : ranks) scaled_sum += world * r.derivative_sum / double(valid);
    std::printf("ranks %zu, N %llu\nglobal_mean %.17g\nlocal_mean %.17g\nscaled_sum %.17g\n", ranks.size(), valid,
                global_mean, local_mean / world, scaled_sum / world);
  } catch (const simdjson::simdjson_error& e) {
    std::fprintf(stderr, "simdjson: %s\n", e.what());
    return 2;
  }
  return 0;
}
