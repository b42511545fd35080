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

/// Writes `content` to a temporary file beside `path`, flushes it, renames it over `path` and flushes the
/// directory, so that the new name survives a crash.
/// Throws `error(io_error)` naming the path when it cannot.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace normcheck
