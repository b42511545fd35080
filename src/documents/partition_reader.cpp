#include "normcheck/documents/partition_reader.hpp"

#include "normcheck/core/counts.hpp"
#include "normcheck/core/normalization.hpp"
#include "normcheck/core/utf8.hpp"

#include "token_pool.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <tuple>


namespace normcheck {

namespace {

// Thrown when a parallel read meets what only the sequential reader reads.
struct read_sequentially {};

// Whether `word` occurs in `text`, found by its first letter (no number or literal holds a 'w'), not by a
// quote, which a file of hexadecimal strings holds every dozen bytes.
bool mentions(std::string_view text, std::string_view word) {
  for (std::size_t at = text.find(word.front()); at != std::string_view::npos; at = text.find(word.front(), at + 1))
    if (text.substr(at, word.size()) == word) return true;
  return false;
}

constexpr std::string_view core_keys =
    "format, ranks, world_size, mesh, reducer, theta, objective, normalizer, accumulation_steps, terms, description, "
    "expect, expect_error";

// Half-open positions [start, end) of a whole sequence.
struct position_range {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
};

// A sequence slice as read: where it stands, its sequence's ID and the positions it holds (none given: empty).
struct sequence_slice {
  std::size_t rank = 0;
  std::size_t microbatch = 0;
  std::size_t group = 0;  // its place among the microbatch's sequences
  std::string id;
  std::vector<position_range> positions;
  std::uint64_t offset = 0;
  bool named = false;  // "sequence" given

  std::uint64_t covered() const {
    std::uint64_t total = 0;
    for (const position_range& range : positions) total += range.end - range.start;
    return total;
  }
};

// Reads one document; each member's reader validates its value where it stands.
class document_reader {
public:
  document_reader(std::string_view text, std::string source, const reader_limits& limits,
                  const section_registry& registry, unsigned jobs)
      : json_(text, std::move(source), limits), text_(text), budget_(limits) {
    json_.count_against(&budget_);
    for (const section_factory& make : registry) file_.sections.push_back(make());
    // Large unweighted documents read their large token arrays on `jobs` workers (weights pair with
    // their tokens on the reading thread). The workers start first, so that they are running by the time
    // the scan for weights has passed over the text.
    if (jobs > 1 && text.size() >= parallel_document_bytes) {
      pool_ = std::make_unique<detail::token_pool>(text, limits.numbers, jobs);
      if (mentions(text, "weights\"")) pool_.reset();
    }
  }

  partition_file read() {
    if (json_.peek() != json_kind::object) json_.fail_type("a normcheck/1 document", "a JSON object");
    json_.begin_object();
    std::string_view key;
    bool saw_format = false;
    bool saw_ranks = false;
    std::uint64_t ranks_offset = 0;
    std::uint64_t world_size_offset = 0;
    while (json_.next_member(key)) {
      if (key == "format") {
        json_.format(format_name);
        saw_format = true;
      } else if (key == "ranks") {
        ranks_offset = json_.value_offset();
        read_ranks();
        saw_ranks = true;
      } else if (key == "world_size") {
        world_size_offset = json_.value_offset();
        // Above 2^64 − 1 it cannot be the number of ranks listed: world_size_mismatch, like any other W.
        file_.declared_world_size =
            json_.integer("world_size", 1, std::numeric_limits<std::uint64_t>::max(), error_code::world_size_mismatch);
      } else if (key == "mesh") {
        mesh_offset_ = json_.value_offset();
        read_mesh();
      } else if (key == "reducer") {
        file_.update.reducer = json_.named("reducer", reducer_from_name, reducer_alternatives());
      } else if (key == "theta") {
        const std::uint64_t theta_offset = json_.value_offset();
        file_.update.theta = json_.exact("theta");
        budget_.note_kept(file_.update.theta, json_, theta_offset);
      } else if (key == "objective") {
        read_objective();
      } else if (key == "normalizer") {
        read_normalizer();
      } else if (key == "accumulation_steps") {
        accumulation_offset_ = json_.value_offset();
        file_.update.accumulation_steps =
            json_.integer("accumulation_steps", 1, std::numeric_limits<std::uint64_t>::max(), error_code::schema_error);
      } else if (key == "terms") {
        read_terms();
      } else if (key == "description") {
        file_.description = std::string(json_.text("description"));
      } else if (key == "expect") {
        read_expect();
      } else if (key == "expect_error") {
        file_.expect_error = json_.expected_error();
      } else if (section* owner = owner_of(key, &section::keys)) {
        owner->read(key, json_);
      } else {
        json_.fail_unknown_key(key, "(a normcheck/1 document has " + known_keys(&section::keys, core_keys) + ")");
      }
    }
    collect_pooled();
    json_.finish();
    if (!saw_format)
      json_.fail(error_code::schema_error,
                 "missing key \"format\": a partition file declares \"format\": \"normcheck/1\"", 0);
    if (!saw_ranks)
      json_.fail(error_code::schema_error, "missing key \"ranks\": the ranks of the update, one object each", 0);
    const std::uint64_t ranks = file_.update.world_size();
    if (file_.declared_world_size && *file_.declared_world_size != ranks)
      json_.fail(error_code::world_size_mismatch,
                 "world_size is " + std::to_string(*file_.declared_world_size) + " but the file lists " +
                     std::to_string(ranks) + " ranks: W must be the size of the group in this reduction",
                 world_size_offset);
    settle_loss();
    check_accumulation();
    settle_terms();
    for (const std::shared_ptr<section>& part : file_.sections) part->settle(file_, json_);
    if (file_.update.valid_tokens() == 0)
      json_.fail(error_code::no_valid_tokens,
                 "no rank holds a valid token (N = 0): the token-mean objective is undefined and the update "
                 "must be rejected by a policy all ranks share, such as skipping it",
                 ranks_offset);
    if (file_.update.objective == objective_kind::weighted_token_mean && file_.update.mass() == 0)
      json_.fail(error_code::no_valid_tokens,
                 "every valid token weighs 0 (M = 0): the weighted token-mean objective is undefined and the "
                 "update must be rejected by a policy all ranks share, such as skipping it",
                 ranks_offset);
    return std::move(file_);
  }

private:
  // What every loss's tokens must hold once the document is read, the main loss's and each term's alike
  // (a term is swapped in first): the mesh and its coordinates, the slices and their join, the replicas kept
  // once, the weights and the objective's own keys.
  void settle_loss() {
    check_mesh();
    check_slices();
    require_slice_ids();
    collapse_replicas();
    join_slices();
    check_weighting();
    check_objective();
  }

  // `objective`: one of the objectives' names, its place kept for the checks that read it.
  void read_objective() {
    objective_offset_ = json_.value_offset();
    file_.update.objective = json_.named("objective", objective_from_name, objective_alternatives());
  }

  // `normalizer`: C, a positive exact number.
  void read_normalizer() {
    normalizer_offset_ = json_.value_offset();
    file_.update.normalizer = json_.exact("normalizer");
    if (file_.update.normalizer <= 0)
      json_.fail(error_code::schema_error,
                 "normalizer must be a positive exact number (the constant C the loss sum is divided by), found " +
                     to_string(file_.update.normalizer),
                 *normalizer_offset_);
    budget_.note_kept(file_.update.normalizer, json_, *normalizer_offset_);
  }

