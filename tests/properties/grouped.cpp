#include "grouped.hpp"

#include "normcheck/io/json_writer.hpp"

#include <stdexcept>

namespace normcheck::properties {

std::uint64_t group_tokens::valid_tokens() const {
  std::uint64_t n = 0;
  for (const token& t : positions) n += t ? 1 : 0;
  return n;
}

std::uint64_t group_tokens::padding() const { return positions.size() - valid_tokens(); }

microbatch_tokens plain_microbatch(std::vector<token> positions) {
  microbatch_tokens m;
  m.groups.push_back(group_tokens{std::move(positions), false, {}});
  return m;
}

group_tokens compact_group(std::uint64_t count, const rational& value, std::uint64_t padding) {
  group_tokens g;
  g.compact = true;
  g.positions.assign(count, token(value));
  g.positions.resize(count + padding);
  return g;
}

namespace {

group_stats summary_of(const group_tokens& group, bool weighted) {
  microbatch_builder builder(weighted);
  for (std::size_t i = 0; i < group.positions.size(); ++i) {
    const token& t = group.positions[i];
    if (!t) {
      builder.add_padding();
    } else if (weighted) {
      builder.add_weighted_token(*t, *group.weights.at(i));
    } else {
      builder.add_token(*t);
    }
  }
  return builder.finish();
}

}  // namespace

partition to_partition(const grouped_update& update) {
  partition p;
  p.reducer = update.reducer;
  p.theta = update.theta;
  p.objective = update.objective;
  p.normalizer = update.normalizer;
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  for (const grouped_rank& rank : update.ranks) {
    rank_stats& stats = p.ranks.emplace_back();
    for (const microbatch_tokens& m : rank) {
      if (!m.sequences) {
        const group_stats only = summary_of(m.groups.at(0), weighted);
        microbatch_stats mb;
        static_cast<group_stats&>(mb) = only;
        stats.microbatches.push_back(std::move(mb));
        continue;
      }
      std::vector<group_stats> sequences;
      for (const group_tokens& g : m.groups) sequences.push_back(summary_of(g, weighted));
      stats.microbatches.push_back(make_sequenced_microbatch(std::move(sequences)));
    }
  }
  return p;
}

std::vector<group_place> group_places(const grouped_update& update) {
  std::vector<group_place> places;
  for (std::size_t r = 0; r < update.ranks.size(); ++r)
    for (std::size_t m = 0; m < update.ranks[r].size(); ++m)
      for (std::size_t g = 0; g < update.ranks[r][m].groups.size(); ++g) places.push_back({r, m, g});
  return places;
}

const group_tokens& group_at(const grouped_update& update, const group_place& place) {
  return update.ranks[place.rank][place.microbatch].groups[place.group];
}

namespace {

void write_values(json_writer& json, const std::vector<token>& values) {
  json.begin_array();
  for (const token& t : values) {
    if (t) json.literal(*t);
    else json.null();
  }
  json.end_array();
}

void write_group(json_writer& json, const group_tokens& group) {
  if (!group.compact) return write_values(json, group.positions);
  const std::uint64_t count = group.valid_tokens();
  json.begin_object().member("count", count);
  if (count > 0) {
    json.key("value").literal(*group.positions.front());
  }
  if (group.padding() > 0) json.member("padding", group.padding());
  json.end_object();
}

void write_microbatch(json_writer& json, const microbatch_tokens& m, bool weights) {
  if (!m.sequences) {
    if (m.groups.size() != 1) throw std::logic_error("a microbatch without sequences is one group");
    return weights ? write_values(json, m.groups.front().weights) : write_group(json, m.groups.front());
  }
  if (m.groups.empty()) throw std::logic_error("a microbatch of sequences holds at least one");
  json.begin_object().key("sequences").begin_array();
  for (const group_tokens& g : m.groups) weights ? write_values(json, g.weights) : write_group(json, g);
  json.end_array().end_object();
}

void write_microbatches(json_writer& json, const grouped_rank& rank, bool weights) {
  if (rank.size() == 1) return write_microbatch(json, rank.front(), weights);
  json.begin_array();
  for (const microbatch_tokens& m : rank) write_microbatch(json, m, weights);
  json.end_array();
}

void write_vectors(json_writer& json, const std::vector<std::vector<rational>>& vectors) {
  json.begin_array();
  for (const std::vector<rational>& v : vectors) {
    json.begin_array();
    for (const rational& x : v) json.literal(x);
    json.end_array();
  }
  json.end_array();
}

}  // namespace

std::string write_grouped_document(const grouped_update& update, const grouped_document_options& options) {
  if (update.ranks.empty()) throw std::logic_error("an update has at least one rank");
  std::string out;
  json_writer json(out);
  json.begin_object(json_layout::lines).member("format", format_name);
  if (!options.description.empty()) json.member("description", options.description);
  if (options.expect_error) json.member("expect_error", code_name(*options.expect_error));
  if (update.objective != objective_kind::token_mean) json.member("objective", objective_name(update.objective));
  if (update.objective == objective_kind::constant) json.key("normalizer").literal(update.normalizer);
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  json.key("ranks").begin_array(json_layout::lines);
  for (const grouped_rank& rank : update.ranks) {
    if (rank.empty()) throw std::logic_error("a rank holds at least one microbatch");
    json.begin_object().key(rank.size() == 1 ? "targets" : "microbatches");
    write_microbatches(json, rank, false);
    if (weighted) {
      json.key("weights");
      write_microbatches(json, rank, true);
    }
    json.end_object();
  }
  json.end_array();
  json.member("world_size", std::uint64_t{update.ranks.size()});
  json.member("reducer", reducer_name(update.reducer)).key("theta").literal(update.theta);
  if (!options.expect.empty()) {
    json.key("expect").begin_object();
    for (const expectation& e : options.expect) {
      json.key(strategy_name(e.name));
      if (e.value) json.literal(*e.value);
      else json.null();
    }
    json.end_object();
  }
  if (options.observed) {
    const observation& o = *options.observed;
    json.key("observed").begin_object();
    if (o.gradient) {
      json.key("gradient");
      if (*o.gradient) json.literal(**o.gradient);
      else json.string("nan");
    } else {
      json.key("per_rank");
      write_vectors(json, o.per_rank);
      if (!o.witness.empty()) {
        json.key("witness");
        write_vectors(json, o.witness);
      }
    }
    json.member("dtype", o.dtype).end_object();
  }
  if (options.expect_gate)
    json.key("expect_gate")
        .begin_object()
        .member("verdict", options.expect_gate->verdict)
        .member("explanations", options.expect_gate->explanations)
        .end_object();
  json.end_object();
  return out + "\n";
}

namespace {

void show_positions(const std::vector<token>& positions, std::ostream& os) {
  os << "[";
  for (std::size_t i = 0; i < positions.size(); ++i)
    os << (i ? ", " : "") << (positions[i] ? to_string(*positions[i]) : std::string("null"));
  os << "]";
}

void show_group(const group_tokens& g, std::ostream& os) {
  if (g.compact) {
    os << g.valid_tokens() << "×" << (g.valid_tokens() ? to_string(*g.positions.front()) : std::string("-")) << "+"
       << g.padding() << "p";
  } else {
    show_positions(g.positions, os);
  }
  if (!g.weights.empty()) {
    os << " w";
    show_positions(g.weights, os);
  }
}

}  // namespace

void showValue(const grouped_update& update, std::ostream& os) {
  os << objective_name(update.objective);
  if (update.objective == objective_kind::constant) os << " C=" << to_string(update.normalizer);
  os << " " << reducer_name(update.reducer) << " θ=" << to_string(update.theta) << " [";
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    os << (r ? " || " : "");
    for (std::size_t m = 0; m < update.ranks[r].size(); ++m) {
      os << (m ? "; " : "");
      const microbatch_tokens& mb = update.ranks[r][m];
      if (!mb.sequences) {
        show_group(mb.groups.front(), os);
        continue;
      }
      os << "{";
      for (std::size_t g = 0; g < mb.groups.size(); ++g) {
        os << (g ? " | " : "");
        show_group(mb.groups[g], os);
      }
      os << "}";
    }
  }
  os << "]";
}

}  // namespace normcheck::properties
