#pragma once
/// \file io/files.hpp
/// Files in and out: reading an input whole within a size limit (mapped, or copied), and writing an
/// output so that an interrupted run leaves the old file or none, never half of one. Every command reads
/// and writes files through these functions.

#include "normcheck/io/json_reader.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// How errors and reports name standard input, which commands read for the path "-".
inline constexpr std::string_view standard_input_name = "<stdin>";

/// What identifies a file and its content when it is opened, compared again after it is read.
struct file_identity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t modified_seconds = 0;
  std::int64_t modified_nanoseconds = 0;
  std::int64_t changed_seconds = 0;
  std::int64_t changed_nanoseconds = 0;
};

/// The text of an input: a regular file mapped read-only, so that it is neither copied nor held in
/// anonymous memory, or standard input (and the rare file that cannot be mapped) read into memory.
class input_text {
public:
  input_text() = default;
  input_text(input_text&& other) noexcept;
  input_text& operator=(input_text&& other) noexcept;
  input_text(const input_text&) = delete;
  input_text& operator=(const input_text&) = delete;
  ~input_text();

  /// The text; valid while this object lives.
  std::string_view view() const noexcept;
  /// Throws `error(io_error)` naming the file when it changed since it was opened: another size, another
  /// inode (replaced by a rename), or a modification or change time that moved (rewritten in place, even at
  /// the same size). A file that shrinks under its mapping reads as zeros past its new end instead of ending
  /// the process with SIGBUS, so whatever was read from it must be set aside when this throws. A write
  /// within the clock tick of the open that leaves the size alone is seen only where the file system's
  /// timestamps are finer than that tick.
  void require_unchanged() const;

private:
  friend input_text open_input(const std::filesystem::path& path, const reader_limits& limits);
  void close() noexcept;

  std::string name_;
  std::string owned_;
  const char* mapped_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
  int slot_ = -1;  // where the mapping is watched for SIGBUS
  file_identity seen_;  // the file as it was opened
};

/// Lets normcheck own SIGBUS (mapped inputs that shrink read as zeros, reported as io_error) and SIGTERM and
/// SIGINT while a report is written (its temporary file removed first). The executable calls it; a library
/// in someone else's process (the Python extension) does not, and then reads inputs into memory instead of
/// mapping them and leaves every signal disposition alone.
void install_signal_handlers();

/// Opens an input as `load_file` reads it (the same checks and errors), mapping a regular file once
/// `install_signal_handlers` was called.
input_text open_input(const std::filesystem::path& path, const reader_limits& limits = {});

/// Reads a whole regular file, within `limits.max_file_size`; throws `error(io_error)` (a missing or
/// unreadable path, a directory, a FIFO or device, a file that changes size while read) or
/// `error(limit_exceeded)`. Never blocks on a FIFO. The path "-" reads standard input to its end.
std::string load_file(const std::filesystem::path& path, const reader_limits& limits = {});

/// Writes a report so that it never destroys what `path` names. A regular file, or a path that does not
/// exist yet, is replaced atomically: a temporary file beside it, flushed, renamed over it, the directory
/// flushed, so an interrupted run leaves the old file or the new one, never half of one (and, with
/// `install_signal_handlers`, SIGTERM or SIGINT remove the temporary file). A symbolic link is followed and its target
/// replaced. A character device, a FIFO or an open descriptor (/dev/stdout) is written through, never replaced. A
/// directory or a block device is an `io_error`, and so is any failure, naming the path; an empty path is
/// `usage_error`.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

/// Throws `error(usage_error)` when `output` (the value of `option`, e.g. "--output") is the same file as one
/// of `inputs`, links followed: a report written there would replace a document it is about. An output
/// that does not exist yet, or is not a regular file (/dev/stdout), names no input.
void refuse_output_over_inputs(std::string_view option, const std::filesystem::path& output,
                               const std::vector<std::filesystem::path>& inputs);

/// While it lives, SIGTERM and SIGINT first remove the file at `path`, then end the process as they would
/// have, once `install_signal_handlers` was called (without it, nothing). One guard at a time; the previous
/// handlers come back when it ends.
class temporary_file_guard {
public:
  explicit temporary_file_guard(const std::string& path);
  ~temporary_file_guard();
  temporary_file_guard(const temporary_file_guard&) = delete;
  temporary_file_guard& operator=(const temporary_file_guard&) = delete;
};

}  // namespace normcheck
