#pragma once
/// \file documents/section.hpp
/// A feature's part of a normcheck/1 document: the gate's `observed` and `expect_gate`, a recipe's
/// `recipe` and `expect.recipe`. One handler reads its keys, settles them against the whole document,
/// judges them once the gradients are known and writes its part of every report, so that a new key
/// touches its handler (and the one list that registers it), not the reader, the checker and each
/// printer. The reader knows the handlers only through this interface; the check layer registers them.

#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/field_reader.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

struct partition_file;
class json_writer;

/// One feature's part of a document, and what it concluded. A fresh instance serves one document.
class section {
public:
  virtual ~section() = default;

  /// The top-level keys it reads, e.g. {"observed", "expect_gate"}.
  virtual std::vector<std::string_view> keys() const = 0;
  /// The keys of `expect` it reads, e.g. {"recipe"}.
  virtual std::vector<std::string_view> expect_keys() const { return {}; }
  /// Reads the value of top-level `key` (one of `keys()`), failing through `in` with a located error.
  virtual void read(std::string_view key, field_reader& in) = 0;
  /// Reads the value of `expect.key` (one of `expect_keys()`).
  virtual void read_expect(std::string_view /*key*/, field_reader& in) { in.skip_value(); }
  /// Checks what depends on the whole document (the ranks, the objective) once it is read.
  virtual void settle(const partition_file& /*document*/, field_reader& /*in*/) {}

  /// Whether the document has this part at all.
  virtual bool present() const = 0;
  /// Judges the part once the document's gradients are known; appends each claim that does not hold.
  virtual void judge(const partition_file& document, const gradient_set& gradients,
                     std::vector<std::string>& failures) = 0;
  /// Writes its lines of the text report (after the gradients); nothing when absent.
  virtual void print_text(std::ostream& out, const partition_file& document, const gradient_set& gradients) const = 0;
  /// Writes its members of the file's JSON report; nothing when absent.
  virtual void write_json(json_writer& json, const partition_file& document, const gradient_set& gradients) const = 0;
  /// One line saying why it fails the file, for a JUnit message; nullopt when it does not.
  virtual std::optional<std::string> failure_summary() const { return std::nullopt; }
};

/// Makes a fresh handler for each document read.
using section_factory = std::function<std::unique_ptr<section>()>;
/// The handlers a reader knows, in the order reports show them.
using section_registry = std::vector<section_factory>;

}  // namespace normcheck
