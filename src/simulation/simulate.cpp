#include "normcheck/simulation/simulate.hpp"

#include "normcheck/core/gradients.hpp"


#include <algorithm>
#include <bit>
#include <string>

namespace normcheck {

namespace {

using vector = parameter_vector;

vector zeros(std::size_t d) { return vector(d, rational(0)); }

void add_to(vector& target, const vector& term) {
  for (std::size_t i = 0; i < target.size(); ++i) target[i] += term[i];
}

void scale_by(vector& target, const rational& factor) {
  for (rational& x : target) x *= factor;
}

vector scaled(const vector& v, const rational& factor) {
  vector out = v;
  scale_by(out, factor);
  return out;
}

// gram·θ − target_moment: the loss gradient summed over the tokens these moments describe.
vector gradient_sum(const std::vector<rational>& gram, const vector& target_moment, const vector& theta) {
  const std::size_t d = theta.size();
  vector out(d);
  for (std::size_t i = 0; i < d; ++i) {
    rational total = -target_moment[i];
    for (std::size_t j = 0; j < d; ++j) {
      rational term = gram[i * d + j] * theta[j];
      total += term;
    }
    out[i] = std::move(total);
  }
  return out;
}

// The moments of several microbatches together.
struct moments {
  std::vector<rational> gram;
  vector target_moment;

  explicit moments(std::size_t d) : gram(d * d, rational(0)), target_moment(d, rational(0)) {}

  void add(const microbatch_moments& m) {
    for (std::size_t i = 0; i < gram.size(); ++i) gram[i] += m.gram[i];
    for (std::size_t i = 0; i < target_moment.size(); ++i) target_moment[i] += m.target_moment[i];
  }

  vector gradient_sum_at(const vector& theta) const { return gradient_sum(gram, target_moment, theta); }
};

// One step's counts as the normalization table reads them: each microbatch's valid tokens and padding.
partition counts_of(const step_batch& batch) {
  partition counts;
  for (const rank_batch& rank : batch.ranks) {
    rank_stats& stats = counts.ranks.emplace_back();
    for (const microbatch_moments& m : rank.microbatches) {
      microbatch_stats& microbatch = stats.microbatches.emplace_back();
      microbatch.valid_tokens = m.valid_tokens;
      microbatch.padding = m.padding;
    }
  }
  return counts;
}

// The gradient of rank r's local scalar at θ: Σₘ cₘ·∇Sₘ(θ), cₘ the coefficient the normalization table gives
// microbatch m (one coefficient for the whole rank unless it changes from microbatch to microbatch); nullopt
// where that scalar is 0/0.
std::optional<vector> local_gradient(const objective_units& counts, std::size_t r, const rank_batch& rank,
                                     const vector& theta, strategy loss_scale) {
  const normalization& n = normalization_of(loss_scale);
  const std::size_t d = theta.size();
  if (n.level == scope::update || n.level == scope::rank) {
    const std::optional<rational> c = local_coefficient(counts, n, {r, 0, 0});
    if (!c) return std::nullopt;
    moments all(d);
    for (const microbatch_moments& m : rank.microbatches) all.add(m);
    vector sum = all.gradient_sum_at(theta);
    if (*c != 1) scale_by(sum, *c);
    return sum;
  }
  vector total = zeros(d);
  for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
    const std::optional<rational> c = local_coefficient(counts, n, {r, m, 0});
    if (!c) return std::nullopt;
    const microbatch_moments& microbatch = rank.microbatches[m];
    vector part = gradient_sum(microbatch.gram, microbatch.target_moment, theta);
    scale_by(part, *c);
    add_to(total, part);
  }
  return total;
}

rational squared_norm(const vector& v) {
  rational total;
  for (const rational& x : v) {
    rational square = x * x;
    total += square;
  }
  return total;
}

integer ceil_sqrt(const integer& value) {
  integer root = boost::multiprecision::sqrt(value);
  if (root * root < value) root += 1;
  return root;
}

// ‖g‖ from ‖g‖² > 0: exact when it is the square of a rational; otherwise the smallest multiple of 2⁻ᵏ
// above it, k giving at least 64 significant bits.
rational norm_from_square(const rational& square, bool& rounded) {
  const integer p = numerator(square);
  const integer q = denominator(square);
  const integer p_root = boost::multiprecision::sqrt(p);
  const integer q_root = boost::multiprecision::sqrt(q);
  if (p_root * p_root == p && q_root * q_root == q) {
    rounded = false;
    rational exact = rational(p_root) / rational(q_root);
    return exact;
  }
  rounded = true;
  // 2^(e−1) ≤ p/q < 2^(e+1) with e = msb(p) − msb(q); 2ᵏ·√(p/q) ≥ 2^65 for k = 66 − ⌊e/2⌋.
  const std::int64_t e = static_cast<std::int64_t>(boost::multiprecision::msb(p)) -
                         static_cast<std::int64_t>(boost::multiprecision::msb(q));
  const std::int64_t half = e >= 0 ? e / 2 : -((-e + 1) / 2);
  const std::int64_t k = std::max<std::int64_t>(0, 66 - half);
  integer shifted = p << static_cast<unsigned>(2 * k);
  integer quotient = shifted / q;
  if (quotient * q != shifted) quotient += 1;
  integer scale = integer(1) << static_cast<unsigned>(k);
  rational bound = rational(ceil_sqrt(quotient)) / rational(scale);
  return bound;
}

// The value of one part of a state or step, for comparisons and messages.
struct part_value {
  const vector* values = nullptr;
  std::uint64_t position = 0;

