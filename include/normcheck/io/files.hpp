#pragma once
/// \file io/files.hpp
/// Files in and out: reading an input whole within a size limit, and writing an output so that an
/// interrupted run leaves the old file or none, never half of one. Every command reads and writes
/// files through these two functions.

#include "normcheck/io/json_reader.hpp"

#include <filesystem>
#include <string>
#include <string_view>

namespace normcheck {

/// How errors and reports name standard input, which commands read for the path "-".
inline constexpr std::string_view standard_input_name = "<stdin>";

/// Reads a whole regular file, within `limits.max_file_size`; throws `error(io_error)` (a missing or
/// unreadable path, a directory, a FIFO or device, a file that changes size while read) or
/// `error(limit_exceeded)`. Never blocks on a FIFO. The path "-" reads standard input to its end.
std::string load_file(const std::filesystem::path& path, const reader_limits& limits = {});

/// Writes a report so that it never destroys what `path` names. A regular file, or a path that does not
/// exist yet, is replaced atomically: a temporary file beside it, flushed, renamed over it, the directory
/// flushed, so an interrupted run leaves the old file or the new one, never half of one (and SIGTERM or
/// SIGINT remove the temporary file). A symbolic link is followed and its target replaced. A character
/// device, a FIFO or an open descriptor (/dev/stdout) is written through, never replaced. A directory or a
/// block device is an `io_error`, and so is any failure, naming the path; an empty path is `usage_error`.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

/// While it lives, SIGTERM and SIGINT first remove the file at `path`, then end the process as they would
/// have. One guard at a time; the previous handlers come back when it ends.
class temporary_file_guard {
public:
  explicit temporary_file_guard(const std::string& path);
  ~temporary_file_guard();
  temporary_file_guard(const temporary_file_guard&) = delete;
  temporary_file_guard& operator=(const temporary_file_guard&) = delete;
};

}  // namespace normcheck
