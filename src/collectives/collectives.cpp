#include "normcheck/collectives/collectives.hpp"
#include "normcheck/io/files.hpp"

#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/core/names.hpp"
#include "normcheck/documents/field_reader.hpp"
#include "normcheck/io/json_writer.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

namespace normcheck {

namespace {

constexpr name_table op_names{std::array<std::pair<collective_op, std::string_view>, 5>{{
    {collective_op::all_reduce, "all_reduce"},
    {collective_op::broadcast, "broadcast"},
    {collective_op::all_gather, "all_gather"},
    {collective_op::reduce_scatter, "reduce_scatter"},
    {collective_op::barrier, "barrier"},
}}};

constexpr std::string_view line_keys = "rank, step, seq, op, tensor, shape, dtype, reduce_op, group, root";
constexpr std::uint64_t max_rank = (1u << 20) - 1;
constexpr std::uint64_t max_count = std::numeric_limits<std::int64_t>::max();

void append_field(std::string& key, std::string_view field) {
  key += std::to_string(field.size());
  key += ':';
  key += field;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string or_dash(const std::string& text) { return text.empty() ? "—" : text; }

std::string join_ranks(const std::vector<std::size_t>& ranks) {
  std::string out;
  for (std::size_t r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string ranks_phrase(const std::vector<std::size_t>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + join_ranks(ranks);
}

// Line and column of an error raised inside one line, as a position in the whole file.
error relocated(const error& e, const std::string& source, std::uint64_t line, std::uint64_t line_offset) {
  location where;
  where.file = source;
  where.line = line;
  where.column = 1;
  where.offset = line_offset;
  if (e.where() && e.where()->line > 0) {
    where.column = e.where()->column;
    where.offset = line_offset + e.where()->offset;
  }
  return error(e.code(), e.message(), where);
}

}  // namespace

std::string_view collective_op_name(collective_op op) noexcept { return op_names.name(op); }

std::uint32_t collective_trace::intern_signature(const call_signature& signature) {
  key_.clear();
  key_ += collective_op_name(signature.op);
  key_ += '|';
  append_field(key_, signature.group);
  append_field(key_, signature.reduce_op);
  append_field(key_, signature.dtype);
  for (std::uint64_t extent : signature.shape) {
    key_ += std::to_string(extent);
    key_ += ',';
  }
  key_ += signature.root ? "|" + std::to_string(*signature.root) : std::string("|-");
  auto found = signature_index_.find(key_);
  if (found != signature_index_.end()) return found->second;
  const auto index = static_cast<std::uint32_t>(signatures_.size());
  signatures_.push_back(signature);
  signature_index_.emplace(key_, index);
  return index;
}

std::uint32_t collective_trace::intern_name(std::string_view name) {
  key_.assign(name);
  auto found = name_index_.find(key_);
  if (found != name_index_.end()) return found->second;
  const auto index = static_cast<std::uint32_t>(tensor_names_.size());
  tensor_names_.emplace_back(name);
  name_index_.emplace(key_, index);
  return index;
}

void collective_trace::add_text(std::string_view text, std::string source, const reader_limits& limits) {
  const auto file = static_cast<std::uint32_t>(files_.size());
  files_.push_back(source);
  call_signature signature;
  std::size_t start = 0;
  std::uint64_t line_number = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    const std::size_t line_offset = start;
    ++line_number;
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      field_reader json(line, std::string(), limits);
      if (json.peek() != json_kind::object) json.fail_type("each line of a trace", "a JSON object: one collective call");
      json.begin_object();
      collective_call call;
      call.file = file;
      call.line = line_number;
      signature.group.clear();
      signature.reduce_op.clear();
      signature.dtype.clear();
      signature.shape.clear();
      signature.root.reset();
      bool saw_rank = false, saw_step = false, saw_seq = false, saw_op = false;
      bool saw_tensor = false, saw_shape = false, saw_dtype = false;
      std::string_view key;
      while (json.next_member(key)) {
        if (key == "rank") {
          call.rank = static_cast<std::uint32_t>(json.integer("rank", 0, max_rank));
          saw_rank = true;
        } else if (key == "step") {
          call.step = json.integer("step", 0, max_count);
          saw_step = true;
        } else if (key == "seq") {
          call.seq = json.integer("seq", 0, max_count);
          saw_seq = true;
        } else if (key == "op") {
          signature.op = json.named("op", [](std::string_view name) { return op_names.find(name); }, op_names.alternatives());
          saw_op = true;
        } else if (key == "tensor") {
          call.tensor = intern_name(json.text("tensor"));  // the view lives until the next string
          saw_tensor = true;
        } else if (key == "shape") {
          if (json.peek() != json_kind::array) json.fail_type("shape", "an array of non-negative integers");
          json.begin_array();
          while (json.next_element()) signature.shape.push_back(json.integer("each extent of shape", 0, max_count));
          saw_shape = true;
        } else if (key == "dtype") {
          signature.dtype = json.text("dtype");
          saw_dtype = true;
        } else if (key == "reduce_op") {
          signature.reduce_op = json.text("reduce_op");
        } else if (key == "group") {
          signature.group = json.text("group");
        } else if (key == "root") {
          signature.root = json.integer("root", 0, max_rank);
        } else {
          json.fail_unknown_key(key, "(a trace line has " + std::string(line_keys) + ")");
        }
      }
      json.finish();
      std::string missing;
      auto require = [&](bool seen, std::string_view name) {
        if (!seen) missing += (missing.empty() ? "" : ", ") + std::string(name);
      };
      require(saw_rank, "rank");
      require(saw_step, "step");
      require(saw_seq, "seq");
      require(saw_op, "op");
      if (saw_op && signature.op != collective_op::barrier) {
        require(saw_tensor, "tensor");
        require(saw_shape, "shape");
        require(saw_dtype, "dtype");
      }
      if (!missing.empty())
        json.fail(error_code::schema_error,
                  "missing " + missing + " (every line has rank, step, seq and op; every call but a barrier also "
                  "tensor, shape and dtype)",
                  0);
      if (!saw_tensor) call.tensor = intern_name("");
      call.signature = intern_signature(signature);
      calls_.push_back(call);
    } catch (const error& e) {
      throw relocated(e, source, line_number, line_offset);
    }
  }
}

void collective_trace::add_file(const std::filesystem::path& path, const reader_limits& limits) {
  const std::string text = load_file(path, limits);
  add_text(text, path.string(), limits);
}

namespace {

// Names the fields in which `a` and `b` differ, with both values.
std::vector<std::string> differing_fields(const call_signature& a, std::size_t rank_a, const call_signature& b,
                                          std::size_t rank_b) {
  std::vector<std::string> out;
  auto note = [&](std::string_view field, const std::string& x, const std::string& y) {
    out.push_back(std::string(field) + " (" + x + " on rank " + std::to_string(rank_a) + ", " + y + " on rank " +
                  std::to_string(rank_b) + ")");
  };
  if (a.op != b.op) note("op", std::string(collective_op_name(a.op)), std::string(collective_op_name(b.op)));
  if (a.group != b.group) note("group", or_dash(a.group), or_dash(b.group));
  if (a.reduce_op != b.reduce_op) note("reduce_op", or_dash(a.reduce_op), or_dash(b.reduce_op));
  if (a.shape != b.shape) note("shape", shape_text(a.shape), shape_text(b.shape));
  if (a.dtype != b.dtype) note("dtype", or_dash(a.dtype), or_dash(b.dtype));
  if (a.root != b.root)
    note("root", a.root ? std::to_string(*a.root) : "—", b.root ? std::to_string(*b.root) : "—");
  return out;
}

std::string call_text(const collective_trace& trace, const collective_call& call) {
  const call_signature& s = trace.signatures()[call.signature];
  std::string out = std::string(collective_op_name(s.op));
  const std::string& name = trace.tensor_names()[call.tensor];
  if (!name.empty()) out += " " + name;
  if (s.op != collective_op::barrier) out += " " + shape_text(s.shape) + " " + s.dtype;
  return out + " (step " + std::to_string(call.step) + ", seq " + std::to_string(call.seq) + ", " +
         trace.files()[call.file] + ":" + std::to_string(call.line) + ")";
}

[[noreturn]] void trace_error(const collective_trace& trace, const collective_call& call, std::string message) {
  location where;
  where.file = trace.files()[call.file];
  where.line = call.line;
  where.column = 1;
  throw error(error_code::schema_error, std::move(message), where);
}

}  // namespace

trace_verdict check_trace(const collective_trace& trace, std::optional<std::size_t> world_size) {
  const std::vector<collective_call>& calls = trace.calls();
  trace_verdict verdict;
  verdict.calls = calls.size();
  std::size_t highest = 0;
  for (const collective_call& call : calls) highest = std::max<std::size_t>(highest, call.rank + 1);
  verdict.world_size = world_size.value_or(highest);
  const std::size_t w = verdict.world_size;

  std::vector<std::vector<std::uint32_t>> by_rank(w);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].rank >= w)
      trace_error(trace, calls[i], "rank " + std::to_string(calls[i].rank) + " is not below the world size " +
                                       std::to_string(w) + " given on the command line");
    by_rank[calls[i].rank].push_back(static_cast<std::uint32_t>(i));
  }
  std::vector<std::uint64_t> steps_seen;
  for (std::vector<std::uint32_t>& sequence : by_rank) {
    auto by_seq = [&](std::uint32_t a, std::uint32_t b) { return calls[a].seq < calls[b].seq; };
    if (!std::is_sorted(sequence.begin(), sequence.end(), by_seq))
      std::stable_sort(sequence.begin(), sequence.end(), by_seq);
    for (std::size_t i = 1; i < sequence.size(); ++i) {
      const collective_call& before = calls[sequence[i - 1]];
      const collective_call& call = calls[sequence[i]];
      if (call.seq == before.seq)
        trace_error(trace, call, "rank " + std::to_string(call.rank) + " has seq " + std::to_string(call.seq) +
                                     " twice (also at " + trace.files()[before.file] + ":" +
                                     std::to_string(before.line) + "): each call has its own number");
      if (call.seq != before.seq + 1)
        trace_error(trace, call, "rank " + std::to_string(call.rank) + "'s seq jumps from " + std::to_string(before.seq) +
                                     " to " + std::to_string(call.seq) +
                                     ": the recorder numbers every call, so a line of this trace is missing");
      if (call.step < before.step)
        trace_error(trace, call, "rank " + std::to_string(call.rank) + "'s step goes back from " +
                                     std::to_string(before.step) + " to " + std::to_string(call.step) + " at seq " +
                                     std::to_string(call.seq));
    }
    for (std::uint32_t index : sequence)
      if (steps_seen.empty() || steps_seen.back() != calls[index].step) steps_seen.push_back(calls[index].step);
  }
  std::sort(steps_seen.begin(), steps_seen.end());
  verdict.steps = static_cast<std::uint64_t>(std::unique(steps_seen.begin(), steps_seen.end()) - steps_seen.begin());

  // Walk all ranks step by step; cursor[r] is rank r's next call.
  std::vector<std::size_t> cursor(w, 0);
  auto at = [&](std::size_t r, std::size_t k) -> const collective_call* {
    return k < by_rank[r].size() ? &calls[by_rank[r][k]] : nullptr;
  };
  while (true) {
    std::uint64_t step = std::numeric_limits<std::uint64_t>::max();
    bool any = false;
    for (std::size_t r = 0; r < w; ++r)
      if (const collective_call* next = at(r, cursor[r])) {
        step = std::min(step, next->step);
        any = true;
      }
    if (!any) break;
    std::vector<std::size_t> step_start = cursor;
    for (std::uint64_t position = 0;; ++position) {
      std::vector<std::size_t> present;
      std::vector<std::size_t> absent;
      for (std::size_t r = 0; r < w; ++r) {
        const collective_call* call = at(r, cursor[r]);
        (call && call->step == step ? present : absent).push_back(r);
      }
      if (present.empty()) break;
      bool agree = absent.empty();
      for (std::size_t r : present)
        if (calls[by_rank[r][cursor[r]]].signature != calls[by_rank[present.front()][cursor[present.front()]]].signature)
          agree = false;
      if (agree) {
        for (std::size_t& c : cursor) ++c;
        continue;
      }

      trace_problem problem;
      problem.step = step;
      problem.position = position;
      for (std::size_t r = 0; r < w; ++r) {
        rank_call entry{r, std::nullopt};
        if (const collective_call* call = at(r, cursor[r]); call && call->step == step) entry.call = by_rank[r][cursor[r]];
        problem.side_by_side.push_back(entry);
      }
      // Calls of rank r in this step, from position k on: the same signature and tensor name.
      auto in_step = [&](std::size_t r, std::size_t k) -> const collective_call* {
        const collective_call* call = at(r, step_start[r] + k);
        return call && call->step == step ? call : nullptr;
      };
      auto same = [](const collective_call* a, const collective_call* b) {
        return a && b && a->signature == b->signature && a->tensor == b->tensor;
      };
      if (!absent.empty()) {
        problem.missing_call = true;
        problem.waiting = present;
        problem.missing = absent;
        for (std::size_t r : absent) {
          const collective_call* next = at(r, cursor[r]);
          problem.notes.push_back("rank " + std::to_string(r) + " issued " + std::to_string(cursor[r] - step_start[r]) +
                                  " calls in step " + std::to_string(step) + "; " +
                                  (next ? "its next call is " + call_text(trace, *next)
                                        : std::string("its trace ends there")));
        }
      } else {
        // The largest group of equal signatures is the reference; ties go to the group of the lowest rank.
        std::size_t model = present.front();
        std::size_t model_count = 0;
        for (std::size_t r : present) {
          std::size_t count = 0;
          for (std::size_t q : present)
            if (calls[by_rank[q][cursor[q]]].signature == calls[by_rank[r][cursor[r]]].signature) ++count;
          if (count > model_count) {
            model = r;
            model_count = count;
          }
        }
        const std::size_t here = position;
        for (std::size_t r : present) {
          const collective_call& mine = calls[by_rank[r][cursor[r]]];
          const collective_call& theirs = calls[by_rank[model][cursor[model]]];
          if (mine.signature == theirs.signature) continue;
          for (std::string& field :
               differing_fields(trace.signatures()[theirs.signature], model, trace.signatures()[mine.signature], r))
            problem.notes.push_back("differs: " + field);
          const collective_call* my_next = in_step(r, here + 1);
          const collective_call* their_next = in_step(model, here + 1);
          const std::string who = "rank " + std::to_string(r);
          if (same(&mine, their_next) && same(my_next, &theirs)) {
            problem.notes.push_back(who + " issued this call and the next in the other order: a reordered pair");
          } else if (same(&mine, their_next)) {
            problem.missing_call = true;
            problem.missing.push_back(r);
            problem.notes.push_back(who + " skipped " + call_text(trace, theirs) + " and went on to the next call");
          } else if (same(my_next, &theirs)) {
            problem.notes.push_back(who + " issued an extra call here, then the others' " + call_text(trace, theirs));
          }
        }
        if (problem.missing_call)
          for (std::size_t r : present)
            if (std::find(problem.missing.begin(), problem.missing.end(), r) == problem.missing.end())
              problem.waiting.push_back(r);
      }
      // A skipped call of the same shape shows up later; tensor names can tell where it happened.
      for (std::uint64_t k = 0; k < position; ++k) {
        const collective_call* first = in_step(0, k);
        for (std::size_t r = 1; r < w && first; ++r) {
          const collective_call* other = in_step(r, k);
          if (other && other->tensor != first->tensor) {
            problem.notes.push_back("tensor names first differ at position " + std::to_string(k) + " of step " +
                                    std::to_string(step) + ": \"" + trace.tensor_names()[first->tensor] +
                                    "\" on rank 0, \"" + trace.tensor_names()[other->tensor] + "\" on rank " +
                                    std::to_string(r) + " (a call of the same shape may have been skipped there)");
            first = nullptr;
          }
        }
        if (!first) break;
      }
      verdict.first_problem = std::move(problem);
      return verdict;
    }
  }
  return verdict;
}