  bool operator==(const part_value& other) const {
    return values ? *values == *other.values : position == other.position;
  }
};

}  // namespace

std::vector<parameter_vector> simulation::final_theta() const {
  std::vector<parameter_vector> out;
  if (steps.empty()) {
    for (const replica_state& state : start_up) out.push_back(state.theta);
  } else {
    for (const rank_step& rank : steps.back().ranks) out.push_back(rank.end.theta);
  }
  return out;
}

parameter_vector clip(const parameter_vector& gradient, const parameter_vector& decide_from,
                      const optimizer_config& optimizer, clip_outcome& outcome) {
  vector out = gradient;
  vector decide = decide_from;
  if (optimizer.clip_value) {
    const rational& c = *optimizer.clip_value;
    rational low = -c;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (abs(decide[i]) <= c) continue;
      decide[i] = decide[i] > 0 ? c : low;
      if (out[i] > c) out[i] = c;
      else if (out[i] < low) out[i] = low;
      else continue;
      outcome.clipped = true;
    }
  }
  if (optimizer.clip_norm) {
    const rational& c = *optimizer.clip_norm;
    const rational square = squared_norm(decide);
    rational limit = c * c;
    if (square > limit) {
      bool rounded = false;
      const rational norm = norm_from_square(square, rounded);
      outcome.scale = c / norm;
      outcome.rounded_norm = rounded;
      outcome.clipped = true;
      scale_by(out, outcome.scale);
    }
  }
  return out;
}

replica_state sgd_step(const replica_state& state, const parameter_vector& applied, const rational& lr,
                       const optimizer_config& optimizer) {
  replica_state next = state;
  vector direction = applied;
  if (optimizer.weight_decay != 0) add_to(direction, scaled(state.theta, optimizer.weight_decay));
  if (optimizer.momentum != 0) {
    scale_by(next.momentum, optimizer.momentum);
    add_to(next.momentum, direction);
    direction = next.momentum;
  }
  scale_by(direction, -lr);
  add_to(next.theta, direction);
  next.scheduler_position += 1;
  return next;
}

namespace {

// The limbs of a number, 0 for 0.
std::uint64_t limbs_of(const integer& value) {
  return value == 0 ? 0 : (boost::multiprecision::msb(abs(value)) + 64) / 64;
}

// What a run's values cost so far: the work of operating on them and the memory of its records.
struct run_cost {
  std::uint64_t digit_work = 0;
  std::uint64_t kept_limbs = 0;
};

// What a rational costs beside its limbs, in limbs: its two integers' headers and their allocations; and
// what a vector of them costs beside its elements (its header and allocation).
constexpr std::uint64_t rational_overhead_limbs = 10;
constexpr std::uint64_t vector_overhead_limbs = 8;

// Notes the values of `values` in the longest limbs seen and in the limbs kept.
void measure(const parameter_vector& values, std::uint64_t& longest, std::uint64_t& kept) {
  kept += vector_overhead_limbs;
  for (const rational& v : values) {
    const std::uint64_t top = limbs_of(numerator(v));
    const std::uint64_t bottom = limbs_of(denominator(v));
    longest = std::max({longest, top, bottom});
    kept += top + bottom + rational_overhead_limbs;
  }
}

// Charges one completed step to the run's cost. Its digit work: the step's operations (a product of the
// Gram matrix per microbatch, an update per rank and the reference) times the cost of an operation on
// the longest number then held, L·log²L in 64-bit limbs (GMP's gcd canonicalizes every result). Its
// memory: the limbs of every value the step's record keeps. A scenario whose values grow every step (a
// many-digit decay, momentum) is stopped here, long before its cost is paid.
void charge(const scenario& s, const step_record& record, run_cost& cost) {
  std::uint64_t longest = 1;
  std::uint64_t kept = 0;
  for (const rank_step& rank : record.ranks) {
    for (const parameter_vector* values : {&rank.start.theta, &rank.start.momentum, &rank.local_gradient,
                                           &rank.reduced_gradient, &rank.objective_gradient,
                                           &rank.applied_gradient, &rank.end.theta, &rank.end.momentum})
      measure(*values, longest, kept);
  }
  const reference_step& reference = record.reference;
  for (const parameter_vector* values : {&reference.gradient, &reference.applied_gradient, &reference.end.theta,
                                         &reference.end.momentum})
    measure(*values, longest, kept);
  const std::uint64_t d = s.dimension;
  std::uint64_t microbatches = 0;
  for (const rank_batch& rank : s.steps[record.step - 1].ranks) microbatches += rank.microbatches.size();
  const std::uint64_t log_limbs = std::bit_width(longest);
  cost.digit_work += (microbatches * d * d + (record.ranks.size() + 1) * d) * longest * log_limbs * log_limbs;
  cost.kept_limbs += kept;
  const std::string reached = "after step " + std::to_string(record.step) + " the simulation's exact values reach " +
                              std::to_string(longest * 64 * 30103 / 100000) + " digits";
  const std::string advice = ": rates or a decay with many digits, with momentum, lengthen every value at every "
                             "step; give fewer steps, ranks or parameters, or shorter rates";
  if (cost.digit_work > scenario_max_digit_work)
    throw error(error_code::limit_exceeded, reached + ", and the work they cost passes the limit of " +
                                                std::to_string(scenario_max_digit_work) +
                                                " (operations × limbs × log² limbs)" + advice);
  if (cost.kept_limbs > scenario_max_kept_limbs)
    throw error(error_code::limit_exceeded, reached + ", and the record of the run passes " +
                                                std::to_string(scenario_max_kept_limbs * 8 >> 20) + " MiB" +
                                                advice);
}

}  // namespace

