#include "normcheck/collectives/trace.hpp"

#include "normcheck/core/names.hpp"
#include "normcheck/documents/field_reader.hpp"
#include "normcheck/io/files.hpp"

#include <limits>

namespace normcheck {

namespace {

constexpr name_table op_names{std::array<std::pair<collective_op, std::string_view>, 9>{{
    {collective_op::all_reduce, "all_reduce"},
    {collective_op::broadcast, "broadcast"},
    {collective_op::all_gather, "all_gather"},
    {collective_op::reduce_scatter, "reduce_scatter"},
    {collective_op::barrier, "barrier"},
    {collective_op::reduce, "reduce"},
    {collective_op::gather, "gather"},
    {collective_op::scatter, "scatter"},
    {collective_op::all_to_all, "all_to_all"},
}}};

constexpr std::string_view line_keys = "rank, step, seq, op, tensor, shape, dtype, reduce_op, group, root, source";
constexpr std::uint64_t max_rank = (1u << 20) - 1;
constexpr std::uint64_t max_trace_integer = std::numeric_limits<std::int64_t>::max();

void append_field(std::string& key, std::string_view field) {
  key += std::to_string(field.size());
  key += ':';
  key += field;
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

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

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

std::uint32_t collective_trace::intern_source(std::string_view source) {
  key_.assign(source);
  auto found = source_index_.find(key_);
  if (found != source_index_.end()) return found->second;
  const auto index = static_cast<std::uint32_t>(sources_.size());
  sources_.emplace_back(source);
  source_index_.emplace(key_, index);
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
      if (json.peek() != json_kind::object)
        json.fail_type("each line of a trace", "a JSON object: one collective call");
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
      bool saw_tensor = false, saw_shape = false, saw_dtype = false, saw_source = false;
      std::string_view key;
      while (json.next_member(key)) {
        if (key == "rank") {
          call.rank = static_cast<std::uint32_t>(json.integer("rank", 0, max_rank));
          saw_rank = true;
        } else if (key == "step") {
          call.step = json.integer("step", 0, max_trace_integer);
          saw_step = true;
        } else if (key == "seq") {
          call.seq = json.integer("seq", 0, max_trace_integer);
          saw_seq = true;
        } else if (key == "op") {
          signature.op = json.named(
              "op", [](std::string_view name) { return op_names.find(name); }, op_names.alternatives());
          saw_op = true;
        } else if (key == "tensor") {
          call.tensor = intern_name(json.text("tensor"));  // the view lives until the next string
          saw_tensor = true;
        } else if (key == "shape") {
          if (json.peek() != json_kind::array) json.fail_type("shape", "an array of non-negative integers");
          json.begin_array();
          while (json.next_element())
            signature.shape.push_back(json.integer("each extent of shape", 0, max_trace_integer));
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
        } else if (key == "source") {
          call.source = intern_source(json.text("source"));
          saw_source = true;
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
      if (!saw_source) call.source = intern_source("");
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

}  // namespace normcheck
