#include "normcheck/documents/partition_writer.hpp"

#include "normcheck/core/normalization.hpp"
#include "normcheck/io/json_writer.hpp"

#include <algorithm>

namespace normcheck {

namespace {

[[noreturn]] void refuse(error_code code, const std::string& why) {
  throw error(code, "cannot write a normcheck/1 document: " + why);
}

// An exact value as the document writes it (see json_writer::literal), within the reader's digit limit.
void write_literal(json_writer& json, const rational& value, std::string_view what) {
  const std::string text = to_string(value);
  const std::size_t digits =
      static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }));
  if (digits > number_limits{}.max_digits)
    refuse(error_code::number_out_of_range,
           std::string(what) + " has " + std::to_string(digits) + " digits, more than a reader accepts (" +
               std::to_string(number_limits{}.max_digits) + ")");
  json.literal(value);
}

// The mesh on the update, its data and sequence sizes multiplying to the ranks listed.
partition laid_on_the_mesh(partition update, const std::vector<mesh_dim>& mesh) {
  if (mesh.empty()) return update;
  std::uint64_t ranks = 1;
  for (const mesh_dim& dim : mesh)
    if (dim.role != mesh_role::replica) ranks *= dim.size;
  if (ranks != update.ranks.size())
    refuse(error_code::world_size_mismatch, "the mesh's data and sequence sizes multiply to " + std::to_string(ranks) +
                                                ", not to the " + std::to_string(update.ranks.size()) + " ranks");
  update.mesh = mesh;
  return update;
}

void write_tokens(json_writer& json, const std::vector<token>& tokens) {
  json.begin_array();
  for (const token& t : tokens) {
    if (t) write_literal(json, *t, "a token value");
    else json.null();
  }
  json.end_array();
}

// The sequences of microbatch m of a rank, if it declares them.
const std::vector<std::size_t>* lengths_of(const std::vector<std::vector<std::size_t>>* rank, std::size_t m) {
  return rank && m < rank->size() && !(*rank)[m].empty() ? &(*rank)[m] : nullptr;
}

// One microbatch: its tokens, or {"sequences": [...]} when it declares sequences of these lengths.
void write_microbatch(json_writer& json, const std::vector<token>& tokens, const std::vector<std::size_t>* lengths) {
  if (!lengths) return write_tokens(json, tokens);
  json.begin_object().key("sequences").begin_array();
  std::size_t at = 0;
  for (std::size_t length : *lengths) {
    write_tokens(json, std::vector<token>(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                                          tokens.begin() + static_cast<std::ptrdiff_t>(at + length)));
    at += length;
  }
  json.end_array().end_object();
}

// A rank's microbatches: one for a single microbatch, an array of them otherwise.
void write_microbatches(json_writer& json, const std::vector<std::vector<token>>& microbatches,
                        const std::vector<std::vector<std::size_t>>* sequences) {
  if (microbatches.size() == 1) return write_microbatch(json, microbatches.front(), lengths_of(sequences, 0));
  json.begin_array();
  for (std::size_t m = 0; m < microbatches.size(); ++m)
    write_microbatch(json, microbatches[m], lengths_of(sequences, m));
  json.end_array();
}

void write_rank(json_writer& json, const std::vector<std::vector<token>>& microbatches,
                const std::vector<std::vector<token>>* weights, const std::vector<std::vector<std::size_t>>* sequences,
                const std::vector<std::uint64_t>* coords = nullptr) {
  json.begin_object();
  if (coords) json.member("coords", *coords);
  json.key(microbatches.size() == 1 ? "targets" : "microbatches");
  write_microbatches(json, microbatches, sequences);
  if (weights) {
    json.key("weights");
    write_microbatches(json, *weights, sequences);
  }
  json.end_object();
}

// The ranks of the whole mesh, in row-major order: each one's coordinates and the index in `ranks` of the first of
// its replicas. Without a mesh, every rank is its own, without coordinates.
struct listed_rank_of {
  std::vector<std::uint64_t> coords;
  std::size_t first = 0;
};

