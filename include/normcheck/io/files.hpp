#pragma once
/// \file io/files.hpp
/// Writing report files so that an interrupted run leaves the old file or none, never half of one.

#include <filesystem>
#include <string_view>

namespace normcheck {

/// Writes `content` to a temporary file beside `path`, flushes it, renames it over `path` and flushes the
/// directory, so that the new name survives a crash.
/// Throws `error(io_error)` naming the path when it cannot.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace normcheck
