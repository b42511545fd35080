#include "fit_law.hpp"

#include "generators.hpp"
#include "grouped_generators.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/gate/gate_section.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace normcheck::properties {

namespace {

fit_counterexample last_fit;

const std::string times = "\xC3\x97";  // ×
const std::string dot = "\xC2\xB7";    // ·

// The exact value of a float, through its %a text (float.hex()) and the library's one door.
rational exact_of(float value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a", static_cast<double>(value));
  return read_number(buffer, literal_form::json_string);
}

float as_float(const rational& value) { return static_cast<float>(value.convert_to<double>()); }

std::size_t common_accumulation(const grouped_update& update) {
  const std::size_t g = update.ranks.front().size();
  for (const grouped_rank& rank : update.ranks)
    if (rank.size() != g) return 0;
  return g;
}

// The witness's derivative sum of a group: n·θ − n(n+1)/2 (its j-th valid token has the value j).
rational witness_sum(const group_tokens& g, const rational& theta) {
  const rational n{g.valid_tokens()};
  rational sum = n * theta - n * (n + 1) / 2;
  return sum;
}

// The groups a measurement sees: a derivative sum other than 0, or the witness's.
std::vector<bool> measured_groups(const grouped_update& update, bool witness) {
  const std::vector<rational> sums = oracle::derivative_sums(update);
  std::vector<bool> seen;
  std::size_t k = 0;
  for (const group_place& place : group_places(update)) {
    const group_tokens& g = group_at(update, place);
    seen.push_back(sums[k] != 0 || (witness && g.valid_tokens() > 0 && witness_sum(g, update.theta) != 0));
    ++k;
  }
  return seen;
}

bool equal_where_seen(const oracle::table& a, const oracle::table& b, const std::vector<bool>& seen) {
  if (a.size() != b.size()) return false;
  for (std::size_t g = 0; g < a.size(); ++g)
    if (seen[g] && a[g] != b[g]) return false;
  return true;
}

// ---- updates --------------------------------------------------------------------------------------------

// A group as a probe dumps it (every valid token has the value 1, written compactly) or as token arrays of
// values k/8.
group_tokens fit_group(bool probe, bool may_be_empty) {
  const std::uint64_t least = may_be_empty ? 0 : 1;
  const std::uint64_t count = *rc::gen::inRange<std::uint64_t>(least, 5);
  const std::uint64_t padding = *weighted<std::uint64_t>({{2, rc::gen::just(std::uint64_t{0})},
                                                          {1, rc::gen::inRange<std::uint64_t>(1, 4)}});
  if (probe) return compact_group(count, rational(1), padding);
  group_tokens g;
  for (std::uint64_t i = 0; i < count; ++i) {
    const int k = *rc::gen::inRange(-16, 17);
    g.positions.emplace_back(rational(k) / 8);
  }
  for (std::uint64_t i = 0; i < padding; ++i)
    g.positions.insert(g.positions.begin() + static_cast<std::ptrdiff_t>(*uniform_index(g.positions.size() + 1)),
                       token());
  return g;
}

rc::Gen<grouped_update> fit_updates() {
  return rc::gen::exec([] {
    grouped_update update;
    update.objective = *weighted<objective_kind>({{2, rc::gen::just(objective_kind::token_mean)},
                                                  {1, rc::gen::just(objective_kind::sequence_mean)},
                                                  {1, rc::gen::just(objective_kind::sequence_sum_mean)},
                                                  {1, rc::gen::just(objective_kind::constant)}});
    const bool probe = *uniform_index(4) != 0;
    update.theta = probe ? rational(0) : *rc::gen::element(rational(0), rational(1) / 2, rational(-1), rational(3) / 4);
    update.reducer =
        *weighted<reducer_kind>({{3, rc::gen::just(reducer_kind::mean)}, {1, rc::gen::just(reducer_kind::sum)}});
    if (update.objective == objective_kind::constant) update.normalizer = rational(1 + *uniform_index(64));
    const std::size_t world = 1 + *rc::gen::inRange<std::size_t>(0, 4);
    const std::size_t common = 1 + *rc::gen::inRange<std::size_t>(0, 4);
    const bool uneven = *uniform_index(5) == 0;
    const bool sequences = sequence_objective(update.objective) || *rc::gen::arbitrary<bool>();
    for (std::size_t r = 0; r < world; ++r) {
      grouped_rank rank;
      const std::size_t count = uneven ? 1 + *uniform_index(4) : common;
      for (std::size_t m = 0; m < count; ++m) {
        const bool empty = *uniform_index(6) == 0;
        if (empty && (!sequences || *rc::gen::arbitrary<bool>())) {
          rank.push_back(probe ? microbatch_tokens{false, {compact_group(0, rational(1), *uniform_index(3))}}
                               : plain_microbatch(std::vector<token>(*uniform_index(3))));
          continue;
        }
        microbatch_tokens mb;
        mb.sequences = sequences && (sequence_objective(update.objective) || *uniform_index(4) != 0);
        const std::size_t groups = mb.sequences ? 1 + *uniform_index(3) : 1;
        for (std::size_t g = 0; g < groups; ++g) mb.groups.push_back(fit_group(probe, empty || g > 0));
        rank.push_back(std::move(mb));
      }
      update.ranks.push_back(std::move(rank));
    }
    // At least one valid token: the first microbatch's first group gets one when none has any.
    if (oracle::valid_tokens(update) == 0) {
      microbatch_tokens& first = update.ranks.front().front();
      if (sequence_objective(update.objective)) first.sequences = true;
      first.groups.front() = probe ? compact_group(1, rational(1)) : group_tokens{{token(rational(1))}, false, {}};
    }
    return update;
  });
}

// ---- planted formulas ----------------------------------------------------------------------------------

// The name the gate gives a normalization of the table written in `units`' counts.
std::string base_name(const grouped_update& update, std::string_view name, objective_kind units) {
  const bool correct = name == "global_mean" || name == strategy_name(correct_for(update.reducer));
  if (units == update.objective) {
    if (correct) return "objective";
    if (name == "local_sum" && units == objective_kind::sequence_mean) return "sum_of_sequence_means";
    return std::string(name);
  }
  if (correct) return std::string(objective_name(units));
  if (name == "local_sum" && units == objective_kind::sequence_mean) return "sum_of_sequence_means";
  return std::string(name) + "(" + std::string(objective_name(units)) + ")";
}

struct base_choice {
  std::string name;
  std::string normalization;
  objective_kind units;
  oracle::table weights;
};

// What docs/gate.md says the gate knows, where it is defined: every normalization of the table (the report's
// and the diagnosed ones) in the declared objective's counts, and the report's in the counts of every other
// objective the update can be counted in.
std::vector<base_choice> bases_of(const grouped_update& update) {
  std::vector<base_choice> bases;
  for (objective_kind units : {objective_kind::token_mean, objective_kind::sequence_mean,
                               objective_kind::sequence_sum_mean, objective_kind::constant}) {
    if (!oracle::countable(update, units)) continue;
    for (const auto* names : {&oracle::report_names(), &oracle::diagnosed_names()})
      for (std::string_view n : *names) {
        if (names != &oracle::report_names() && units != update.objective) continue;
        if (std::optional<oracle::table> t = oracle::normalization_table(update, n, units))
          bases.push_back({base_name(update, n, units), std::string(n), units, std::move(*t)});
      }
  }
  return bases;
}

oracle::table scaled(const oracle::table& weights, const rational& factor) {
  oracle::table out;
  for (const rational& w : weights) {
    rational s = w * factor;
    out.push_back(std::move(s));
  }
  return out;
}

rc::Gen<planted_formula> planted_formulas(const grouped_update& update) {
  return rc::gen::exec([update] {
    const std::vector<base_choice> bases = bases_of(update);
    const std::size_t groups = group_places(update).size();
    const std::size_t w = update.world_size();
    const std::size_t g = common_accumulation(update);
    // The gate reads the ratio a off two adjacent microbatches whose first groups it measures, on the first
    // rank of three or more microbatches; a rank with an empty microbatch between two others leaves it
    // nothing to read (a limit of the fitter, not planted here).
    const std::vector<rational> sums = oracle::derivative_sums(update);
    std::vector<bool> first_measured;  // per microbatch of the first long rank
    std::optional<std::size_t> long_rank;
    for (std::size_t r = 0; r < update.ranks.size() && !long_rank; ++r)
      if (update.ranks[r].size() >= 3) long_rank = r;
    {
      std::size_t k = 0;
      for (const group_place& place : group_places(update)) {
        if (long_rank && place.rank == *long_rank && place.group == 0) first_measured.push_back(sums[k] != 0);
        ++k;
      }
    }
    bool adjacent = false;
    for (std::size_t i = 1; i < first_measured.size(); ++i)
      adjacent = adjacent || (first_measured[i] && first_measured[i - 1]);
    const bool geometric_possible = long_rank && adjacent;
    planted_formula f;
    f.rescales.assign(groups, 0);
    if (geometric_possible && *uniform_index(6) == 0) {
      // The accumulated buffer rescaled by a after every microbatch, on top of the objective or microbatch_mean.
      const bool on_microbatch_mean = *rc::gen::arbitrary<bool>();
      std::optional<oracle::table> base =
          on_microbatch_mean ? oracle::normalization_table(update, "microbatch_mean", update.objective) : std::nullopt;
      const std::string base_words = base ? "microbatch_mean" : "the objective";
      if (!base) base = oracle::objective_table(update);
      const rational a = *rc::gen::element(rational(1) / 2, rational(2), rational(3) / 4, rational(3) / 2,
                                           rational(5) / 4, rational(5) / 8);
      f.name = "geometric";
      f.rescale = a;
      f.delivered = *base;
      std::size_t k = 0;
      for (const group_place& place : group_places(update)) {
        f.rescales[k] = update.ranks[place.rank].size() - 1 - place.microbatch;
        for (std::uint64_t i = 0; i < f.rescales[k]; ++i) f.delivered[k] *= a;
        ++k;
      }
      f.description =
          base_words + " with the accumulated buffer rescaled by " + to_string(a) + " after every microbatch";
      return f;
    }
    const base_choice& base = bases[*uniform_index(bases.size())];
    f.delivered = base.weights;
    f.description = base.normalization + " in " + std::string(objective_name(base.units)) + "'s counts";
    const bool declared = base.units == update.objective;
    const bool correct_base = declared && (base.normalization == "global_mean" ||
                                           base.normalization == strategy_name(correct_for(update.reducer)));
    std::vector<std::pair<std::string, rational>> factors;
    if (w > 1) factors.push_back({times + "W", rational(w)}), factors.push_back({"/W", rational(1) / w});
    if (g > 1) factors.push_back({times + "G", rational(g)}), factors.push_back({"/G", rational(1) / g});
    for (std::uint64_t k = 2; k <= 8; ++k) factors.push_back({times + std::to_string(k), rational(k)});
    if (*rc::gen::arbitrary<bool>()) {
      f.name = base.name;
      f.plain = true;
      f.correct = correct_base;
      return f;
    }
    const auto& [label, value] = factors[*uniform_index(factors.size())];
    f.name = base.name + label;
    f.delivered = scaled(base.weights, value);
    f.description += ", times " + to_string(value);
    const bool w_compensates =
        declared && w > 1 &&
        ((update.reducer == reducer_kind::mean && base.normalization == "global_share" && value == w) ||
         (update.reducer == reducer_kind::sum && base.normalization == "scaled_sum" && value == rational(1) / w));
    f.correct = w_compensates;
    return f;
  });
}

planted_formula objective_formula(const grouped_update& update) {
  planted_formula f;
  f.name = "objective";
  f.description = "the objective's computation";
  f.delivered = *oracle::objective_table(update);
  f.rescales.assign(f.delivered.size(), 0);
  f.plain = true;
  f.correct = true;
  return f;
}

// ---- what a name means ----------------------------------------------------------------------------------

std::optional<objective_kind> objective_called(std::string_view name) {
  for (objective_kind o : every_objective())
    if (objective_name(o) == name) return o;
  return std::nullopt;
}

bool is_normalization(std::string_view name) {
  for (const auto* names : {&oracle::report_names(), &oracle::diagnosed_names()})
    if (std::find(names->begin(), names->end(), name) != names->end()) return true;
  return false;
}

// A name without a factor.
std::optional<oracle::table> base_table(const grouped_update& update, std::string_view name) {
  if (name == "objective") return oracle::objective_table(update);
  if (name == "sum_of_sequence_means")
    return oracle::normalization_table(update, "local_sum", objective_kind::sequence_mean);
  if (name == "count_denominator")
    return oracle::normalization_table(update, strategy_name(correct_for(update.reducer)), objective_kind::token_mean);
  if (const std::optional<objective_kind> o = objective_called(name))
    return oracle::normalization_table(update, "global_mean", *o);
  const std::size_t open = name.find('(');
  if (open != std::string_view::npos && name.back() == ')') {
    const std::optional<objective_kind> o = objective_called(name.substr(open + 1, name.size() - open - 2));
    if (!o || !is_normalization(name.substr(0, open))) return std::nullopt;
    return oracle::normalization_table(update, name.substr(0, open), *o);
  }
  if (!is_normalization(name)) return std::nullopt;
  return oracle::normalization_table(update, name, update.objective);
}

// The factor a label names: "×W", "/G", "×W·G", "/(W·G)", "×W/G", "×G/W", "×4", "/3", "×2/3".
std::optional<rational> factor_named(const grouped_update& update, std::string_view label) {
  bool divide = false;
  if (label.substr(0, times.size()) == times) label.remove_prefix(times.size());
  else if (!label.empty() && label.front() == '/') divide = true, label.remove_prefix(1);
  else return std::nullopt;
  const rational w{update.world_size()};
  const std::size_t common = common_accumulation(update);
  const rational g{common};
  std::optional<rational> value;
  const bool uses_g = label.find('G') != std::string_view::npos;
  if (uses_g && common < 2) return std::nullopt;  // G names the common accumulation only
  if (label == "W") value = w;
  else if (label == "G") value = g;
  else if (label == "W" + dot + "G" || label == "(W" + dot + "G)") value = rational(w * g);
  else if (label == "W/G") value = rational(w / g);
  else if (label == "G/W") value = rational(g / w);
  else {
    try {
      value = read_number(label, literal_form::json_string);
    } catch (const error&) {
      return std::nullopt;
    }
  }
  if (!value || *value == 0) return std::nullopt;
  if (divide) value = rational(1 / *value);
  return value;
}

// The ratio planted/base where the measurement sees a group; nullopt if base is 0 where planted is not.
std::optional<std::vector<std::optional<rational>>> ratios(const oracle::table& planted, const oracle::table& base,
                                                           const std::vector<bool>& seen) {
  std::vector<std::optional<rational>> out(planted.size());
  for (std::size_t g = 0; g < planted.size(); ++g) {
    if (!seen[g]) continue;
    if (base[g] == 0) {
      if (planted[g] != 0) return std::nullopt;
      continue;
    }
    rational r = planted[g] / base[g];
    out[g] = std::move(r);
  }
  return out;
}

// Every table a fixed name could mean, for the family names: the objective and every normalization in every
// objective's counts.
std::vector<oracle::table> fixed_tables(const grouped_update& update) {
  std::vector<oracle::table> tables;
  for (const base_choice& b : bases_of(update)) tables.push_back(b.weights);
  return tables;
}

bool window_family(const grouped_update& update, const oracle::table& weights, const std::vector<bool>& seen,
                   bool shorter) {
  const std::size_t common = common_accumulation(update);
  if (common < 2) return false;
  for (const oracle::table& base : fixed_tables(update)) {
    const auto r = ratios(weights, base, seen);
    if (!r) continue;
    std::optional<rational> lambda;
    bool constant = true;
    for (const auto& x : *r)
      if (x) {
        if (!lambda) lambda = *x;
        else constant = constant && *x == *lambda;
      }
    if (!constant || !lambda || *lambda <= 0) continue;
    const rational k = rational(common) / *lambda;
    if (denominator(k) != 1 || k > 64 || k == rational(common)) continue;
    if (shorter ? k > rational(common) : k < rational(common)) return true;
  }
  return false;
}

bool geometric_family(const grouped_update& update, const oracle::table& weights, const std::vector<bool>& seen) {
  std::vector<oracle::table> bases;
  if (auto t = oracle::objective_table(update)) bases.push_back(*t);
  if (auto t = oracle::normalization_table(update, "microbatch_mean", update.objective)) bases.push_back(*t);
  const std::vector<group_place> places = group_places(update);
  for (const oracle::table& base : bases) {
    const auto r = ratios(weights, base, seen);
    if (!r) continue;
    for (std::uint64_t p = 1; p <= 16; ++p)
      for (std::uint64_t q = 1; q <= 16; ++q) {
        const rational a = rational(p) / q;
        if (a == 1 || numerator(a) != p) continue;  // each fraction once, in lowest terms
        std::optional<rational> lambda;
        bool fits = true;
        for (std::size_t g = 0; g < places.size() && fits; ++g) {
          if (!(*r)[g]) continue;
          rational power = 1;
          for (std::size_t i = places[g].microbatch + 1; i < update.ranks[places[g].rank].size(); ++i) power *= a;
          rational l = *(*r)[g] / power;
          if (!lambda) lambda = l;
          else fits = *lambda == l;
        }
        if (fits && lambda && *lambda > 0) return true;
      }
  }
  return false;
}

std::vector<std::string> names_of(const std::vector<explanation>& list) {
  std::vector<std::string> out;
  for (const explanation& e : list) out.push_back(e.name);
  return out;
}

// The names separated by commas, or "none".
std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

std::optional<oracle::table> table_named(const grouped_update& update, std::string_view name) {
  std::size_t cut = name.find(times);
  const std::size_t slash = name.find('/');
  cut = std::min(cut, slash);
  if (cut == std::string_view::npos) return base_table(update, name);
  const std::optional<oracle::table> base = base_table(update, name.substr(0, cut));
  const std::optional<rational> factor = factor_named(update, name.substr(cut));
  if (!base || !factor) return std::nullopt;
  return scaled(*base, *factor);
}

bool denotes(const grouped_update& update, std::string_view name, const oracle::table& weights, bool witness) {
  const std::vector<bool> seen = measured_groups(update, witness);
  if (name == "short_window" || name == "other_window")
    return window_family(update, weights, seen, name == "short_window");
  if (name == "geometric") return geometric_family(update, weights, seen);
  const std::optional<oracle::table> meant = table_named(update, name);
  return meant && equal_where_seen(*meant, weights, seen);
}

observation observe(const grouped_update& update, const planted_formula& formula, arithmetic dumped, bool witness) {
  observation o;
  o.dtype = dumped == arithmetic::exact ? "exact" : "float32";
  const std::vector<group_place> places = group_places(update);
  const std::vector<rational> sums = oracle::derivative_sums(update);
  const rational w{update.world_size()};
  const bool mean = update.reducer == reducer_kind::mean;
  std::vector<rational> primary;
  std::vector<rational> second;
  for (std::size_t k = 0; k < places.size(); ++k) {
    const group_tokens& g = group_at(update, places[k]);
    if (dumped == arithmetic::exact) {
      primary.push_back(formula.delivered[k] * sums[k]);
      second.push_back(formula.delivered[k] * witness_sum(g, update.theta));
      continue;
    }
    // The program: rank r multiplies each token's loss by its float32 coefficient (the delivered weight
    // before the rescaling after later microbatches, times W under DDP's mean), the probe's component sums
    // the terms c·(θ − y) token by token in float32, the buffer is rescaled in float32 after every later
    // microbatch, and the all-reduce divides by W in float32.
    rational before = formula.delivered[k];
    for (std::uint64_t i = 0; i < formula.rescales[k]; ++i) before /= formula.rescale;
    if (mean) before *= w;
    const float c = as_float(before);
    const float theta = as_float(update.theta);
    float total = 0;
    float seen = 0;
    float j = 0;
    for (const token& y : g.positions) {
      if (!y) continue;
      j += 1;
      total = total + c * (theta - as_float(*y));
      seen = seen + c * (theta - j);
    }
    for (std::uint64_t i = 0; i < formula.rescales[k]; ++i) {
      total = total * as_float(formula.rescale);
      seen = seen * as_float(formula.rescale);
    }
    if (mean) {
      total = total / static_cast<float>(update.world_size());
      seen = seen / static_cast<float>(update.world_size());
    }
    primary.push_back(exact_of(total));
    second.push_back(exact_of(seen));
  }
  o.per_rank.assign(update.world_size(), primary);
  if (witness) o.witness.assign(update.world_size(), second);
  return o;
}

fitter document_gate() {
  return [](const grouped_update& update, const observation& observed) -> std::optional<gate_result> {
    grouped_document_options options;
    options.observed = observed;
    const file_report report = check_text(write_grouped_document(update, options), "fit.json");
    if (!report.document) return std::nullopt;
    const gate_section* gate = report.document->find_section<gate_section>();
    if (!gate || !gate->result()) return std::nullopt;
    return *gate->result();
  };
}

namespace {

// One observation the law judges, and what it requires of the gate's conclusion.
struct fit_claim {
  std::string about;
  planted_formula formula;
  arithmetic dumped;
  observation observed;
  std::optional<gate_result> result;
  std::vector<std::string> failures;
};

void judge(const grouped_update& update, fit_claim& c, bool witness) {
  const std::vector<bool> seen = measured_groups(update, witness);
  const oracle::table objective = *oracle::objective_table(update);
  const bool equal = equal_where_seen(c.formula.delivered, objective, seen);
  if (!c.result) {
    c.failures.push_back("the document is rejected");
    return;
  }
  const gate_result& r = *c.result;
  const std::string verdict(verdict_name(r.verdict));
  auto denoting = [&](const std::vector<explanation>& list, const oracle::table& t) {
    return std::any_of(list.begin(), list.end(),
                       [&](const explanation& e) { return denotes(update, e.name, t, witness); });
  };
  const bool exact = c.dumped == arithmetic::exact;
  if (!equal) {
    if (r.verdict != gate_verdict::fail)
      c.failures.push_back("the gate says " + verdict + " where the table differs from the objective's");
    if (!denoting(r.diagnosis, c.formula.delivered))
      c.failures.push_back("no name of the diagnosis (" + listed(names_of(r.diagnosis)) + ") means the planted table");
    if (exact)
      for (const explanation& e : r.diagnosis)
        if (!denotes(update, e.name, c.formula.delivered, witness))
          c.failures.push_back("the diagnosis names " + e.name + ", whose table is not the planted one");
    // Every explanation that fits: where G = W, the objective's factor W reads as the same factor G, and both
    // are named, each marked alike with the other (a factor in G may stand under a named computation's name).
    const std::size_t g = common_accumulation(update);
    if (exact && g > 1 && g == update.ranks.size())
      for (const explanation& e : r.diagnosis) {
        if (e.name != "objective×W" && e.name != "objective/W") continue;
        const std::string twin = e.name == "objective×W" ? "objective×G" : "objective/G";
        const bool named =
            std::any_of(r.diagnosis.begin(), r.diagnosis.end(), [&](const explanation& o) { return o.name == twin; });
        const bool marked =
            std::any_of(e.alike.begin(), e.alike.end(), [&](const look_alike& a) { return a.name == twin; });
        if (!named || !marked)
          c.failures.push_back("at G = W the diagnosis names " + e.name + " but not " + twin + " beside it, alike");
      }
    return;
  }
  if (r.verdict == gate_verdict::fail)
    c.failures.push_back("the gate fails a table equal to the objective's (diagnosis: " +
                         listed(names_of(r.diagnosis)) + ")");
  if (c.formula.plain && !c.formula.correct) {
    if (r.verdict != gate_verdict::inconclusive)
      c.failures.push_back("the gate says " + verdict + " where " + c.formula.name +
                           ", a mistake it knows, has the objective's table on this update");
    if (!denoting(r.could_hide, c.formula.delivered))
      c.failures.push_back("no name of could_hide (" + listed(names_of(r.could_hide)) + ") means the planted table");
  }
  if (exact)
    for (const explanation& e : r.could_hide)
      if (!denotes(update, e.name, objective, witness))
        c.failures.push_back("could_hide names " + e.name + ", whose table is not the objective's");
}

// What the document claims the gate concludes: what the law requires where the claim fails, what the gate
// concluded where it holds (so that every printed document replays as it is labelled).
gate_claim expected_gate(const grouped_update& update, const fit_claim& c, bool witness) {
  if (c.failures.empty() && c.result)
    return {std::string(verdict_name(c.result->verdict)),
            names_of(c.result->verdict == gate_verdict::fail ? c.result->diagnosis : c.result->could_hide)};
  const oracle::table objective = *oracle::objective_table(update);
  const bool equal = equal_where_seen(c.formula.delivered, objective, measured_groups(update, witness));
  if (!equal) return {"fail", {c.formula.name}};
  if (c.formula.plain && !c.formula.correct) return {"inconclusive", {c.formula.name}};
  return {"pass", {}};
}

}  // namespace

namespace {

// Judges every claim of one case with `gate`; fails the case with each claim as a document otherwise.
void require_fit_claims(std::string_view law_name, const grouped_update& update, std::vector<fit_claim>& claims,
                        bool witness, const fitter& gate) {
  bool failed = false;
  for (fit_claim& c : claims) {
    c.observed = observe(update, c.formula, c.dumped, witness);
    c.result = gate(update, c.observed);
    judge(update, c, witness);
    failed = failed || !c.failures.empty();
  }
  if (!failed) return;
  fit_counterexample found;
  std::ostringstream report;
  report << "The law \"" << law_name << "\" does not hold. Each claim below is a complete normcheck/1\n"
         << "document: save one as a .json file and `normcheck check FILE` replays it (exit 1 where the\n"
         << "gate does not conclude the expect_gate the law requires).\n";
  for (std::size_t i = 0; i < claims.size(); ++i) {
    const fit_claim& c = claims[i];
    grouped_document_options options;
    options.description = "The fit law: " + c.about;
    options.observed = c.observed;
    options.expect_gate = expected_gate(update, c, witness);
    const std::string document = write_grouped_document(update, options);
    report << "\nclaim " << i + 1 << " of " << claims.size() << (c.failures.empty() ? " (holds)" : " (DOES NOT HOLD)")
           << ": " << c.about << "\n";
    if (c.result)
      report << "  the gate: " << verdict_name(c.result->verdict) << "; diagnosis "
             << listed(names_of(c.result->diagnosis)) << "; could_hide " << listed(names_of(c.result->could_hide))
             << "\n";
    for (const std::string& f : c.failures) report << "  " << f << "\n";
    report << document;
    if (!c.failures.empty()) found.failing_documents.push_back(document);
  }
  found.report = report.str();
  last_fit = found;
  throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure, found.report);
}

}  // namespace