  // `accumulation_steps`, the nominal window: no rank accumulates more microbatches than it.
  void check_accumulation() {
    const partition& update = file_.update;
    if (update.accumulation_steps == 0) return;
    for (std::size_t r = 0; r < update.ranks.size(); ++r)
      if (update.ranks[r].microbatches.size() > update.accumulation_steps)
        json_.fail(error_code::schema_error,
                   "rank " + std::to_string(update.listed_rank(r)) + " accumulates " +
                       std::to_string(update.ranks[r].microbatches.size()) +
                       " microbatches, but accumulation_steps declares windows of " +
                       std::to_string(update.accumulation_steps) +
                       ": a window holds at most the nominal number of microbatches (fewer in a short last one)",
                   *accumulation_offset_);
  }

  // What the reader keeps of one loss while the document is read: its update and where its parts stand. The
  // main loss's lives in the members below; an auxiliary term's is swapped in, so that the term is read and
  // checked by the same code as the main loss.
  struct loss_state {
    partition update;
    std::vector<std::pair<std::size_t, std::uint64_t>> coords;
    std::map<std::size_t, std::vector<std::uint64_t>> given_coords;
    std::vector<sequence_slice> slices;
    std::vector<std::uint64_t> rank_offsets;
    std::optional<std::uint64_t> objective_offset;
    std::optional<std::uint64_t> normalizer_offset;
    std::optional<std::uint64_t> first_weights_offset;
    std::optional<std::uint64_t> first_unweighted_rank;
  };

  void swap_loss(loss_state& other) {
    std::swap(file_.update, other.update);
    std::swap(coords_, other.coords);
    std::swap(given_coords_, other.given_coords);
    std::swap(slices_, other.slices);
    std::swap(rank_offsets_, other.rank_offsets);
    std::swap(objective_offset_, other.objective_offset);
    std::swap(normalizer_offset_, other.normalizer_offset);
    std::swap(first_weights_offset, other.first_weights_offset);
    std::swap(first_unweighted_rank, other.first_unweighted_rank);
  }

  // One auxiliary term as read, and where it stands.
  struct term_state {
    loss_state loss;
    std::uint64_t offset = 0;
    std::uint64_t ranks_offset = 0;
  };

  // `terms`: an array of auxiliary terms, each {"name", "weight", "objective", "normalizer", "ranks"}.
  void read_terms() {
    if (json_.peek() != json_kind::array)
      json_.fail_type("terms", "an array of auxiliary terms, {\"name\": \"mtp\", \"ranks\": [...]} each");
    json_.begin_array();
    while (json_.next_element()) read_term();
  }

  void read_term() {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("each term", "an object {\"name\": \"mtp\", \"weight\": w, \"ranks\": [...]}");
    term_state term;
    term.offset = offset;
    // The pool's workers fill the main loss's ranks: a term's token arrays are read on this thread.
    std::unique_ptr<detail::token_pool> pool = std::move(pool_);
    swap_loss(term.loss);
    json_.begin_object();
    std::string_view key;
    bool saw_name = false;
    bool saw_ranks = false;
    while (json_.next_member(key)) {
      if (key == "name") {
        const std::uint64_t name_offset = json_.value_offset();
        file_.update.loss_name = std::string(json_.text("name"));
        const std::string& name = file_.update.loss_name;
        if (!is_identifier(name) || name == "main")
          json_.fail(error_code::schema_error,
                     "a term's name is an identifier of lower-case letters, digits and _ that starts with a letter, "
                     "other than \"main\" (the main loss's), found \"" +
                         printable(name) + "\"",
                     name_offset);
        for (const term_state& other : terms_)
          if (other.loss.update.loss_name == name)
            json_.fail(error_code::schema_error, "two terms are named \"" + name + "\": name each term once",
                       name_offset);
        saw_name = true;
      } else if (key == "weight") {
        const std::uint64_t weight_offset = json_.value_offset();
        file_.update.loss_weight = json_.exact("weight");
        if (file_.update.loss_weight == 0)
          json_.fail(error_code::schema_error,
                     "a term's weight is an exact number other than 0: a term of weight 0 adds nothing to the "
                     "objective's gradient, so there is nothing to judge (leave the term out)",
                     weight_offset);
        budget_.note_kept(file_.update.loss_weight, json_, weight_offset);
      } else if (key == "objective") {
        read_objective();
      } else if (key == "normalizer") {
        read_normalizer();
      } else if (key == "ranks") {
        term.ranks_offset = json_.value_offset();
        read_ranks();
        saw_ranks = true;
      } else {
        json_.fail_unknown_key(key, "in a term (it has name, weight, objective, normalizer and ranks)");
      }
    }
    swap_loss(term.loss);
    pool_ = std::move(pool);
    if (!saw_name)
      json_.fail(error_code::schema_error, "a term needs \"name\": what the gate calls it (\"mtp\")", offset);
    if (!saw_ranks)
      json_.fail(error_code::schema_error,
                 "a term needs \"ranks\": its own tokens on each rank of the update, shaped like the main loss's",
                 offset);
    terms_.push_back(std::move(term));
  }

  // Each term against the update, once the whole document is read: the main loss's ranks, mesh, reducer and θ,
  // its microbatches aligned with the main loss's, then the same checks as the main loss's and a valid token.
  // Every loss then learns the others' counts (`link_losses`).
  void settle_terms() {
    if (terms_.empty()) return;
    const partition& main = file_.update;
    for (term_state& term : terms_) {
      partition& update = term.loss.update;
      const std::string name = "term " + update.loss_name;
      if (update.ranks.size() != main.listed_ranks())
        json_.fail(error_code::schema_error,
                   name + " lists " + std::to_string(update.ranks.size()) + " ranks, but the update has " +
                       std::to_string(main.listed_ranks()) +
                       ": a term's tokens are on the main loss's ranks, one object per rank in the same order",
                   term.ranks_offset);
      update.mesh = main.mesh;
      update.accumulation_steps = main.accumulation_steps;
      update.reducer = main.reducer;
      update.theta = main.theta;
      swap_loss(term.loss);
      settle_loss();
      swap_loss(term.loss);
      for (std::size_t r = 0; r < update.ranks.size(); ++r) {
        const std::size_t own = update.ranks[r].microbatches.size();
        const std::size_t main_own = main.ranks[r].microbatches.size();
        if (own != main_own)
          json_.fail(error_code::schema_error,
                     name + " gives rank " + std::to_string(main.listed_rank(r)) + " " + std::to_string(own) +
                         " microbatches where the main loss has " + std::to_string(main_own) +
                         ": a term's microbatches are the main loss's, in the same order ([] where it has no token "
                         "there)",
                     term.loss.rank_offsets[main.listed_rank(r)]);
      }
      const bool empty = update.valid_tokens() == 0 ||
                         (update.objective == objective_kind::weighted_token_mean && update.mass() == 0) ||
                         (counts_sequences(update.objective) && update.sequence_count() == 0);
      if (empty)
        json_.fail(error_code::no_valid_tokens,
                   name +
                       " holds no valid token (or no weight, or no sequence with a token): its objective is "
                       "undefined, so there is nothing to weigh it by",
                   term.ranks_offset);
    }
    for (term_state& term : terms_) {
      std::string term_name = term.loss.update.loss_name;
      file_.terms.push_back({std::move(term_name), std::move(term.loss.update)});
    }
    link_losses(file_.update, file_.terms);
  }