std::vector<listed_rank_of> mesh_ranks_of(const token_partition& tokens) {
  std::vector<listed_rank_of> out;
  if (tokens.mesh.empty()) {
    for (std::size_t r = 0; r < tokens.ranks.size(); ++r) out.push_back({{}, r});
    return out;
  }
  partition shape;
  shape.mesh = tokens.mesh;
  shape.ranks.resize(tokens.ranks.size());
  std::vector<std::size_t> by_listed(shape.listed_ranks());
  for (std::size_t r = 0; r < shape.ranks.size(); ++r) by_listed[shape.listed_rank(r)] = r;
  for (std::uint64_t listed = 0; listed < shape.listed_ranks(); ++listed) {
    listed_rank_of rank;
    rank.coords.resize(tokens.mesh.size());
    std::uint64_t rest = listed;
    for (std::size_t d = tokens.mesh.size(); d-- > 0;) {
      rank.coords[d] = rest % tokens.mesh[d].size;
      rest /= tokens.mesh[d].size;
    }
    rank.first = by_listed[shape.first_replica(listed)];
    out.push_back(std::move(rank));
  }
  return out;
}

void write_ranks(json_writer& json, const token_partition& tokens,
                 const std::vector<std::vector<std::vector<token>>>& ranks, bool main) {
  const bool weighted = main && !tokens.weights.empty();
  json.key("ranks").begin_array(json_layout::lines);
  for (const listed_rank_of& rank : mesh_ranks_of(tokens))
    write_rank(json, ranks[rank.first], weighted ? &tokens.weights[rank.first] : nullptr,
               !main || tokens.sequences.empty() ? nullptr : &tokens.sequences[rank.first],
               tokens.mesh.empty() ? nullptr : &rank.coords);
  json.end_array();
}

void write_vectors(json_writer& json, std::string_view key, const std::vector<rational>& values, std::size_t ranks) {
  json.key(key).begin_array(json_layout::lines);
  for (std::size_t r = 0; r < ranks; ++r) {
    json.begin_array();
    for (const rational& value : values) write_literal(json, value, "a measured component");
    json.end_array();
  }
  json.end_array();
}

void write_observed(json_writer& json, const token_partition& tokens, const document_options& options) {
  const std::size_t ranks = mesh_ranks_of(tokens).size();
  json.key("observed").begin_object(json_layout::lines);
  write_vectors(json, "per_rank", options.observed->components, ranks);
  write_vectors(json, "witness", options.observed->witness, ranks);
  json.member("dtype", "exact");
  if (!tokens.terms.empty()) {
    if (options.observed_terms.size() != tokens.terms.size())
      refuse(error_code::schema_error, "every term is measured once where the main loss is");
    json.key("terms").begin_array(json_layout::lines);
    for (std::size_t t = 0; t < tokens.terms.size(); ++t) {
      json.begin_object().member("name", tokens.terms[t].name);
      write_vectors(json, "per_rank", options.observed_terms[t].components, ranks);
      write_vectors(json, "witness", options.observed_terms[t].witness, ranks);
      json.end_object();
    }
    json.end_array();
  }
  json.end_object();
}

void write_expect(json_writer& json, const std::vector<expectation>& expect) {
  json.begin_object();
  for (std::size_t i = 0; i < expect.size(); ++i) {
    const std::string_view name = strategy_name(expect[i].name);
    for (std::size_t j = 0; j < i; ++j)
      if (expect[j].name == expect[i].name)
        refuse(error_code::schema_error,
               "the gradient " + std::string(name) + " is expected twice; a document names each once");
    json.key(name);
    if (expect[i].value) write_literal(json, *expect[i].value, "an expected gradient");
    else json.null();
  }
  json.end_object();
}

}  // namespace

