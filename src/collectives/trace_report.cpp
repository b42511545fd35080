#include "normcheck/collectives/trace_report.hpp"

#include "normcheck/core/utf8.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/text.hpp"

#include <algorithm>

namespace normcheck {

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

  // The program's source location is a column only when the recorder wrote one.
  bool sources = false;
  for (const rank_call& entry : problem.side_by_side)
    if (entry.call && !trace.sources()[trace.calls()[*entry.call].source].empty()) sources = true;
  std::vector<std::vector<std::string>> rows{
      {"rank", "seq", "op", "tensor", "shape", "dtype", "reduce_op", "group", "at"}};
  if (sources) rows.front().push_back("issued at");
  for (const rank_call& entry : problem.side_by_side) {
    if (!entry.call) {
      rows.push_back({std::to_string(entry.rank), "—", "(no call)", "", "", "", "", "", ""});
      if (sources) rows.back().push_back("");
      continue;
    }
    const collective_call& call = trace.calls()[*entry.call];
    const call_signature& s = trace.signatures()[call.signature];
    std::string op(collective_op_name(s.op));
    if (s.root) op += " root " + std::to_string(*s.root);
    rows.push_back({std::to_string(entry.rank), std::to_string(call.seq), op,
                    or_dash(printable(trace.tensor_names()[call.tensor])),
                    s.op == collective_op::barrier && s.shape.empty() ? "—" : shape_text(s.shape),
                    or_dash(printable(s.dtype)), or_dash(printable(s.reduce_op)), or_dash(printable(s.group)),
                    escaped_name(trace.files()[call.file]) + ":" + std::to_string(call.line)});
    if (sources) rows.back().push_back(or_dash(printable(trace.sources()[call.source])));
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
  for (const std::string& note : problem.notes) out << "  " << printable(note) << "\n";
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
          .member("source", trace.sources()[call.source])
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