  // `mesh`: {"dims": [{"name", "size", "role"}, ...]}, non-empty, names distinct.
  void read_mesh() {
    if (json_.peek() != json_kind::object) json_.fail_type("mesh", "an object {\"dims\": [...]}");
    json_.begin_object();
    std::string_view key;
    bool saw_dims = false;
    while (json_.next_member(key)) {
      if (key != "dims") json_.fail_unknown_key(key, "in mesh (a mesh has \"dims\")");
      saw_dims = true;
      const std::uint64_t dims_offset = json_.value_offset();
      if (json_.peek() != json_kind::array) json_.fail_type("mesh.dims", "a non-empty array of dimensions");
      json_.begin_array();
      while (json_.next_element()) file_.update.mesh.push_back(read_mesh_dim());
      if (file_.update.mesh.empty())
        json_.fail(error_code::schema_error, "mesh.dims must not be empty: name every dimension of the mesh",
                   dims_offset);
    }
    if (!saw_dims) json_.fail(error_code::schema_error, "mesh needs \"dims\": the mesh's dimensions", *mesh_offset_);
  }

  mesh_dim read_mesh_dim() {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("each mesh dimension", "an object {\"name\": \"dp\", \"size\": 2, \"role\": \"data\"}");
    json_.begin_object();
    mesh_dim dim;
    bool saw_name = false;
    bool saw_size = false;
    bool saw_role = false;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "name") {
        const std::uint64_t name_offset = json_.value_offset();
        dim.name = std::string(json_.text("name"));
        if (!is_identifier(dim.name))
          json_.fail(error_code::schema_error,
                     "a mesh dimension's name is an identifier of lower-case letters, digits and _ that starts with a "
                     "letter, found \"" + dim.name + "\"",
                     name_offset);
        for (const mesh_dim& other : file_.update.mesh)
          if (other.name == dim.name)
            json_.fail(error_code::schema_error, "mesh dimension \"" + dim.name + "\" is named twice", name_offset);
        saw_name = true;
      } else if (key == "size") {
        dim.size = json_.integer("size", 1, std::numeric_limits<std::uint64_t>::max(), error_code::schema_error);
        saw_size = true;
      } else if (key == "role") {
        dim.role = json_.named("role", mesh_role_from_name, mesh_role_alternatives());
        saw_role = true;
      } else {
        json_.fail_unknown_key(key, "in a mesh dimension (it has \"name\", \"size\" and \"role\")");
      }
    }
    if (!saw_name || !saw_size || !saw_role)
      json_.fail(error_code::schema_error, "a mesh dimension needs \"name\", \"size\" and \"role\"", offset);
    return dim;
  }

  // The mesh against the ranks: the sizes' product is W, every `coords` the rank's row-major coordinates.
  void check_mesh() {
    if (file_.update.mesh.empty()) {
      if (!coords_.empty())
        json_.fail(error_code::schema_error, "a rank gives \"coords\" but the file declares no mesh",
                   coords_.front().second);
      return;
    }
    rational product = 1;
    for (const mesh_dim& dim : file_.update.mesh) product *= rational(dim.size);
    const std::uint64_t ranks = file_.update.world_size();
    if (product != rational(ranks))
      json_.fail(error_code::world_size_mismatch,
                 "the mesh's sizes multiply to " + to_string(product) + " but the file lists " + std::to_string(ranks) +
                     " ranks: the mesh must hold every rank once",
                 *mesh_offset_);
    for (const auto& [rank, at] : coords_) {
      const std::vector<std::uint64_t>& given = given_coords_[rank];
      std::uint64_t rest = rank;
      std::vector<std::uint64_t> expected(file_.update.mesh.size());
      for (std::size_t d = file_.update.mesh.size(); d-- > 0;) {
        expected[d] = rest % file_.update.mesh[d].size;
        rest /= file_.update.mesh[d].size;
      }
      if (given != expected)
        json_.fail(error_code::schema_error,
                   "rank " + std::to_string(rank) + "'s coords are not its row-major coordinates in the mesh (" +
                       spelled_coords(expected) + "): ranks are listed in the order init_device_mesh numbers them",
                   at);
    }
  }

  static std::string spelled_coords(const std::vector<std::uint64_t>& coords) {
    std::string out = "[";
    for (std::size_t i = 0; i < coords.size(); ++i) out += (i ? ", " : "") + std::to_string(coords[i]);
    return out + "]";
  }