partition to_partition(const token_partition& tokens) {
  if (!tokens.mesh.empty()) {
    token_partition flat = tokens;
    flat.mesh.clear();
    return laid_on_the_mesh(to_partition(flat), tokens.mesh);
  }
  const bool weighted = !tokens.weights.empty();
  if (weighted && tokens.objective != objective_kind::token_mean)
    refuse(error_code::schema_error, "weights imply the weighted token mean; no other objective takes them");
  if (!weighted && tokens.objective == objective_kind::weighted_token_mean)
    refuse(error_code::schema_error, "the weighted token mean needs weights beside the tokens");
  auto with_objective = [&](partition p) {
    if (!weighted) p.objective = tokens.objective;
    p.normalizer = tokens.normalizer;
    return p;
  };
  if (tokens.sequences.empty()) {
    if (weighted)
      return with_objective(make_weighted_partition(tokens.ranks, tokens.weights, tokens.theta, tokens.reducer));
    return with_objective(make_accumulated_partition(tokens.ranks, tokens.theta, tokens.reducer));
  }
  if (tokens.sequences.size() != tokens.ranks.size())
    refuse(error_code::schema_error, "sequences must list one entry per rank");
  // Every sequence becomes a microbatch of its own, read as any microbatch is; the sequences of a microbatch are
  // then joined again.
  std::vector<std::vector<std::vector<token>>> split(tokens.ranks.size());
  std::vector<std::vector<std::vector<token>>> split_weights(weighted ? tokens.ranks.size() : 0);
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r) {
    const std::vector<std::vector<std::size_t>>& rank = tokens.sequences[r];
    if (rank.size() != tokens.ranks[r].size() && !rank.empty())
      refuse(error_code::schema_error,
             "rank " + std::to_string(r) + " lists sequences for another number of microbatches");
    for (std::size_t m = 0; m < tokens.ranks[r].size(); ++m) {
      const std::vector<token>& all = tokens.ranks[r][m];
      const std::vector<token>* all_weights =
          weighted && r < tokens.weights.size() && m < tokens.weights[r].size() ? &tokens.weights[r][m] : nullptr;
      const std::vector<std::size_t>* lengths = lengths_of(&rank, m);
      if (!lengths) {
        split[r].push_back(all);
        if (weighted) split_weights[r].push_back(all_weights ? *all_weights : std::vector<token>{});
        continue;
      }
      std::size_t at = 0;
      for (std::size_t length : *lengths) {
        if (length > all.size() - at)
          refuse(error_code::schema_error, "the sequences of rank " + std::to_string(r) + ", microbatch " +
                                               std::to_string(m) + " are longer than its tokens");
        auto slice = [&](const std::vector<token>& from) {
          if (from.size() < at + length) return std::vector<token>{};
          return std::vector<token>(from.begin() + static_cast<std::ptrdiff_t>(at),
                                    from.begin() + static_cast<std::ptrdiff_t>(at + length));
        };
        split[r].push_back(slice(all));
        if (weighted) split_weights[r].push_back(all_weights ? slice(*all_weights) : std::vector<token>{});
        at += length;
      }
      if (at != all.size())
        refuse(error_code::schema_error, "the sequences of rank " + std::to_string(r) + ", microbatch " +
                                             std::to_string(m) + " do not cover its tokens");
    }
  }
  const partition flat = weighted ? make_weighted_partition(split, split_weights, tokens.theta, tokens.reducer)
                                  : make_accumulated_partition(split, tokens.theta, tokens.reducer);
  partition update;
  update.theta = flat.theta;
  update.reducer = flat.reducer;
  update.objective = flat.objective;
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r) {
    rank_stats& rank = update.ranks.emplace_back();
    std::size_t next = 0;
    for (std::size_t m = 0; m < tokens.ranks[r].size(); ++m) {
      const std::vector<std::size_t>* lengths = lengths_of(&tokens.sequences[r], m);
      if (!lengths) {
        rank.microbatches.push_back(flat.ranks[r].microbatches[next++]);
        continue;
      }
      std::vector<group_stats> sequences;
      for (std::size_t i = 0; i < lengths->size(); ++i) sequences.push_back(flat.ranks[r].microbatches[next++]);
      rank.microbatches.push_back(make_sequenced_microbatch(std::move(sequences)));
    }
  }
  return with_objective(std::move(update));
}