law fit_law(const fitter& gate) {
  return [gate] {
    const grouped_update update = *fit_updates();
    const planted_formula planted = *planted_formulas(update);
    const bool witness = *uniform_index(4) != 0;
    std::vector<fit_claim> claims;
    claims.push_back({"the program computed " + planted.description + " (" + planted.name + "), dumped exactly",
                      planted,
                      arithmetic::exact,
                      {},
                      {},
                      {}});
    claims.push_back({"the program computed " + planted.description + " (" + planted.name + ") in float32", planted,
                      arithmetic::float32, {}, {}, {}});
    claims.push_back(
        {"the program computed the objective in float32", objective_formula(update), arithmetic::float32, {}, {}, {}});
    require_fit_claims("the fit law", update, claims, witness, gate);
  };
}

law fit_each_mistake(const fitter& gate) {
  return [gate] {
    const grouped_update update = *fit_updates();
    const bool witness = *uniform_index(4) != 0;
    const std::vector<bool> seen = measured_groups(update, witness);
    const oracle::table objective = *oracle::objective_table(update);
    std::vector<fit_claim> claims;
    for (const base_choice& base : bases_of(update)) {
      if (equal_where_seen(base.weights, objective, seen)) continue;
      // Several normalizations may share a table on this update: one claim per table is enough, since
      // any name that denotes it answers every one of them.
      const bool repeated = std::any_of(claims.begin(), claims.end(), [&](const fit_claim& c) {
        return equal_where_seen(c.formula.delivered, base.weights, seen);
      });
      if (repeated) continue;
      planted_formula f;
      f.name = base.name;
      f.description = base.normalization + " in " + std::string(objective_name(base.units)) + "'s counts";
      f.delivered = base.weights;
      f.rescales.assign(base.weights.size(), 0);
      f.plain = true;
      claims.push_back({"the program computed " + f.description + " (" + f.name + "), dumped exactly", f,
                        arithmetic::exact, {}, {}, {}});
    }
    RC_CLASSIFY(claims.empty(), "no mistake differs from the objective here");
    require_fit_claims("the fit law for each mistake", update, claims, witness, gate);
  };
}