  // A rank's `coords`: an array of non-negative integers, checked against the mesh once it is read.
  void read_coords() {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::array) json_.fail_type("coords", "an array of the rank's mesh coordinates");
    json_.begin_array();
    std::vector<std::uint64_t> coords;
    while (json_.next_element())
      coords.push_back(
          json_.integer("each coordinate", 0, std::numeric_limits<std::uint64_t>::max(), error_code::schema_error));
    const std::size_t rank = file_.update.ranks.size();
    coords_.emplace_back(rank, offset);
    given_coords_[rank] = std::move(coords);
  }

  void read_ranks() {
    if (json_.peek() != json_kind::array) json_.fail_type("ranks", "an array with one object per rank");
    const std::uint64_t offset = json_.value_offset();
    json_.begin_array();
    while (json_.next_element()) {
      rank_offsets_.push_back(json_.value_offset());
      file_.update.ranks.push_back(read_rank());
    }
    if (file_.update.ranks.empty())
      json_.fail(error_code::schema_error, "ranks must not be empty: list every rank of the reduction", offset);
  }

  rank_stats read_rank() {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object)
      json_.fail_type("each rank", "an object with \"targets\" or \"microbatches\", e.g. {\"targets\": [0, 2]}");
    json_.begin_object();
    rank_stats rank;
    bool saw_targets = false;
    bool saw_microbatches = false;
    std::optional<std::uint64_t> tokens_offset;
    std::optional<std::uint64_t> weights_offset;
    std::string_view key;
    while (json_.next_member(key)) {
      if (key == "targets") {
        saw_targets = true;
        tokens_offset = json_.value_offset();
        rank.microbatches.push_back(read_microbatch("targets", 0));
        note_pooled(rank);
      } else if (key == "microbatches") {
        saw_microbatches = true;
        const std::uint64_t list_offset = json_.value_offset();
        tokens_offset = list_offset;
        if (json_.peek() != json_kind::array)
          json_.fail_type("microbatches", "a non-empty array of token arrays");
        json_.begin_array();
        while (json_.next_element()) {
          rank.microbatches.push_back(read_microbatch("each microbatch", rank.microbatches.size()));
          note_pooled(rank);
        }
        if (rank.microbatches.empty())
          json_.fail(error_code::schema_error,
                     "microbatches must not be empty: a rank takes part with at least one microbatch "
                     "(an empty one, [], if it holds no token)",
                     list_offset);
      } else if (key == "coords") {
        read_coords();
      } else if (key == "weights") {
        // Read once the rank's tokens are known: the two are paired element by element.
        weights_offset = json_.value_offset();
        json_.skip_value();
      } else {
        json_.fail_unknown_key(key, "in a rank (a rank has \"targets\" or \"microbatches\", \"weights\" for a weighted "
                                    "objective, and \"coords\" in a mesh)");
      }
    }
    if (saw_targets == saw_microbatches)
      json_.fail(error_code::schema_error,
                 saw_targets ? "a rank has both \"targets\" and \"microbatches\": give exactly one"
                             : "a rank needs \"targets\" (one microbatch) or \"microbatches\" (several)",
                 offset);
    if (weights_offset) {
      // Weights pair with their tokens here, on this thread (a key spelled with escapes escaped the check
      // for weights before the parallel read).
      if (!pooled_.empty() && pooled_.back().rank == file_.update.ranks.size()) throw read_sequentially{};
      if (!first_weights_offset) first_weights_offset = weights_offset;
      read_weights(rank, *tokens_offset, *weights_offset, saw_microbatches);
      for (const microbatch_stats& m : rank.microbatches)
        if (m.weighted()) {
          budget_.note_kept(m.mass(), json_, *weights_offset);
          budget_.note_kept(m.weighted_target_sum(), json_, *weights_offset);
          budget_.note_kept(m.weighted_target_abs_sum(), json_, *weights_offset);
        }
    } else if (!first_unweighted_rank) {
      first_unweighted_rank = offset;
    }
    return rank;
  }

  // Pairs a rank's weights with its tokens: the same shape, a non-negative exact weight beside each valid
  // token and null beside each padded position. Weighted tokens take the general literal path.
  void read_weights(rank_stats& rank, std::uint64_t tokens_offset, std::uint64_t weights_offset, bool accumulated) {
    field_reader tokens = json_.at(tokens_offset);
    field_reader weights = json_.at(weights_offset);
    if (!accumulated) {  // one microbatch: a token array, or sequences (the weights shaped like them)
      if (tokens.peek() != json_kind::object && weights.peek() != json_kind::array)
        weights.fail_type("weights", "an array of weights");
      rank.microbatches.front() = read_weighted_microbatch(tokens, weights);
      return;
    }
    if (weights.peek() != json_kind::array)
      weights.fail_type("weights", "an array of weight arrays, one per microbatch");
    tokens.begin_array();
    weights.begin_array();
    for (microbatch_stats& microbatch : rank.microbatches) {
      tokens.next_element();
      if (!weights.next_element())
        weights.fail(error_code::schema_error,
                     "weights lists fewer microbatches than the rank's " + std::to_string(rank.microbatches.size()) +
                         ": give one weight array per microbatch",
                     weights_offset);
      microbatch = read_weighted_microbatch(tokens, weights);
    }
    if (weights.next_element())
      weights.fail(error_code::schema_error,
                   "weights lists more microbatches than the rank's " + std::to_string(rank.microbatches.size()) +
                       ": give one weight array per microbatch",
                   weights.value_offset());
  }

  // A weighted microbatch: a token array beside a weight array, or sequences beside sequences of weights.
  microbatch_stats read_weighted_microbatch(field_reader& tokens, field_reader& weights) {
    if (tokens.peek() != json_kind::object) {
      if (weights.peek() != json_kind::array) weights.fail_type("each microbatch's weights", "an array of weights");
      return read_weighted_tokens(tokens, weights);
    }
    // The tokens were read once already, so their object holds "sequences" or a compact group.
    const std::uint64_t tokens_offset = tokens.value_offset();
    tokens.begin_object();
    std::string_view key;
    tokens.next_member(key);
    if (key != "sequences")
      tokens.fail(error_code::schema_error,
                  "a compact group {\"count\", \"value\"} holds unweighted tokens; under weighted_token_mean list "
                  "the tokens and give a weight beside each",
                  tokens_offset);
    if (weights.peek() != json_kind::object)
      weights.fail_type("the weights beside sequences", "{\"sequences\": [[w, …], …]}, shaped like the tokens");
    const std::uint64_t weights_offset = weights.value_offset();
    weights.begin_object();
    std::string_view weights_key;
    if (!weights.next_member(weights_key) || weights_key != "sequences")
      weights.fail(error_code::schema_error, "the weights beside sequences are {\"sequences\": [[w, …], …]}",
                   weights_offset);
    if (weights.peek() != json_kind::array)
      weights.fail_type("weights' sequences", "an array of weight arrays, one per sequence");
    tokens.begin_array();
    weights.begin_array();
    std::vector<group_stats> sequences;
    while (tokens.next_element()) {
      if (!weights.next_element())
        weights.fail(error_code::schema_error, "weights lists fewer sequences than the microbatch beside it",
                     weights_offset);
      if (tokens.peek() != json_kind::array)
        tokens.fail(error_code::schema_error,
                    names_a_slice(tokens)
                        ? "weights beside a sequence slice are not read by this version: under weighted_token_mean "
                          "list each rank's tokens as token arrays with their weights (the weighted token mean "
                          "needs no join: each token counts once on whichever rank holds it)"
                        : "a compact group {\"count\", \"value\"} holds unweighted tokens; under weighted_token_mean "
                          "list the tokens and give a weight beside each",
                    tokens.value_offset());
      if (weights.peek() != json_kind::array) weights.fail_type("each sequence's weights", "an array of weights");
      sequences.push_back(read_weighted_tokens(tokens, weights));
    }
    if (weights.next_element())
      weights.fail(error_code::schema_error, "weights lists more sequences than the microbatch beside it",
                   weights.value_offset());
    if (weights.next_member(weights_key))
      weights.fail_unknown_key(weights_key, "in the weights beside sequences (they have only \"sequences\")");
    // The tokens' object was checked when it was first read: only its closing brace is left.
    if (tokens.next_member(key)) tokens.fail_unknown_key(key, "in a microbatch of sequences");
    return make_sequenced_microbatch(std::move(sequences));
  }

  // Whether the object at `tokens`' position is a sequence slice (it names "sequence", "positions" or
  // "targets"), read by a second reader so that `tokens` stays where it is.
  static bool names_a_slice(field_reader& tokens) {
    field_reader object = tokens.at(tokens.value_offset());
    object.begin_object();
    std::string_view key;
    while (object.next_member(key)) {
      if (key == "sequence" || key == "positions" || key == "targets") return true;
      object.skip_value();
    }
    return false;
  }

  microbatch_stats read_weighted_tokens(field_reader& tokens, field_reader& weights) {
    const std::uint64_t list_offset = weights.value_offset();
    tokens.begin_array();
    weights.begin_array();
    microbatch_builder builder(true);
    std::uint64_t position = 0;
    for (;; ++position) {
      const bool token = tokens.next_element();
      const bool weight = weights.next_element();
      if (token != weight)
        weights.fail(error_code::schema_error,
                     std::string("weights has ") + (token ? "fewer" : "more") +
                         " entries than the targets beside it: give one per position (null beside padding)",
                     token ? list_offset : weights.value_offset());
      if (!token) break;
      if (tokens.peek() == json_kind::null) {
        tokens.null_value();
        if (weights.peek() != json_kind::null)
          weights.fail(
              error_code::schema_error,
              "position " + std::to_string(position) + " is padding (its target is null), so its weight must be null",
              weights.value_offset());
        weights.null_value();
        builder.add_padding();
        continue;
      }
      // Both values take the machine path when they can (see read_tokens), each the general one otherwise.
      machine_literal fast_target;
      machine_literal fast_weight;
      const bool target_is_fast = tokens.machine_value(fast_target);
      const literal_parts target = target_is_fast ? literal_parts{} : tokens.literal("a token value");
      const std::uint64_t weight_offset = weights.value_offset();
      if (weights.peek() == json_kind::null)
        weights.fail(
            error_code::schema_error,
            "position " + std::to_string(position) +
                " holds a valid token, so its weight must be an exact non-negative number (null only beside padding)",
            weight_offset);
      const bool weight_is_fast = weights.machine_value(fast_weight);
      const literal_parts w = weight_is_fast ? literal_parts{} : weights.literal("a token weight");
      const bool negative = weight_is_fast ? fast_weight.negative && fast_weight.significand != 0
                                           : w.negative && w.significand != 0;
      if (negative)
        weights.fail(error_code::bad_number,
                     "a token weight must not be negative, found " +
                         to_string(to_rational(weight_is_fast ? to_parts(fast_weight) : w)),
                     weight_offset);
      if (target_is_fast && weight_is_fast) builder.add_weighted_token(fast_target, fast_weight);
      else builder.add_weighted_token(target_is_fast ? to_parts(fast_target) : target,
                                      weight_is_fast ? to_parts(fast_weight) : w);
    }
    return builder.finish();
  }

  // Weights and the objective agree: weights on every rank exactly when the objective is weighted.
  void check_weighting() {
    const bool weighted = file_.update.objective == objective_kind::weighted_token_mean;
    if (!weighted && first_weights_offset)
      json_.fail(error_code::schema_error,
                 "weights are given but the objective is token_mean: set \"objective\": \"weighted_token_mean\" "
                 "(the token mean counts every valid token once)",
                 *first_weights_offset);
    if (weighted && first_unweighted_rank)
      json_.fail(error_code::schema_error,
                 "the objective is weighted_token_mean, so every rank gives \"weights\" beside its targets",
                 *first_unweighted_rank);
  }


  // The objective and what it needs: a normalizer exactly under constant, and sequences declared wherever
  // a sequence objective has tokens.
  void check_objective() {
    const objective_kind objective = file_.update.objective;
    if (objective == objective_kind::constant && !normalizer_offset_)
      json_.fail(error_code::schema_error,
                 "the objective is constant, so the document gives \"normalizer\": C, the constant the loss sum is "
                 "divided by (for example the number of sequences times the longest length)",
                 objective_offset_.value_or(0));
    if (objective != objective_kind::constant && normalizer_offset_)
      json_.fail(error_code::schema_error,
                 "normalizer is the constant of the objective \"constant\", but the objective is " +
                     std::string(objective_name(objective)),
                 *normalizer_offset_);
    if (!counts_sequences(objective)) return;
    for (std::size_t r = 0; r < file_.update.ranks.size(); ++r) {
      const rank_stats& rank = file_.update.ranks[r];
      for (std::size_t m = 0; m < rank.microbatches.size(); ++m)
        if (rank.microbatches[m].valid_tokens > 0 && !rank.microbatches[m].sequences)
          json_.fail(error_code::schema_error,
                     "rank " + std::to_string(r) + ", microbatch " + std::to_string(m) + " holds valid tokens but no "
                         "sequences, and the objective " + std::string(objective_name(objective)) +
                         " counts sequences: write it as {\"sequences\": [[…], …]}",
                     objective_offset_.value_or(0));
    }
  }

  // Counts one more group (a microbatch or a sequence) against --max-microbatches.
  void count_group(std::uint64_t offset) {
    if (++groups_ > json_.limits().max_microbatches)
      json_.fail(
          error_code::limit_exceeded,
          "the update has more than " + std::to_string(json_.limits().max_microbatches) +
              " microbatches over all ranks (--max-microbatches raises the limit; sequences count as microbatches)",
          offset);
  }

  // Adds a group's positions to the update's, failing at the group that passes max_count: every count the
  // update sums later (N, P, nᵣ, B, the positions) is then within it.
  void tally(const group_stats& group, std::uint64_t offset) {
    try {
      positions_ = add_counts(positions_, add_counts(group.valid_tokens, group.padding));
    } catch (const error& e) {
      json_.fail(e.code(), e.message(), offset);
    }
  }

  // A microbatch (the rank's `microbatch`-th): a token array (the hot path, possibly handed to a worker), a
  // compact group, or sequences.
  microbatch_stats read_microbatch(std::string_view what, std::size_t microbatch) {
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::object) return read_tokens(what);
    count_group(offset);
    json_.begin_object();
    std::string_view key;
    if (!json_.next_member(key))
      json_.fail(error_code::schema_error,
                 std::string(what) + " is an empty object: a microbatch is a token array, a compact group "
                     "{\"count\": n, \"value\": y}, or {\"sequences\": [[…], …]}",
                 offset);
    if (key != "sequences") return read_compact(offset, key);
    if (json_.peek() != json_kind::array)
      json_.fail_type("sequences", "a non-empty array of sequences (token arrays or compact groups)");
    const std::uint64_t list_offset = json_.value_offset();
    json_.begin_array();
    std::vector<group_stats> sequences;
    while (json_.next_element()) {
      const std::uint64_t sequence_offset = json_.value_offset();
      if (json_.peek() == json_kind::object) {
        count_group(sequence_offset);
        json_.begin_object();
        if (!json_.next_member(key))
          json_.fail(error_code::schema_error,
                     "a sequence is a token array or a compact group {\"count\": n, \"value\": y}", sequence_offset);
        if (key == "sequences")
          json_.fail(error_code::schema_error, "sequences do not nest: a sequence is a token array or a compact group",
                     json_.key_offset());
        const std::size_t slices = slices_.size();
        sequences.push_back(read_compact(sequence_offset, key, microbatch));
        if (slices_.size() > slices) slices_.back().group = sequences.size() - 1;
      } else {
        sequences.push_back(read_token_array("each sequence", sequence_offset));
      }
    }
    if (sequences.empty())
      json_.fail(error_code::schema_error,
                 "sequences must not be empty: a microbatch without tokens is [] (give at least one sequence)",
                 list_offset);
    if (json_.next_member(key))
      json_.fail_unknown_key(key, "beside sequences (a microbatch with sequences has only \"sequences\")");
    return make_sequenced_microbatch(std::move(sequences));
  }

  // A compact group, its first key `key` already read: {"count": n, "value": y, "padding": p}. Inside
  // sequences (`microbatch` given) it may instead be a sequence slice: "sequence": its ID, optionally
  // "positions", and a compact group or "targets".
  microbatch_stats read_compact(std::uint64_t offset, std::string_view key,
                                std::optional<std::size_t> microbatch = std::nullopt) {
    constexpr std::uint64_t most = std::uint64_t{1} << 62;
    std::optional<std::uint64_t> count;
    std::optional<rational> value;
    std::uint64_t padding = 0;
    bool saw_padding = false;
    std::uint64_t value_offset = offset;
    std::optional<microbatch_stats> targets;
    std::optional<sequence_slice> slice;
    std::optional<std::uint64_t> positions_offset;
    for (bool more = true; more; more = json_.next_member(key)) {
      if (key == "count") {
        count = json_.integer("count", 0, most);
      } else if (key == "value") {
        value_offset = json_.value_offset();
        value = json_.exact("value");
      } else if (key == "padding") {
        padding = json_.integer("padding", 0, most);
        saw_padding = true;
      } else if (key == "sequences") {
        json_.fail(error_code::schema_error,
                   "a compact group has count, value and padding; \"sequences\" stands alone in a microbatch",
                   json_.key_offset());
      } else if (microbatch && (key == "sequence" || key == "positions" || key == "targets")) {
        if (!slice) slice = sequence_slice{file_.update.ranks.size(), *microbatch, 0, {}, {}, offset, false};
        if (key == "sequence") {
          slice->id = std::string(json_.text("sequence"));
          slice->named = true;
        } else if (key == "positions") {
          positions_offset = json_.value_offset();
          slice->positions = read_positions();
        } else {
          targets = read_token_array("a slice's targets", json_.value_offset());
        }
      } else if (key == "sequence" || key == "positions") {
        json_.fail(error_code::schema_error,
                   "\"" + std::string(key) + "\" belongs to a sequence slice, which stands inside "
                   "{\"sequences\": [...]}",
                   json_.key_offset());
      } else {
        json_.fail_unknown_key(key, slice ? "in a sequence slice (a compact group has count, value and padding; a "
                                                 "slice adds sequence and positions, and may give targets instead)"
                                               : "in a compact group (it has count, value and padding)");
      }
    }
    if (slice && !slice->named)
      json_.fail(error_code::schema_error,
                 "a sequence slice (with \"positions\" or \"targets\") needs \"sequence\": the ID of the sequence "
                 "it is a slice of",
                 offset);
    microbatch_stats stats;
    if (targets) {
      if (count || value || saw_padding)
        json_.fail(error_code::schema_error,
                   "a sequence slice holds \"targets\" or a compact group (count, value, padding), not both", offset);
      stats = std::move(*targets);
    } else {
      stats = compact_group(offset, count, value, padding, value_offset);
    }
    if (slice) {
      if (positions_offset) {
        const std::uint64_t covered = slice->covered();
        const std::uint64_t held = stats.valid_tokens + stats.padding;
        if (covered != held)
          json_.fail(error_code::schema_error,
                     "the slice's positions cover " + std::to_string(covered) + " positions but it holds " +
                         std::to_string(held) + " (valid tokens and padding): give one position to each",
                     *positions_offset);
      }
      slices_.push_back(std::move(*slice));
    }
    return stats;
  }

  // A compact group's statistics, once its keys are read.
  microbatch_stats compact_group(std::uint64_t offset, std::optional<std::uint64_t> count,
                                 const std::optional<rational>& value, std::uint64_t padding,
                                 std::uint64_t value_offset) {
    if (!count)
      json_.fail(error_code::schema_error,
                 "a compact group needs \"count\": the number of valid tokens that share its value", offset);
    if (*count > 0 && !value)
      json_.fail(error_code::schema_error,
                 "a compact group of " + std::to_string(*count) + " tokens needs \"value\": the value they share",
                 offset);
    microbatch_builder builder;
    if (*count > 0) builder.add_tokens(*value, *count);
    builder.add_padding(padding);
    microbatch_stats stats = builder.finish();
    tally(stats, offset);
    if (stats.has_sums()) {
      budget_.note_kept(stats.target_sum(), json_, value_offset);
      budget_.note_kept(stats.target_abs_sum(), json_, value_offset);
    }
    return stats;
  }

  // A slice's `positions`: a non-empty array of half-open ranges [start, end), start < end, ascending
  // without overlap.
  std::vector<position_range> read_positions() {
    constexpr std::uint64_t most = std::uint64_t{1} << 62;
    const std::uint64_t offset = json_.value_offset();
    if (json_.peek() != json_kind::array)
      json_.fail_type("positions", "a non-empty array of half-open ranges [start, end]");
    json_.begin_array();
    std::vector<position_range> ranges;
    while (json_.next_element()) {
      const std::uint64_t at = json_.value_offset();
      if (json_.peek() != json_kind::array)
        json_.fail_type("each range of positions", "[start, end], two positions with start < end");
      json_.begin_array();
      std::vector<std::uint64_t> bounds;
      while (json_.next_element()) {
        if (bounds.size() == 2)
          json_.fail(error_code::schema_error, "a range of positions is [start, end]: two positions, no more", at);
        bounds.push_back(json_.integer("a position", 0, most));
      }
      if (bounds.size() != 2)
        json_.fail(error_code::schema_error, "a range of positions is [start, end]: two positions", at);
      const position_range range{bounds[0], bounds[1]};
      if (range.start >= range.end)
        json_.fail(error_code::schema_error,
                   "a range of positions is half-open, [start, end) with start < end, found " + spelled(range), at);
      if (!ranges.empty() && range.start < ranges.back().end)
        json_.fail(error_code::schema_error,
                   "the ranges of a slice's positions ascend without overlapping, but " + spelled(range) +
                       " starts before " + spelled(ranges.back()) + " ends",
                   at);
      ranges.push_back(range);
    }
    if (ranges.empty())
      json_.fail(error_code::schema_error, "positions must not be empty: give the ranges the slice holds", offset);
    return ranges;
  }

  // The slices against the mesh: they need a sequence dimension, and the slices of one sequence (one ID
  // in one microbatch of ranks that share their data coordinates) hold each position at most once.
  void check_slices() {
    if (slices_.empty()) return;
    const bool sequence_dim = std::any_of(file_.update.mesh.begin(), file_.update.mesh.end(),
                                          [](const mesh_dim& dim) { return dim.role == mesh_role::sequence; });
    if (!sequence_dim)
      json_.fail(error_code::schema_error,
                 "a sequence slice needs a mesh with a sequence dimension, whose ranks hold the slices of one sequence",
                 slices_.front().offset);
    // Per sequence, its ranges so far by start: disjoint, so the one starting last before a range's end
    // is the only one that can overlap it.
    std::map<std::tuple<std::vector<std::uint64_t>, std::size_t, std::string>,
             std::map<std::uint64_t, std::pair<std::uint64_t, std::size_t>>> held;
    for (const sequence_slice& slice : slices_) {
      if (file_.update.first_replica(slice.rank) != slice.rank) continue;  // a replica's slices repeat its first's
      auto& ranges = held[{data_coords(slice.rank), slice.microbatch, slice.id}];
      for (const position_range& range : slice.positions) {
        auto after = ranges.lower_bound(range.end);
        if (after == ranges.begin()) continue;
        const auto& [start, earlier] = *std::prev(after);
        const auto& [end, rank] = earlier;
        if (end > range.start)
          json_.fail(error_code::schema_error,
                     "a duplicated token: sequence \"" + printable(slice.id) + "\" of microbatch " +
                         std::to_string(slice.microbatch) + " holds position " +
                         std::to_string(std::max(start, range.start)) + " on rank " + std::to_string(rank) +
                         " already, and again on rank " + std::to_string(slice.rank),
                     slice.offset);
      }
      for (const position_range& range : slice.positions) ranges[range.start] = {range.end, slice.rank};
    }
  }

  // Each slice's sequence ID, numbered in order of first appearance, on the rank that holds it (the first
  // of its replicas, as the update keeps them): core/sequence_join joins the slices into whole sequences.
  void join_slices() {
    if (slices_.empty()) return;
    std::map<std::string, std::uint64_t> numbers;
    std::map<std::size_t, std::size_t> kept;  // listed rank of a first replica → its index in the update
    for (std::uint64_t listed = 0; listed < file_.update.listed_ranks(); ++listed)
      if (file_.update.first_replica(listed) == listed) kept.emplace(listed, kept.size());
    file_.update.sequence_ids.resize(file_.update.ranks.size());
    for (const sequence_slice& slice : slices_) {
      if (file_.update.first_replica(slice.rank) != slice.rank) continue;  // a replica's slices repeat its first's
      const std::size_t r = kept.at(slice.rank);
      const rank_stats& rank = file_.update.ranks[r];
      file_.update.sequence_ids[r].resize(rank.microbatches.size());
      std::vector<std::uint64_t>& ids = file_.update.sequence_ids[r][slice.microbatch];
      ids.resize(rank.microbatches[slice.microbatch].group_count());
      ids[slice.group] = numbers.try_emplace(slice.id, numbers.size() + 1).first->second;
    }
  }

  // Under the sequence objectives on a mesh whose sequence dimensions split sequences, every sequence that
  // holds a valid token says which sequence it is a slice of (refused at the rank of the first that does
  // not): counted as a whole sequence of its own, a slice would count once per rank that holds part of it.
  void require_slice_ids() {
    if (!counts_sequences(file_.update.objective) || file_.update.mesh_extent(mesh_role::sequence) < 2) return;
    std::set<std::tuple<std::size_t, std::size_t, std::size_t>> named;
    for (const sequence_slice& slice : slices_) named.insert({slice.rank, slice.microbatch, slice.group});
    for (std::size_t r = 0; r < file_.update.ranks.size(); ++r) {
      const rank_stats& rank = file_.update.ranks[r];
      for (std::size_t m = 0; m < rank.microbatches.size(); ++m)
        for (std::size_t g = 0; rank.microbatches[m].sequences && g < rank.microbatches[m].group_count(); ++g)
          if (rank.microbatches[m].group(g).valid_tokens > 0 && !named.count({r, m, g}))
            json_.fail(error_code::schema_error,
                       "rank " + std::to_string(r) + ", microbatch " + std::to_string(m) + ", sequence " +
                           std::to_string(g) + " is not a slice, but the ranks of " +
                           file_.update.mesh_names(mesh_role::sequence) + " hold slices of the same sequences and " +
                           std::string(objective_name(file_.update.objective)) +
                           " counts each sequence once: give it \"sequence\", the ID of the sequence it is a "
                           "slice of (and its \"targets\" or a compact group)",
                       rank_offsets_[r]);
    }
  }

  // Ranks along a replica dimension hold the same tokens: each is compared with the first of its replicas,
  // and the update keeps the first ones only, so that N counts every token once.
  void collapse_replicas() {
    if (file_.update.mesh_extent(mesh_role::replica) < 2) return;
    std::vector<rank_stats> firsts;
    std::map<std::size_t, std::size_t> kept;  // listed rank of a first replica → its index in `firsts`
    for (std::size_t r = 0; r < file_.update.ranks.size(); ++r) {
      const std::size_t first = file_.update.first_replica(r);
      if (first == r) {
        kept[r] = firsts.size();
        firsts.push_back(std::move(file_.update.ranks[r]));
      } else if (const std::optional<std::string> where =
                     first_difference(firsts[kept.at(first)], file_.update.ranks[r])) {
        json_.fail(error_code::schema_error,
                   "rank " + std::to_string(r) + " is a replica of rank " + std::to_string(first) + " along " +
                       file_.update.mesh_names(mesh_role::replica) + " but holds other tokens (" + *where +
                       "): the ranks of a replica dimension hold the same tokens",
                   rank_offsets_[r]);
      }
    }
    file_.update.ranks = std::move(firsts);
  }

  // Where two ranks' tokens differ ("microbatch 1, sequence 0: 3 valid tokens against 4"); nullopt where every
  // microbatch and group has the same counts and sums.
  static std::optional<std::string> first_difference(const rank_stats& first, const rank_stats& other) {
    if (first.microbatches.size() != other.microbatches.size())
      return std::to_string(other.microbatches.size()) + " microbatches against " +
             std::to_string(first.microbatches.size());
    auto same = [](const group_stats& a, const group_stats& b) {
      return a.valid_tokens == b.valid_tokens && a.padding == b.padding && a.target_sum() == b.target_sum() &&
             a.target_abs_sum() == b.target_abs_sum() && a.weighted() == b.weighted() && a.mass() == b.mass() &&
             a.weighted_target_sum() == b.weighted_target_sum();
    };
    for (std::size_t m = 0; m < first.microbatches.size(); ++m) {
      const microbatch_stats& a = first.microbatches[m];
      const microbatch_stats& b = other.microbatches[m];
      const std::string where = "microbatch " + std::to_string(m);
      if (a.group_count() != b.group_count() || a.sequences.has_value() != b.sequences.has_value())
        return where + ": " + std::to_string(b.group_count()) + " groups against " + std::to_string(a.group_count());
      if (!same(a, b))
        return where + (b.valid_tokens == a.valid_tokens && b.padding == a.padding
                            ? std::string(": other target values")
                            : ": " + std::to_string(b.valid_tokens) + " valid and " + std::to_string(b.padding) +
                                  " padded positions against " + std::to_string(a.valid_tokens) + " and " +
                                  std::to_string(a.padding));
      for (std::size_t g = 0; a.sequences && g < a.group_count(); ++g)
        if (!same(a.group(g), b.group(g))) return where + ", sequence " + std::to_string(g) + ": other tokens";
    }
    return std::nullopt;
  }

  // A rank's coordinates along the mesh's dimensions other than the sequence ones.
  std::vector<std::uint64_t> data_coords(std::size_t rank) const {
    std::vector<std::uint64_t> coords;
    for (std::size_t d = file_.update.mesh.size(); d-- > 0;) {
      if (file_.update.mesh[d].role != mesh_role::sequence) coords.push_back(rank % file_.update.mesh[d].size);
      rank /= file_.update.mesh[d].size;
    }
    return coords;
  }

  static std::string spelled(const position_range& range) {
    return "[" + std::to_string(range.start) + ", " + std::to_string(range.end) + "]";
  }

  // A microbatch given as a token array: counted against the limit, and large arrays of large documents
  // handed to the pool.
  microbatch_stats read_tokens(std::string_view what) {
    const std::uint64_t offset = json_.value_offset();
    count_group(offset);
    if (json_.peek() != json_kind::array)
      json_.fail_type(what, "an array of token values (exact numbers, or null for padding), a compact group "
                            "{\"count\": n, \"value\": y}, or {\"sequences\": [[…], …]}");
    if (pool_) {
      const std::optional<std::uint64_t> close = detail::token_array_end(json_, text_, offset);
      if (close && *close - offset >= parallel_array_bytes) {
        pooled_ticket_ = pool_->add(offset, *close);
        pooled_offset_ = offset;
        json_.skip_to(*close + 1);
        return {};  // filled in by collect_pooled
      }
    }
    return read_token_array(what, offset);
  }

  // The hot loop: each literal is read straight from the input into machine integers and summed
  // without allocating, the regular elements in one pass over the text as the pool's workers read them;
  // from the first element that pass does not take (a fraction, a long significand, anything malformed)
  // the reader goes on element by element, through parse_literal where the machine integers do not do.
  microbatch_stats read_token_array(std::string_view what, std::uint64_t offset) {
    if (json_.peek() != json_kind::array)
      json_.fail_type(what, "an array of token values (exact numbers, or null for padding), or a compact group "
                            "{\"count\": n, \"value\": y}");
    json_.begin_array();
    microbatch_builder builder;
    json_.skip_elements_to(
        detail::read_regular_elements(text_, json_.value_offset(), json_.limits().numbers, builder));
    machine_literal fast;
    while (json_.next_element()) {
      if (json_.machine_value(fast)) {
        builder.add_token(fast);
      } else if (json_.peek() == json_kind::null) {
        json_.null_value();
        builder.add_padding();
      } else {
        builder.add_token(json_.literal("a token value"));
      }
    }
    microbatch_stats stats = builder.finish();
    tally(stats, offset);
    if (stats.has_sums()) {  // what the microbatch keeps: its sums (an empty one keeps none)
      budget_.note_kept(stats.target_sum(), json_, offset);
      budget_.note_kept(stats.target_abs_sum(), json_, offset);
    }
    return stats;
  }


  void read_expect() {
    if (json_.peek() != json_kind::object)
      json_.fail_type("expect", "an object mapping gradient names to exact numbers or null");
    json_.begin_object();
    std::string_view key;
    while (json_.next_member(key)) {
      if (section* owner = owner_of(key, &section::expect_keys)) {
        owner->read_expect(key, json_);
        continue;
      }
      const std::optional<strategy> name = strategy_from_name(key);
      if (!name) {
        std::string names;
        for (strategy s : all_strategies) names += (names.empty() ? "" : ", ") + std::string(strategy_name(s));
        json_.fail(error_code::schema_error,
                   "unknown gradient \"" + printable(key) +
                       "\" in expect (known: " + known_keys(&section::expect_keys, names) + ")",
                   json_.key_offset());
      }
      expectation entry{*name, std::nullopt};
      if (json_.peek() == json_kind::null) json_.null_value();
      else entry.value = json_.exact("an expected gradient");
      file_.expect.push_back(std::move(entry));
    }
  }


  // The section that reads `key` through `keys` (section::keys or section::expect_keys), if any.
  section* owner_of(std::string_view key, std::vector<std::string_view> (section::*keys)() const) const {
    for (const std::shared_ptr<section>& part : file_.sections)
      for (std::string_view owned : ((*part).*keys)())
        if (owned == key) return part.get();
    return nullptr;
  }

  // The keys a message lists: the reader's own, then each section's.
  std::string known_keys(std::vector<std::string_view> (section::*keys)() const, std::string_view own) const {
    std::string out(own);
    for (const std::shared_ptr<section>& part : file_.sections)
      for (std::string_view owned : ((*part).*keys)()) out += (out.empty() ? "" : ", ") + std::string(owned);
    return out;
  }

  // A token array handed to the pool stands in `rank` as an empty microbatch until collect_pooled.
  void note_pooled(const rank_stats& rank) {
    if (!pooled_ticket_) return;
    pooled_.push_back({file_.update.ranks.size(), rank.microbatches.size() - 1, *pooled_ticket_, pooled_offset_});
    pooled_ticket_.reset();
  }

  // Puts the pool's statistics in place, counted against the budget as the reading thread counts its own;
  // any array the workers could not read as regular makes the caller read the document on one thread.
  void collect_pooled() {
    if (!pool_) return;
    if (!pool_->finish()) throw read_sequentially{};
    for (const pooled_array& array : pooled_) {
      microbatch_stats stats = pool_->take(array.ticket);
      tally(stats, array.offset);
      if (stats.has_sums()) {
        budget_.note_kept(stats.target_sum(), json_, 0);
        budget_.note_kept(stats.target_abs_sum(), json_, 0);
      }
      file_.update.ranks[array.rank].microbatches[array.microbatch] = std::move(stats);
    }
  }

  // Documents and arrays large enough to be worth a worker.
  static constexpr std::size_t parallel_document_bytes = 1 << 20;
  static constexpr std::uint64_t parallel_array_bytes = 2048;

  struct pooled_array {
    std::size_t rank;
    std::size_t microbatch;
    std::size_t ticket;
    std::uint64_t offset;
  };

  field_reader json_;
  std::string_view text_;
  std::unique_ptr<detail::token_pool> pool_;
  std::optional<std::size_t> pooled_ticket_;
  std::uint64_t pooled_offset_ = 0;
  std::vector<pooled_array> pooled_;
  exact_budget budget_;
  std::uint64_t groups_ = 0;  // microbatches and sequences read so far
  std::uint64_t positions_ = 0;  // valid tokens and padding read so far
  std::optional<std::uint64_t> objective_offset_;
  std::optional<std::uint64_t> normalizer_offset_;
  std::optional<std::uint64_t> accumulation_offset_;
  std::optional<std::uint64_t> mesh_offset_;
  std::vector<std::pair<std::size_t, std::uint64_t>> coords_;          // each rank giving `coords`, and where
  std::map<std::size_t, std::vector<std::uint64_t>> given_coords_;     // those coordinates
  std::vector<sequence_slice> slices_;                                 // every sequence slice, in file order
  std::vector<std::uint64_t> rank_offsets_;                            // where each listed rank starts
  partition_file file_;
  std::optional<std::uint64_t> first_weights_offset;   // the first rank's "weights" value
  std::optional<std::uint64_t> first_unweighted_rank;  // the first rank without "weights"
  std::vector<term_state> terms_;                      // the auxiliary terms, in file order
};

}  // namespace

partition_file read_partition(std::string_view text, std::string source, const reader_limits& limits,
                              const section_registry& sections, unsigned jobs) {
  if (jobs > 1) {
    try {
      return document_reader(text, source, limits, sections, jobs).read();
    } catch (const read_sequentially&) {
      // an array the workers did not take: read again below
    } catch (const error&) {
      // the error of a sequential read, at its position, is the one reported: read again below
    }
  }
  return document_reader(text, std::move(source), limits, sections, 1).read();
}

}  // namespace normcheck
