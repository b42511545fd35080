#include "normcheck/collectives/trace_check.hpp"

#include "normcheck/io/text.hpp"

#include <algorithm>
#include <map>

namespace normcheck {

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
  const std::string& source = trace.sources()[call.source];
  return out + " (step " + std::to_string(call.step) + ", seq " + std::to_string(call.seq) + ", " +
         (source.empty() ? std::string() : "issued at " + source + ", ") + trace.files()[call.file] + ":" +
         std::to_string(call.line) + ")";
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
        trace_error(trace, call,
                    "rank " + std::to_string(call.rank) + "'s seq jumps from " + std::to_string(before.seq) + " to " +
                        std::to_string(call.seq) +
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
        if (calls[by_rank[r][cursor[r]]].signature !=
            calls[by_rank[present.front()][cursor[present.front()]]].signature)
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
        if (const collective_call* call = at(r, cursor[r]); call && call->step == step)
          entry.call = by_rank[r][cursor[r]];
        problem.side_by_side.push_back(entry);
      }
      // Calls of rank r in this step, from position k on: the same signature and tensor name.
      auto in_step = [&](std::size_t r, std::size_t k) -> const collective_call* {
        const collective_call* call = at(r, step_start[r] + k);
        return call && call->step == step ? call : nullptr;
      };
      auto same = [](const collective_call* a, const collective_call* b) {
        return a && b && a->signature == b->signature && a->tensor == b->tensor && a->source == b->source;
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
          } else if (other && other->source != first->source) {
            problem.notes.push_back("source lines first differ at position " + std::to_string(k) + " of step " +
                                    std::to_string(step) + ": " + trace.sources()[first->source] + " on rank 0, " +
                                    trace.sources()[other->source] + " on rank " + std::to_string(r) +
                                    " (a call of the same shape may have been skipped there)");
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

}  // namespace normcheck