simulation simulate(const scenario& s) {
  const std::size_t world_size = s.world_size();
  const std::size_t d = s.dimension;
  const optimizer_config& optimizer = s.optimizer;
  simulation run;

  replica_state initial{s.theta, zeros(d), 0};
  run.reference_start = initial;
  std::vector<replica_state> states(world_size, initial);
  for (const fault& f : s.faults)
    if (f.kind == fault_kind::initial_parameters) states[f.rank].theta = f.value;
  if (s.initial_sync)
    for (replica_state& state : states) state.theta = states.front().theta;
  run.start_up = states;
  replica_state reference = initial;
  std::vector<bool> local_clipping(world_size, false);
  run_cost cost;

  for (std::uint64_t index = 0; index < s.steps.size(); ++index) {
    const std::uint64_t step = index + 1;
    const step_batch& batch = s.steps[index];
    const std::uint64_t global_tokens = batch.valid_tokens();
    const partition counts = counts_of(batch);
    const objective_units units(counts, objective_kind::token_mean);
    // The objective's weight 1/N, from the same table as every local scalar.
    const rational objective_weight = local_coefficient(units, normalization_of(strategy::global_mean), {}).value();
    moments all(d);
    for (const rank_batch& rank : batch.ranks)
      for (const microbatch_moments& m : rank.microbatches) all.add(m);

    std::vector<std::size_t> skipping;
    for (const fault& f : s.faults) {
      if (f.step != step) continue;
      switch (f.kind) {
        case fault_kind::optimizer_state: states[f.rank].momentum = f.value; break;
        case fault_kind::scheduler_step: states[f.rank].scheduler_position += 1; break;
        case fault_kind::local_clipping: local_clipping[f.rank] = true; break;
        case fault_kind::skipped_collective: skipping.push_back(f.rank); break;
        case fault_kind::initial_parameters: break;
      }
    }
    if (!skipping.empty()) {
      std::sort(skipping.begin(), skipping.end());
      skipping.erase(std::unique(skipping.begin(), skipping.end()), skipping.end());
      halt stop{step, halt_cause::skipped_collective, {}, skipping, {}};
      for (std::size_t r = 0; r < world_size; ++r)
        if (!std::binary_search(skipping.begin(), skipping.end(), r)) stop.waiting.push_back(r);
      run.stopped = stop;
      break;
    }

    step_record record;
    record.step = step;
    record.valid_tokens = global_tokens;
    record.ranks.resize(world_size);
    std::vector<std::size_t> undefined;
    for (std::size_t r = 0; r < world_size; ++r) {
      rank_step& rs = record.ranks[r];
      rs.start = states[r];
      rs.valid_tokens = batch.ranks[r].valid_tokens();
      rs.learning_rate = optimizer.schedule.rate(states[r].scheduler_position);
      std::optional<vector> local = local_gradient(units, r, batch.ranks[r], states[r].theta, s.loss_scale);
      if (!local) {
        undefined.push_back(r);
        continue;
      }
      rs.local_gradient = std::move(*local);
      rs.objective_gradient = all.gradient_sum_at(states[r].theta);
      scale_by(rs.objective_gradient, objective_weight);
    }
    if (!undefined.empty()) {
      run.stopped = halt{step, halt_cause::undefined_local_loss, {}, {}, undefined};
      break;
    }

    // The all-reduce: every rank receives the same combination of all local gradients.
    vector reduced = zeros(d);
    for (const rank_step& rs : record.ranks) add_to(reduced, rs.local_gradient);
    if (s.reducer == reducer_kind::mean) scale_by(reduced, rational(1) / world_size);

    for (std::size_t r = 0; r < world_size; ++r) {
      rank_step& rs = record.ranks[r];
      rs.reduced_gradient = reduced;
      rs.clip.local_decision = local_clipping[r];
      rs.applied_gradient = clip(reduced, local_clipping[r] ? rs.local_gradient : reduced, optimizer, rs.clip);
      rs.end = sgd_step(rs.start, rs.applied_gradient, rs.learning_rate, optimizer);
      states[r] = rs.end;
    }

    reference_step& ref = record.reference;
    ref.learning_rate = optimizer.schedule.rate(reference.scheduler_position);
    ref.gradient = all.gradient_sum_at(reference.theta);
    scale_by(ref.gradient, objective_weight);
    ref.applied_gradient = clip(ref.gradient, ref.gradient, optimizer, ref.clip);
    ref.end = sgd_step(reference, ref.applied_gradient, ref.learning_rate, optimizer);
    reference = ref.end;
    charge(s, record, cost);
    run.steps.push_back(std::move(record));
  }
  run.first_divergence = find_first_divergence(s, run);
  run.first_reference_difference = find_reference_difference(run);
  return run;
}

