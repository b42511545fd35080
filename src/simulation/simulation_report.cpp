#include "normcheck/simulation/simulation_report.hpp"

#include "normcheck/core/utf8.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/text.hpp"

namespace normcheck {

namespace {

using vector = parameter_vector;


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
      case state_part::theta: return vector_text(state_at(r).theta, s.scalar_model, true);
      case state_part::momentum: return vector_text(state_at(r).momentum, s.scalar_model, true);
      case state_part::scheduler: {
        const std::uint64_t position = state_at(r).scheduler_position;
        return "position " + std::to_string(position) + ", lr " + to_string(s.optimizer.schedule.rate(position));
      }
      case state_part::gradient: {
        const rank_step& rs = run.steps[d.step - 1].ranks[r];
        std::string text = vector_text(rs.applied_gradient, s.scalar_model, true);
        if (rs.clip.local_decision) text += ", clipping decided locally";
        return text + (rs.clip.clipped ? ", clipped" : ", not clipped");
      }
    }
    return "";
  };
  return "rank 0: " + show(0) + "; rank " + std::to_string(other) + ": " + show(other);
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
    case fault_kind::initial_parameters: return rank + " starts from θ = " + vector_text(f.value, scalar, true);
    case fault_kind::optimizer_state:
      return rank + " restores momentum " + vector_text(f.value, scalar, true) + " before step " +
             std::to_string(f.step);
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
  std::string model = s.scalar_model
                          ? "scalar θ, loss ½(θ − y)² per token"
                          : "θ with " + std::to_string(s.dimension) + " parameters, loss ½(θ·x − y)² per token";
  return "W = " + std::to_string(s.world_size()) + ", " + std::to_string(s.steps.size()) +
         (s.steps.size() == 1 ? " step, " : " steps, ") + model + "; each rank backpropagates " +
         std::string(strategy_name(s.loss_scale)) + " (" + std::string(strategy_formula(s.loss_scale)) +
         "), reducer " + std::string(reducer_name(s.reducer)) + ", initial sync " + (s.initial_sync ? "on" : "off");
}






}  // namespace

std::string vector_text(const parameter_vector& v, bool scalar, bool shortened) {
  auto one = [&](const rational& x) { return shortened ? shorten(to_string(x)) : to_string(x); };
  if (scalar) return one(v.front());
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + one(v[i]);
  return out + "]";
}

std::string halt_text(const halt& h) {
  if (h.cause == halt_cause::skipped_collective)
    return "the run hangs at step " + std::to_string(h.step) + ": " + ranks_phrase(h.missing) +
           " did not call the gradient all-reduce; " + ranks_phrase(h.waiting) + " wait in it";
  return "the run stops at step " + std::to_string(h.step) + ": the local loss of " + ranks_phrase(h.ranks) +
         " is 0/0 (a mean over no valid token; NaN in floating point), so the update is undefined";
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
  if (run.stopped)
    return "replicas: identical through step " + std::to_string(run.steps.size()) + ", where the run stops";
  return "replicas: identical at every step";
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
    final_line += (r ? "; rank " : " rank ") + std::to_string(r) + " " +
                  vector_text(final_theta[r], s.scalar_model, true) + " ≈ " +
                  approximate_text(final_theta[r], s.scalar_model);
  }
  lines.push_back(final_line);
  return lines;
}

void print_simulation(std::ostream& out, const std::string& source, const scenario& s, const simulation& run) {
  const bool scalar = s.scalar_model;
  const bool with_momentum = s.optimizer.momentum != 0;
  const bool with_scheduler = s.optimizer.schedule.has_scheduler();
  auto text = [&](const vector& v) { return vector_text(v, scalar, false); };
  const std::size_t label_width = std::max<std::size_t>(9, 5 + std::to_string(s.world_size()).size());
  auto rank_label = [&](std::optional<std::size_t> r) {
    std::string label = r ? "rank " + std::to_string(*r) : std::string("reference");
    label.append(label_width + 2 - label.size(), ' ');
    return label;
  };
  out << "scenario " << escaped_name(source) << "\n";
  if (!s.description.empty()) out << "  " << printable(s.description) << "\n";
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
    out << "  " << rank_label(std::nullopt) << "N = " << record.valid_tokens
        << "  lr = " << to_string(ref.learning_rate) << "  ∇ = " << text(ref.gradient);
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
      .member("file", json_name{source})
      .member("format", scenario_format_name)
      .member("world_size", std::uint64_t{s.world_size()})
      .key("start_up")
      .begin_array();
  for (const replica_state& start : run.start_up) state(start);
  json.end_array().key("reference_start");
  state(run.reference_start);
  json.key("steps").begin_array(json_layout::lines);
  for (const step_record& record : run.steps) {
    json.begin_object()
        .member("step", record.step)
        .member("valid_tokens", record.valid_tokens)
        .key("ranks")
        .begin_array();
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
