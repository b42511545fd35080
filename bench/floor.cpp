// The plain floor: the least work that reads a normcheck/1 partition's token values. simdjson On-Demand
// walks the "ranks" array; each token is asked for a double first (the common case costs one number
// parse), a null is skipped, and anything else is taken as a quoted literal and read with strtod. The
// doubles are summed and counted, nothing else: no type test before a value is read, no per-rank sums,
// no gradients. normcheck is judged against this (bench/run.py); bench/baseline_simdjson.cpp is the
// checked read, which tests each value's type before reading it.
// Build: c++ -O2 -std=c++17 floor.cpp -lsimdjson -o floor        Run: floor FILE

#include <simdjson.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

namespace od = simdjson::ondemand;

struct tally {
  double sum = 0;
  unsigned long long tokens = 0;
};

// A failed step of the walk: the file is not the partition the floor expects.
struct walk_failed {
  simdjson::error_code code;
};

template <typename T>
T take(simdjson::simdjson_result<T> result) {
  T value;
  if (simdjson::error_code code = std::move(result).get(value)) throw walk_failed{code};
  return value;
}

void add_values(od::array values, tally& into) {
  for (simdjson::simdjson_result<od::value> element : values) {
    od::value token = take(std::move(element));
    double number;
    if (token.get_double().get(number) == simdjson::SUCCESS) {
      into.sum += number;
      ++into.tokens;
      continue;
    }
    if (take(token.is_null())) continue;
    // strtod needs a terminated string; the view points into simdjson's string buffer.
    const std::string literal(take(token.get_string()));
    into.sum += std::strtod(literal.c_str(), nullptr);
    ++into.tokens;
  }
}

void add_rank(od::object rank, tally& into) {
  for (simdjson::simdjson_result<od::field> member : rank) {
    od::field part = take(std::move(member));
    const std::string_view name = take(part.unescaped_key());
    if (name == "targets") {
      add_values(take(part.value().get_array()), into);
    } else if (name == "microbatches") {
      for (simdjson::simdjson_result<od::value> microbatch : take(part.value().get_array()))
        add_values(take(take(std::move(microbatch)).get_array()), into);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  simdjson::padded_string text;
  if (simdjson::error_code code = simdjson::padded_string::load(argv[1]).get(text)) {
    std::fprintf(stderr, "%s: %s\n", argv[1], simdjson::error_message(code));
    return 2;
  }
  od::parser parser;
  tally total;
  try {
    od::document document = take(parser.iterate(text));
    for (simdjson::simdjson_result<od::field> member : take(document.get_object())) {
      od::field field = take(std::move(member));
      if (take(field.unescaped_key()) != "ranks") continue;
      for (simdjson::simdjson_result<od::value> rank : take(field.value().get_array()))
        add_rank(take(take(std::move(rank)).get_object()), total);
    }
  } catch (const walk_failed& failure) {
    std::fprintf(stderr, "%s: %s\n", argv[1], simdjson::error_message(failure.code));
    return 2;
  }
  std::printf("%llu tokens, sum %.17g\n", total.tokens, total.sum);
  return 0;
}
