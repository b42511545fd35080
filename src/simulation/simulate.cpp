#include "normcheck/simulation/simulate.hpp"

#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/io/json_writer.hpp"

#include <algorithm>

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

// The gradient of the rank's local scalar at θ, or nullopt where that scalar is 0/0.
std::optional<vector> local_gradient(const rank_batch& rank, const vector& theta, strategy loss_scale,
                                     std::size_t world_size, std::uint64_t global_tokens) {
  const std::size_t d = theta.size();
  moments all(d);
  for (const microbatch_moments& m : rank.microbatches) all.add(m);
  vector sum = all.gradient_sum_at(theta);
  switch (loss_scale) {
    case strategy::local_mean: {
      const std::uint64_t n = rank.valid_tokens();
      if (n == 0) return std::nullopt;
      scale_by(sum, rational(1) / n);
      return sum;
    }
    case strategy::local_sum: return sum;
    case strategy::scaled_sum: {
      rational factor = rational(world_size) / global_tokens;
      scale_by(sum, factor);
      return sum;
    }
    case strategy::global_share: {
      scale_by(sum, rational(1) / global_tokens);
      return sum;
    }
    case strategy::microbatch_mean: {
      vector total = zeros(d);
      for (const microbatch_moments& m : rank.microbatches) {
        if (m.valid_tokens == 0) return std::nullopt;
        vector mean = gradient_sum(m.gram, m.target_moment, theta);
        scale_by(mean, rational(1) / m.valid_tokens);
        add_to(total, mean);
      }
      scale_by(total, rational(1) / rank.microbatches.size());
      return total;
    }
    case strategy::global_mean: break;  // not a local scalar; the reader refuses it
  }
  return std::nullopt;
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

std::string join_ranks(const std::vector<std::size_t>& ranks) {
  std::string out;
  for (std::size_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string ranks_phrase(const std::vector<std::size_t>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(ranks);
}

std::string exact_text(const vector& v, bool scalar, bool shortened) {
  auto one = [&](const rational& x) { return shortened ? shorten(to_string(x)) : to_string(x); };
  if (scalar) return one(v.front());
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + one(v[i]);
  return out + "]";
}

std::string approximate_text(const vector& v, bool scalar) {
  if (scalar) return approximate(v.front());
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + approximate(v[i]);
  return out + "]";
}

// A parameter vector: one exact string for the scalar model, an array of them otherwise.
void write_vector(json_writer& json, const vector& v, bool scalar) {
  if (scalar) {
    json.exact(v.front());
    return;
  }
  json.begin_array();
  for (const rational& x : v) json.exact(x);
  json.end_array();
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

namespace {

// One SGD step from `state` with the clipped gradient; the scheduler steps afterwards.
replica_state sgd_step(const replica_state& state, const vector& applied, const rational& lr,
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

  for (std::uint64_t index = 0; index < s.steps.size(); ++index) {
    const std::uint64_t step = index + 1;
    const step_batch& batch = s.steps[index];
    const std::uint64_t global_tokens = batch.valid_tokens();
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
      std::optional<vector> local = local_gradient(batch.ranks[r], states[r].theta, s.loss_scale, world_size, global_tokens);
      if (!local) {
        undefined.push_back(r);
        continue;
      }
      rs.local_gradient = std::move(*local);
      rs.objective_gradient = all.gradient_sum_at(states[r].theta);
      scale_by(rs.objective_gradient, rational(1) / global_tokens);
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
    scale_by(ref.gradient, rational(1) / global_tokens);
    ref.applied_gradient = clip(ref.gradient, ref.gradient, optimizer, ref.clip);
    ref.end = sgd_step(reference, ref.applied_gradient, ref.learning_rate, optimizer);
    reference = ref.end;
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
    compare(step, state_part::theta, after_update, [&](std::size_t r) { return part_value{&state_of(r).theta, 0}; }, ranks);
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
    compare_state(record.step, false, [&](std::size_t r) -> const replica_state& { return record.ranks[r].start; }, ranks);
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

namespace {

std::string divergence_claim_text(std::uint64_t step, std::size_t rank, state_part part) {
  return "step " + std::to_string(step) + ", rank " + std::to_string(rank) + ", " + std::string(state_part_name(part));
}

std::string moment_text(const divergence& d) {
  if (d.step == 0) return "at start-up";
  if (d.part == state_part::gradient) return "after the all-reduce and clipping";
  return d.after_update ? "after the update" : "at the start of the step";
}

// The values of the diverging part on rank 0 and on the first differing rank.
std::string divergence_values(const scenario& s, const simulation& run, const divergence& d) {
  const std::size_t other = d.rank();
  auto state_at = [&](std::size_t r) -> const replica_state& {
    if (d.step == 0) return run.start_up[r];
    const rank_step& rs = run.steps[d.step - 1].ranks[r];
    return d.after_update ? rs.end : rs.start;
  };
  auto show = [&](std::size_t r) -> std::string {
    switch (d.part) {
      case state_part::theta: return exact_text(state_at(r).theta, s.scalar_model, true);
      case state_part::momentum: return exact_text(state_at(r).momentum, s.scalar_model, true);
      case state_part::scheduler: {
        const std::uint64_t position = state_at(r).scheduler_position;
        return "position " + std::to_string(position) + ", lr " + to_string(s.optimizer.schedule.rate(position));
      }
      case state_part::gradient: {
        const rank_step& rs = run.steps[d.step - 1].ranks[r];
        std::string text = exact_text(rs.applied_gradient, s.scalar_model, true);
        if (rs.clip.local_decision) text += ", clipping decided locally";
        return text + (rs.clip.clipped ? ", clipped" : ", not clipped");
      }
    }
    return "";
  };
  return "rank 0: " + show(0) + "; rank " + std::to_string(other) + ": " + show(other);
}

std::string halt_text(const halt& h) {
  if (h.cause == halt_cause::skipped_collective)
    return "the run hangs at step " + std::to_string(h.step) + ": " + ranks_phrase(h.missing) +
           " did not call the gradient all-reduce; " + ranks_phrase(h.waiting) + " wait in it";
  return "the run stops at step " + std::to_string(h.step) + ": the local loss of " + ranks_phrase(h.ranks) +
         " is 0/0 (a mean over no valid token; NaN in floating point), so the update is undefined";
}

std::string optimizer_text(const scenario& s) {
  const optimizer_config& o = s.optimizer;
  std::string out = "SGD, lr ";
  if (o.schedule.rates.size() == 1) {
    out += to_string(o.schedule.rates.front());
  } else {
    out += "[";
    for (std::size_t i = 0; i < o.schedule.rates.size(); ++i) out += (i ? ", " : "") + to_string(o.schedule.rates[i]);
    out += "] by scheduler position";
  }
  if (o.schedule.decay_every)
    out += " × " + to_string(o.schedule.gamma) + " every " + std::to_string(*o.schedule.decay_every) + " positions";
  if (o.momentum != 0) out += ", momentum " + to_string(o.momentum);
  if (o.weight_decay != 0) out += ", weight decay " + to_string(o.weight_decay);
  if (o.clip_value) out += ", clip_value " + to_string(*o.clip_value);
  if (o.clip_norm) out += ", clip_norm " + to_string(*o.clip_norm);
  return out;
}

std::string fault_text(const fault& f, bool scalar) {
  const std::string rank = "rank " + std::to_string(f.rank);
  switch (f.kind) {
    case fault_kind::initial_parameters: return rank + " starts from θ = " + exact_text(f.value, scalar, true);
    case fault_kind::optimizer_state:
      return rank + " restores momentum " + exact_text(f.value, scalar, true) + " before step " + std::to_string(f.step);
    case fault_kind::local_clipping:
      return rank + " decides clipping from its local gradient from step " + std::to_string(f.step);
    case fault_kind::scheduler_step:
      return rank + " steps its scheduler once more before step " + std::to_string(f.step);
    case fault_kind::skipped_collective:
      return rank + " skips the gradient all-reduce at step " + std::to_string(f.step);
  }
  return "";
}

std::string setup_text(const scenario& s) {
  std::string model = s.scalar_model ? "scalar θ, loss ½(θ − y)² per token"
                                     : "θ with " + std::to_string(s.dimension) + " parameters, loss ½(θ·x − y)² per token";
  return "W = " + std::to_string(s.world_size()) + ", " + std::to_string(s.steps.size()) +
         (s.steps.size() == 1 ? " step, " : " steps, ") + model + "; each rank backpropagates " +
         std::string(strategy_name(s.loss_scale)) + " (" + std::string(strategy_formula(s.loss_scale)) +
         "), reducer " + std::string(reducer_name(s.reducer)) + ", initial sync " + (s.initial_sync ? "on" : "off");
}

std::string reference_text(const simulation& run) {
  if (run.first_reference_difference) {
    const reference_difference& d = *run.first_reference_difference;
    return "reference: θ differs from the single-process global-batch run " +
           (d.step == 0 ? std::string("at start-up") : "after step " + std::to_string(d.step)) + " on " +
           ranks_phrase(d.ranks);
  }
  if (run.stopped)
    return "reference: θ equals the single-process global-batch run through step " +
           std::to_string(run.steps.size()) + ", where the run stops";
  return "reference: θ equals the single-process global-batch run after every step, on every rank";
}

std::string replicas_text(const scenario& s, const simulation& run) {
  if (run.first_divergence) {
    const divergence& d = *run.first_divergence;
    return "replicas: first differ at step " + std::to_string(d.step) + ", " + ranks_phrase(d.ranks) + ": " +
           std::string(state_part_name(d.part)) + " " + moment_text(d) + " (" + divergence_values(s, run, d) + ")";
  }
  if (run.stopped) return "replicas: identical through step " + std::to_string(run.steps.size()) + ", where the run stops";
  return "replicas: identical at every step";
}

bool same_ranks(const std::optional<std::vector<std::size_t>>& claimed, const std::vector<std::size_t>& actual) {
  if (!claimed) return true;
  std::vector<std::size_t> sorted = *claimed;
  std::sort(sorted.begin(), sorted.end());
  return sorted == actual;
}

std::string actual_halt_text(const simulation& run) {
  if (!run.stopped) return "the run completes every step";
  const halt& h = *run.stopped;
  std::string out = "step " + std::to_string(h.step) + ", " + std::string(halt_cause_name(h.cause));
  if (h.cause == halt_cause::skipped_collective)
    out += ", waiting [" + join_ranks(h.waiting) + "], missing [" + join_ranks(h.missing) + "]";
  else
    out += ", ranks [" + join_ranks(h.ranks) + "]";
  return out;
}

std::string claimed_halt_text(const halt_claim& claim) {
  std::string out = "step " + std::to_string(claim.step) + ", " + std::string(halt_cause_name(claim.cause));
  if (claim.waiting) out += ", waiting [" + join_ranks(*claim.waiting) + "]";
  if (claim.missing) out += ", missing [" + join_ranks(*claim.missing) + "]";
  if (claim.ranks) out += ", ranks [" + join_ranks(*claim.ranks) + "]";
  return out;
}

void judge_rejection(file_report& report, const error& e, std::string_view text, const reader_limits& limits) {
  report.rejection = e;
  report.expected_error = text.empty() ? std::nullopt : find_expected_error(text, limits);
  if (report.expected_error && *report.expected_error == e.code() && !e.truncated()) {
    report.status = file_status::pass;
    return;
  }
  report.status = file_status::error;
  if (report.expected_error)
    report.failures.push_back("expected rejection with " + std::string(code_name(*report.expected_error)) +
                              ", but it was rejected with " + std::string(code_name(e.code())) +
                              (e.truncated() ? " (the document is cut off)" : ""));
}

}  // namespace

std::vector<std::string> unmet_expectations(const scenario& s, const simulation& run) {
  std::vector<std::string> failures;
  scenario_expectations expect = s.expect;
  if (!s.has_expect) {
    expect.replicas_agree = true;
    expect.equals_reference = true;
  }
  auto verdict = [](bool value) { return value ? std::string("true") : std::string("false"); };
  if (expect.replicas_agree && *expect.replicas_agree != run.replicas_agree())
    failures.push_back("expect replicas_agree = " + verdict(*expect.replicas_agree) + ", but " + replicas_text(s, run) +
                       (run.stopped ? "; " + halt_text(*run.stopped) : ""));
  if (expect.first_divergence) {
    const std::optional<divergence_claim>& claim = *expect.first_divergence;
    const std::optional<divergence>& actual = run.first_divergence;
    const bool held = claim ? actual && actual->step == claim->step && actual->rank() == claim->rank &&
                                  actual->part == claim->part
                            : !actual;
    if (!held)
      failures.push_back("expect first_divergence = " +
                         (claim ? divergence_claim_text(claim->step, claim->rank, claim->part) : std::string("null")) +
                         ", but it is " +
                         (actual ? divergence_claim_text(actual->step, actual->rank(), actual->part)
                                 : std::string("null (replicas never differ)")));
  }
  if (expect.equals_reference && *expect.equals_reference != run.equals_reference())
    failures.push_back("expect equals_reference = " + verdict(*expect.equals_reference) + ", but " + reference_text(run) +
                       (run.stopped ? "; " + halt_text(*run.stopped) : ""));
  if (expect.first_reference_difference) {
    const std::optional<reference_claim>& claim = *expect.first_reference_difference;
    const std::optional<reference_difference>& actual = run.first_reference_difference;
    const bool held = claim ? actual && actual->step == claim->step && actual->ranks.front() == claim->rank : !actual;
    auto text = [](std::uint64_t step, std::size_t rank) {
      return "step " + std::to_string(step) + ", rank " + std::to_string(rank);
    };
    if (!held)
      failures.push_back("expect first_reference_difference = " + (claim ? text(claim->step, claim->rank) : "null") +
                         ", but it is " +
                         (actual ? text(actual->step, actual->ranks.front()) : std::string("null (θ always equal)")));
  }
  if (expect.halt) {
    const std::optional<halt_claim>& claim = *expect.halt;
    const std::optional<halt>& actual = run.stopped;
    const bool held = claim ? actual && actual->step == claim->step && actual->cause == claim->cause &&
                                  same_ranks(claim->waiting, actual->waiting) &&
                                  same_ranks(claim->missing, actual->missing) && same_ranks(claim->ranks, actual->ranks)
                            : !actual;
    if (!held)
      failures.push_back("expect halt = " + (claim ? claimed_halt_text(*claim) : std::string("null")) + ", but " +
                         (actual ? "it is " : "") + actual_halt_text(run));
  }
  if (expect.final_theta) {
    const std::vector<parameter_vector> actual = run.final_theta();
    for (std::size_t r = 0; r < actual.size(); ++r)
      if ((*expect.final_theta)[r] != actual[r])
        failures.push_back("expect final_theta of rank " + std::to_string(r) + " = " +
                           exact_text((*expect.final_theta)[r], s.scalar_model, true) + ", but it is " +
                           exact_text(actual[r], s.scalar_model, true));
  }
  return failures;
}

std::vector<std::string> summarize_simulation(const scenario& s, const simulation& run) {
  std::vector<std::string> lines;
  if (!s.description.empty()) lines.push_back(s.description);
  lines.push_back(setup_text(s));
  lines.push_back("optimizer: " + optimizer_text(s));
  for (const fault& f : s.faults) lines.push_back("fault: " + fault_text(f, s.scalar_model));
  lines.push_back(replicas_text(s, run));
  if (run.stopped) lines.push_back(halt_text(*run.stopped));
  lines.push_back(reference_text(run));
  std::string final_line = "final θ:";
  const std::vector<parameter_vector> final_theta = run.final_theta();
  for (std::size_t r = 0; r < final_theta.size(); ++r) {
    if (r == 8 && final_theta.size() > 9) {
      final_line += " … " + std::to_string(final_theta.size() - 8) + " more ranks";
      break;
    }
    final_line += (r ? "; rank " : " rank ") + std::to_string(r) + " " + exact_text(final_theta[r], s.scalar_model, true) +
                  " ≈ " + approximate_text(final_theta[r], s.scalar_model);
  }
  lines.push_back(final_line);
  return lines;
}

file_report check_scenario(std::string_view text, std::string source, const reader_limits& limits) {
  file_report report;
  report.file = source;
  report.kind = "scenario";
  scenario s;
  try {
    s = read_scenario(text, std::move(source), limits);
  } catch (const error& e) {
    judge_rejection(report, e, text, limits);
    return report;
  }
  const simulation run = simulate(s);
  report.details = summarize_simulation(s, run);
  report.expected_error = s.expect_error;
  if (s.expect_error)
    report.failures.push_back("expected rejection with " + std::string(code_name(*s.expect_error)) +
                              ", but the scenario was read without error");
  for (std::string& failure : unmet_expectations(s, run)) report.failures.push_back(std::move(failure));
  if (s.has_expect && report.failures.empty()) report.details.push_back("every expectation holds");
  if (!s.has_expect && report.failures.empty())
    report.details.push_back("no expect: the replicas agree and equal the reference, as claimed by default");
  report.status = report.failures.empty() ? file_status::pass : file_status::fail;
  return report;
}

void print_simulation(std::ostream& out, const std::string& source, const scenario& s, const simulation& run) {
  const bool scalar = s.scalar_model;
  const bool with_momentum = s.optimizer.momentum != 0;
  const bool with_scheduler = s.optimizer.schedule.has_scheduler();
  auto text = [&](const vector& v) { return exact_text(v, scalar, false); };
  const std::size_t label_width = std::max<std::size_t>(9, 5 + std::to_string(s.world_size()).size());
  auto rank_label = [&](std::optional<std::size_t> r) {
    std::string label = r ? "rank " + std::to_string(*r) : std::string("reference");
    label.append(label_width + 2 - label.size(), ' ');
    return label;
  };
  out << "scenario " << source << "\n";
  if (!s.description.empty()) out << "  " << s.description << "\n";
  out << "  " << setup_text(s) << "\n  optimizer: " << optimizer_text(s) << "\n";
  for (const fault& f : s.faults) out << "  fault: " << fault_text(f, scalar) << "\n";

  auto mark_divergence = [&](std::uint64_t step) {
    if (run.first_divergence && run.first_divergence->step == step)
      out << "  ≠ first divergence: " << ranks_phrase(run.first_divergence->ranks)
          << (run.first_divergence->ranks.size() == 1 ? " differs" : " differ") << " from rank 0 in "
          << state_part_name(run.first_divergence->part) << " " << moment_text(*run.first_divergence) << "\n";
  };
  out << "step 0 (start-up)\n";
  for (std::size_t r = 0; r < run.start_up.size(); ++r)
    out << "  " << rank_label(r) << "θ = " << text(run.start_up[r].theta) << "\n";
  out << "  " << rank_label(std::nullopt) << "θ = " << text(run.reference_start.theta) << "\n";
  mark_divergence(0);

  std::vector<replica_state> previous = run.start_up;
  for (const step_record& record : run.steps) {
    out << "step " << record.step << " (N = " << record.valid_tokens << ")\n";
    for (std::size_t r = 0; r < record.ranks.size(); ++r) {
      const rank_step& rs = record.ranks[r];
      out << "  " << rank_label(r) << "n = " << rs.valid_tokens << "  lr = " << to_string(rs.learning_rate);
      if (with_scheduler) out << " (position " << rs.start.scheduler_position << ")";
      if (rs.start.scheduler_position != previous[r].scheduler_position) out << " [scheduler stepped an extra time]";
      if (with_momentum && rs.start.momentum != previous[r].momentum)
        out << "  [momentum restored to " << text(rs.start.momentum) << "]";
      out << "  local ∇ = " << text(rs.local_gradient) << "  reduced ∇ = " << text(rs.reduced_gradient)
          << "  objective ∇ = " << text(rs.objective_gradient);
      if (rs.reduced_gradient != rs.objective_gradient) out << " (differs)";
      if (s.optimizer.clip_value || s.optimizer.clip_norm) {
        out << "  applied ∇ = " << text(rs.applied_gradient);
        if (rs.clip.clipped) out << " (clipped" << (rs.clip.rounded_norm ? ", norm rounded up" : "") << ")";
        if (rs.clip.local_decision) out << " [clipping decided from the local gradient]";
      }
      if (with_momentum) out << "  buffer = " << text(rs.end.momentum);
      out << "  θ = " << text(rs.end.theta) << "\n";
      previous[r] = rs.end;
    }
    const reference_step& ref = record.reference;
    out << "  " << rank_label(std::nullopt) << "N = " << record.valid_tokens << "  lr = " << to_string(ref.learning_rate) << "  ∇ = "
        << text(ref.gradient);
    if (s.optimizer.clip_value || s.optimizer.clip_norm) {
      out << "  applied ∇ = " << text(ref.applied_gradient);
      if (ref.clip.clipped) out << " (clipped" << (ref.clip.rounded_norm ? ", norm rounded up" : "") << ")";
    }
    if (with_momentum) out << "  buffer = " << text(ref.end.momentum);
    out << "  θ = " << text(ref.end.theta) << "\n";
    mark_divergence(record.step);
  }
  if (run.stopped) out << "step " << run.stopped->step << ": " << halt_text(*run.stopped) << "\n";
  out << replicas_text(s, run) << "\n" << reference_text(run) << "\n";
}

void print_simulation_json(std::ostream& out, const std::string& source, const scenario& s, const simulation& run,
                           const std::vector<std::string>& failures) {
  const bool scalar = s.scalar_model;
  std::string text;
  json_writer json(text);
  auto vector_member = [&](std::string_view name, const vector& v) {
    json.key(name);
    write_vector(json, v, scalar);
  };
  auto state = [&](const replica_state& replica) {
    json.begin_object();
    vector_member("theta", replica.theta);
    vector_member("momentum", replica.momentum);
    json.member("scheduler_position", replica.scheduler_position).end_object();
  };
  json.begin_object()
      .member("file", source)
      .member("format", scenario_format_name)
      .member("world_size", std::uint64_t{s.world_size()})
      .key("start_up")
      .begin_array();
  for (const replica_state& start : run.start_up) state(start);
  json.end_array().key("reference_start");
  state(run.reference_start);
  json.key("steps").begin_array(json_layout::lines);
  for (const step_record& record : run.steps) {
    json.begin_object().member("step", record.step).member("valid_tokens", record.valid_tokens).key("ranks").begin_array();
    for (const rank_step& rs : record.ranks) {
      json.begin_object().member("valid_tokens", rs.valid_tokens).key("start");
      state(rs.start);
      json.member("learning_rate", rs.learning_rate);
      vector_member("local_gradient", rs.local_gradient);
      vector_member("reduced_gradient", rs.reduced_gradient);
      vector_member("objective_gradient", rs.objective_gradient);
      vector_member("applied_gradient", rs.applied_gradient);
      json.member("clipped", rs.clip.clipped).member("norm_rounded", rs.clip.rounded_norm).key("end");
      state(rs.end);
      json.end_object();
    }
    const reference_step& ref = record.reference;
    json.end_array().key("reference").begin_object().member("learning_rate", ref.learning_rate);
    vector_member("gradient", ref.gradient);
    vector_member("applied_gradient", ref.applied_gradient);
    json.key("end");
    state(ref.end);
    json.end_object().end_object();
  }
  json.end_array().key("halt");
  if (run.stopped) {
    const halt& h = *run.stopped;
    json.begin_object()
        .member("step", h.step)
        .member("cause", halt_cause_name(h.cause))
        .member("waiting", h.waiting)
        .member("missing", h.missing)
        .member("ranks", h.ranks)
        .end_object();
  } else {
    json.null();
  }
  json.key("first_divergence");
  if (run.first_divergence) {
    const divergence& d = *run.first_divergence;
    json.begin_object()
        .member("step", d.step)
        .member("rank", std::uint64_t{d.rank()})
        .member("state", state_part_name(d.part))
        .member("after_update", d.after_update)
        .member("ranks", d.ranks)
        .end_object();
  } else {
    json.null();
  }
  json.key("first_reference_difference");
  if (run.first_reference_difference)
    json.begin_object()
        .member("step", run.first_reference_difference->step)
        .member("rank", std::uint64_t{run.first_reference_difference->ranks.front()})
        .member("ranks", run.first_reference_difference->ranks)
        .end_object();
  else
    json.null();
  json.member("replicas_agree", run.replicas_agree())
      .member("equals_reference", run.equals_reference())
      .member("failures", failures)
      .end_object();
  out << text << "\n";
}

}  // namespace normcheck