std::optional<divergence> find_first_divergence(const scenario& s, const simulation& run) {
  const bool with_momentum = s.optimizer.momentum != 0;
  const bool with_scheduler = s.optimizer.schedule.has_scheduler();
  std::optional<divergence> found;
  // Compares one part across ranks; records the first divergence found.
  auto compare = [&](std::uint64_t step, state_part part, bool after_update, auto value_of, std::size_t ranks) {
    if (found) return;
    const part_value first = value_of(0);
    divergence d{step, part, after_update, {}};
    for (std::size_t r = 1; r < ranks; ++r)
      if (!(value_of(r) == first)) d.ranks.push_back(r);
    if (!d.ranks.empty()) found = d;
  };
  auto compare_state = [&](std::uint64_t step, bool after_update, auto state_of, std::size_t ranks) {
    compare(
        step, state_part::theta, after_update,
        [&](std::size_t r) {
          return part_value{&state_of(r).theta, 0};
        },
        ranks);
    if (with_momentum)
      compare(step, state_part::momentum, after_update,
              [&](std::size_t r) { return part_value{&state_of(r).momentum, 0}; }, ranks);
    if (with_scheduler && !after_update)
      compare(step, state_part::scheduler, after_update,
              [&](std::size_t r) { return part_value{nullptr, state_of(r).scheduler_position}; }, ranks);
  };
  compare_state(0, false, [&](std::size_t r) -> const replica_state& { return run.start_up[r]; }, run.start_up.size());
  for (const step_record& record : run.steps) {
    const std::size_t ranks = record.ranks.size();
    compare_state(
        record.step, false, [&](std::size_t r) -> const replica_state& { return record.ranks[r].start; }, ranks);
    compare(record.step, state_part::gradient, false,
            [&](std::size_t r) { return part_value{&record.ranks[r].applied_gradient, 0}; }, ranks);
    if (with_momentum)
      compare(record.step, state_part::momentum, true,
              [&](std::size_t r) { return part_value{&record.ranks[r].end.momentum, 0}; }, ranks);
    compare(record.step, state_part::theta, true,
            [&](std::size_t r) { return part_value{&record.ranks[r].end.theta, 0}; }, ranks);
    if (found) break;
  }
  return found;
}

std::optional<reference_difference> find_reference_difference(const simulation& run) {
  reference_difference difference;
  for (std::size_t r = 0; r < run.start_up.size(); ++r)
    if (run.start_up[r].theta != run.reference_start.theta) difference.ranks.push_back(r);
  if (!difference.ranks.empty()) return difference;
  for (const step_record& record : run.steps) {
    difference.step = record.step;
    for (std::size_t r = 0; r < record.ranks.size(); ++r)
      if (record.ranks[r].end.theta != record.reference.end.theta) difference.ranks.push_back(r);
    if (!difference.ranks.empty()) return difference;
  }
  return std::nullopt;
}

}  // namespace normcheck