void print_trace_verdict(std::ostream& out, const collective_trace& trace, const trace_verdict& verdict) {
  out << "trace: " << verdict.world_size << (verdict.world_size == 1 ? " rank, " : " ranks, ") << verdict.calls
      << (verdict.calls == 1 ? " call, " : " calls, ") << verdict.steps << (verdict.steps == 1 ? " step" : " steps")
      << " in " << trace.files().size() << (trace.files().size() == 1 ? " file" : " files") << "\n";
  if (!verdict.first_problem) {
    out << "OK: every rank issued the same collectives in the same order, with matching op, group, reduce_op, "
           "shape and dtype\n";
    return;
  }
  const trace_problem& problem = *verdict.first_problem;
  out << (problem.missing_call ? "MISSING CALL" : "MISMATCH") << " at step " << problem.step << ", position "
      << problem.position << " (0-based) of that step\n";
  if (problem.missing_call)
    out << "  " << ranks_phrase(problem.missing) << " did not issue this call; " << ranks_phrase(problem.waiting)
        << (problem.waiting.size() == 1 ? " waits" : " wait") << " in it: the job would hang\n";

  std::vector<std::vector<std::string>> rows{{"rank", "seq", "op", "tensor", "shape", "dtype", "reduce_op", "group", "at"}};
  for (const rank_call& entry : problem.side_by_side) {
    if (!entry.call) {
      rows.push_back({std::to_string(entry.rank), "—", "(no call)", "", "", "", "", "", ""});
      continue;
    }
    const collective_call& call = trace.calls()[*entry.call];
    const call_signature& s = trace.signatures()[call.signature];
    std::string op(collective_op_name(s.op));
    if (s.root) op += " root " + std::to_string(*s.root);
    rows.push_back({std::to_string(entry.rank), std::to_string(call.seq), op, or_dash(trace.tensor_names()[call.tensor]),
                    s.op == collective_op::barrier && s.shape.empty() ? "—" : shape_text(s.shape), or_dash(s.dtype),
                    or_dash(s.reduce_op), or_dash(s.group), trace.files()[call.file] + ":" + std::to_string(call.line)});
  }
  std::vector<std::size_t> widths(rows.front().size(), 0);
  auto width = [](const std::string& text) {
    std::size_t chars = 0;
    for (char c : text)
      if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
    return chars;
  };
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], width(row[c]));
  constexpr std::size_t shown_ranks = 32;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == shown_ranks + 1 && rows.size() > shown_ranks + 2) {
      out << "  … " << rows.size() - 1 - shown_ranks << " more ranks\n";
      break;
    }
    std::string line = " ";
    for (std::size_t c = 0; c < rows[i].size(); ++c) {
      line += " " + rows[i][c];
      if (c + 1 < rows[i].size()) line.append(widths[c] - width(rows[i][c]), ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
  for (const std::string& note : problem.notes) out << "  " << note << "\n";
}

void print_trace_verdict_json(std::ostream& out, const collective_trace& trace, const trace_verdict& verdict) {
  std::string text;
  json_writer json(text);
  json.begin_object()
      .member("world_size", std::uint64_t{verdict.world_size})
      .member("calls", verdict.calls)
      .member("steps", verdict.steps)
      .member("consistent", !verdict.first_problem)
      .key("problem");
  if (!verdict.first_problem) {
    json.null().end_object();
    out << text << "\n";
    return;
  }
  const trace_problem& problem = *verdict.first_problem;
  json.begin_object()
      .member("kind", problem.missing_call ? "missing_call" : "mismatch")
      .member("step", problem.step)
      .member("position", problem.position)
      .member("waiting", problem.waiting)
      .member("missing", problem.missing)
      .key("calls")
      .begin_array();
  for (const rank_call& entry : problem.side_by_side) {
    json.begin_object().member("rank", std::uint64_t{entry.rank});
    if (entry.call) {
      const collective_call& call = trace.calls()[*entry.call];
      const call_signature& s = trace.signatures()[call.signature];
      json.member("seq", call.seq)
          .member("op", collective_op_name(s.op))
          .member("tensor", trace.tensor_names()[call.tensor])
          .member("shape", s.shape)
          .member("dtype", s.dtype)
          .member("reduce_op", s.reduce_op)
          .member("group", s.group)
          .member("file", trace.files()[call.file])
          .member("line", call.line);
    } else {
      json.key("seq").null();
    }
    json.end_object();
  }
  json.end_array().member("notes", problem.notes).end_object().end_object();
  out << text << "\n";
}

}  // namespace normcheck
