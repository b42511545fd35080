#pragma once
/// \file collectives/trace.hpp
/// Traces of collective calls: JSON lines, one call per line, in one file per rank or one file for all,
/// read into calls with their distinct signatures and tensor names.

#include "normcheck/core/errors.hpp"
#include "normcheck/io/json_reader.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace normcheck {

/// The collective operations a trace may name.
enum class collective_op {
  all_reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  barrier,
  reduce,
  gather,
  scatter,
  all_to_all
};

/// The stable name, e.g. "all_reduce".
std::string_view collective_op_name(collective_op op) noexcept;

/// What must agree across ranks for one call. Optional fields absent from a line are empty strings
/// (or no root) and are compared as written: absent differs from any value.
struct call_signature {
  collective_op op = collective_op::barrier;
  std::string group;
  std::string reduce_op;
  std::vector<std::uint64_t> shape;
  std::string dtype;
  std::optional<std::uint64_t> root;  ///< broadcast's source rank, when the trace gives it

  /// Equal signatures.
  bool operator==(const call_signature&) const = default;
};

/// One call as read: its place in the run and indices into the trace's tables.
struct collective_call {
  std::uint32_t rank = 0;
  std::uint32_t signature = 0;  ///< index into collective_trace::signatures
  std::uint32_t tensor = 0;     ///< index into collective_trace::tensor_names
  std::uint32_t file = 0;       ///< index into collective_trace::files
  std::uint32_t source = 0;     ///< index into collective_trace::sources: where the program issued it ("" if not given)
  std::uint64_t step = 0;
  std::uint64_t seq = 0;        ///< the rank's call counter: consecutive on each rank
  std::uint64_t line = 0;       ///< 1-based line in its file
};

/// The calls of one or more trace files, with their distinct signatures and tensor names.
class collective_trace {
public:
  /// Reads the JSON lines of `text`, naming it `source` in errors; blank lines are skipped.
  /// Throws `error` (parse_error, schema_error, bad_number, …) located at file:line:column.
  void add_text(std::string_view text, std::string source, const reader_limits& limits = {});
  /// Reads a trace file within the reader's size limit.
  void add_file(const std::filesystem::path& path, const reader_limits& limits = {});

  /// Every call, in the order read.
  const std::vector<collective_call>& calls() const noexcept { return calls_; }
  /// The distinct signatures.
  const std::vector<call_signature>& signatures() const noexcept { return signatures_; }
  /// The distinct tensor names.
  const std::vector<std::string>& tensor_names() const noexcept { return tensor_names_; }
  /// The distinct source locations ("file:line" of the program's call; "" for a line without one).
  const std::vector<std::string>& sources() const noexcept { return sources_; }
  /// The files read, in order.
  const std::vector<std::string>& files() const noexcept { return files_; }

private:
  std::uint32_t intern_signature(const call_signature& signature);
  std::uint32_t intern_name(std::string_view name);
  std::uint32_t intern_source(std::string_view source);

  std::vector<collective_call> calls_;
  std::vector<call_signature> signatures_;
  std::vector<std::string> tensor_names_;
  std::vector<std::string> sources_;
  std::vector<std::string> files_;
  std::unordered_map<std::string, std::uint32_t> signature_index_;
  std::unordered_map<std::string, std::uint32_t> name_index_;
  std::unordered_map<std::string, std::uint32_t> source_index_;
  std::string key_;  // reused to look signatures up without allocating
};

/// The shape as text, e.g. "[3, 4]".
std::string shape_text(const std::vector<std::uint64_t>& shape);

}  // namespace normcheck