partition term_partition(const token_partition& tokens, std::size_t index) {
  if (index >= tokens.terms.size()) refuse(error_code::schema_error, "no such term");
  token_partition term;
  term.ranks = tokens.terms[index].ranks;
  term.theta = tokens.theta;
  term.reducer = tokens.reducer;
  if (term.ranks.size() != tokens.ranks.size())
    refuse(error_code::schema_error, "a term lists one entry per rank of the update");
  partition update = laid_on_the_mesh(to_partition(term), tokens.mesh);
  update.loss_name = tokens.terms[index].name;
  return update;
}

std::string write_document(const token_partition& tokens, const document_options& options) {
  std::string out;
  json_writer json(out);
  write_document(json, tokens, options);
  return out + "\n";
}

void write_document(json_writer& json, const token_partition& tokens, const document_options& options) {
  if (tokens.ranks.empty()) refuse(error_code::schema_error, "an update has at least one rank");
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
    if (tokens.ranks[r].empty())
      refuse(error_code::schema_error,
             "rank " + std::to_string(r) +
                 " has no microbatch; a rank takes part with at least one (an empty one if it holds no token)");
  if (options.expect_error &&
      (*options.expect_error == error_code::usage_error || *options.expect_error == error_code::io_error))
    refuse(error_code::schema_error, "expect_error " + std::string(code_name(*options.expect_error)) +
                                         " is not an error a document can produce");

  json.begin_object(json_layout::lines).member("format", format_name);
  if (!options.description.empty()) json.member("description", options.description);
  // expect_error precedes the ranks: a reader finds it among the members before any syntax error.
  if (options.expect_error) json.member("expect_error", code_name(*options.expect_error));
  const bool weighted = !tokens.weights.empty();
  if (weighted || !tokens.sequences.empty() || tokens.objective != objective_kind::token_mean ||
      tokens.normalizer != 0) {
    // Refuses weights or sequences that do not fit the tokens, and an objective the counts cannot have.
    const partition update = to_partition(tokens);
    if (update.objective != objective_kind::weighted_token_mean && update.objective != objective_kind::token_mean &&
        !objective_units::applies(update, update.objective))
      refuse(error_code::schema_error, "the objective " + std::string(objective_name(update.objective)) +
                                           (update.objective == objective_kind::constant
                                                ? " needs a positive normalizer"
                                                : " needs sequences in every microbatch that holds a valid token"));
    if (update.objective != objective_kind::constant && update.normalizer != 0)
      refuse(error_code::schema_error, "only the constant objective takes a normalizer");
    if (update.objective != objective_kind::token_mean) json.member("objective", objective_name(update.objective));
    if (update.objective == objective_kind::constant) {
      json.key("normalizer");
      write_literal(json, update.normalizer, "the normalizer");
    }
  }
  if (!tokens.mesh.empty()) {
    (void)to_partition(tokens);  // refuses a mesh whose sizes do not fit the ranks
    json.key("mesh").begin_object().key("dims").begin_array();
    for (const mesh_dim& dim : tokens.mesh)
      json.begin_object()
          .member("name", dim.name)
          .member("size", std::uint64_t{dim.size})
          .member("role", mesh_role_name(dim.role))
          .end_object();
    json.end_array().end_object();
  }
  write_ranks(json, tokens, tokens.ranks, true);
  if (!tokens.terms.empty()) {
    json.key("terms").begin_array(json_layout::lines);
    for (const token_partition::term_tokens& term : tokens.terms) {
      if (term.ranks.size() != tokens.ranks.size())
        refuse(error_code::schema_error, "a term lists one entry per rank of the update");
      json.begin_object(json_layout::lines).member("name", term.name);
      write_ranks(json, tokens, term.ranks, false);
      json.end_object();
    }
    json.end_array();
  }
  if (options.declare_world_size) json.member("world_size", std::uint64_t{tokens.ranks.size()});
  json.member("reducer", reducer_name(tokens.reducer)).key("theta");
  write_literal(json, tokens.theta, "theta");
  if (options.recipe_scale)
    json.key("recipe")
        .begin_object()
        .member("scale", *options.recipe_scale)
        .member("reducer", reducer_name(options.recipe_reducer))
        .end_object();
  if (options.observed) write_observed(json, tokens, options);
  if (!options.expect.empty()) {
    json.key("expect");
    write_expect(json, options.expect);
  }
  json.end_object();
}

}  // namespace normcheck