const fit_counterexample& last_fit_counterexample() { return last_fit; }

namespace {

// A fitter that judges a corrupted observation: every group's components replaced by weight(g)·(its
// derivative sums), with weight(g) what `weight_of` makes of the measured weights.
fitter corrupting(std::function<rational(const std::vector<rational>& measured, std::size_t g)> weight_of) {
  return [weight_of](const grouped_update& update, const observation& observed) {
    const std::vector<rational> sums = oracle::derivative_sums(update);
    std::vector<rational> witnesses;
    for (const group_place& place : group_places(update))
      witnesses.push_back(witness_sum(group_at(update, place), update.theta));
    std::vector<rational> measured;  // the weight each group shows (0 where it shows none)
    for (std::size_t g = 0; g < sums.size(); ++g) {
      if (sums[g] != 0) measured.push_back(observed.per_rank.front()[g] / sums[g]);
      else if (!observed.witness.empty() && witnesses[g] != 0)
        measured.push_back(observed.witness.front()[g] / witnesses[g]);
      else measured.emplace_back(0);
    }
    observation corrupted = observed;
    for (std::size_t g = 0; g < sums.size(); ++g) {
      const rational w = weight_of(measured, g);
      for (auto& v : corrupted.per_rank) v[g] = w * sums[g];
      for (auto& v : corrupted.witness) v[g] = w * witnesses[g];
    }
    return document_gate()(update, corrupted);
  };
}

}  // namespace

fitter group_zero_fitter() {
  return corrupting([](const std::vector<rational>& measured, std::size_t) { return measured.front(); });
}

fitter dropped_candidate_fitter(std::string name) {
  return [name](const grouped_update& update, const observation& observed) {
    std::optional<gate_result> result = document_gate()(update, observed);
    if (!result) return result;
    auto without = [&](std::vector<explanation>& list) {
      list.erase(std::remove_if(list.begin(), list.end(), [&](const explanation& e) { return e.name == name; }),
                 list.end());
    };
    without(result->diagnosis);
    without(result->could_hide);
    return result;
  };
}

fitter misscaled_fitter() {
  return [](const grouped_update& update, const observation& observed) {
    observation doubled = observed;
    for (auto* vectors : {&doubled.per_rank, &doubled.witness})
      for (auto& v : *vectors)
        for (rational& x : v) x *= 2;
    return document_gate()(update, doubled);
  };
}

fitter averaged_table_fitter() {
  return corrupting([](const std::vector<rational>& measured, std::size_t) {
    rational total;
    for (const rational& w : measured) total += w;
    rational mean = total / measured.size();
    return mean;
  });
}

}  // namespace normcheck::properties
