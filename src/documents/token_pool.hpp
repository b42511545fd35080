#pragma once
// Token arrays of one document read on worker threads (private to the partition reader).
//
// The reader, on the calling thread, finds where a large token array would end (its first ']'), hands the
// extent to the pool and goes on after it. A worker reads the array's literals straight into
// machine integers, as the reader's own fast path does. It accepts only the regular case: numbers and
// quoted literals the machine-integer scan takes, and null, separated by commas. Anything else (a
// fraction, a long significand, anything malformed) marks the task irregular, and the caller then reads
// the whole document again on one thread, so that results and error positions are those of a
// sequential read; the sums are exact, so where every task is regular the partition is the same too.

#include "normcheck/core/partition.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/io/json_reader.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

namespace normcheck::detail {

/// Where the token array that starts at `open` (a '[', the next value of `json`) ends if it is regular:
/// the offset of the first ']' after it. Nothing when there is none, or when entering the array would nest
/// deeper than `json`'s limit allows: that array is the reader's own, to reject it where it stands, as a
/// read on one thread does. `read_regular_tokens` on the text between confirms the end.
std::optional<std::uint64_t> token_array_end(const json_reader& json, std::string_view text, std::uint64_t open);

/// Sums the elements of `body` (the text between a token array's brackets) into `builder`, accepting
/// only regular elements (see above); false for anything else.
bool read_regular_tokens(std::string_view body, const number_limits& limits, microbatch_builder& builder);

/// Worker threads reading token arrays of one text.
class token_pool {
public:
  token_pool(std::string_view text, const number_limits& limits, unsigned workers);
  ~token_pool();
  token_pool(const token_pool&) = delete;
  token_pool& operator=(const token_pool&) = delete;

  /// Queues the array whose '[' is at `open` and ']' at `close`; returns its ticket.
  std::size_t add(std::uint64_t open, std::uint64_t close);
  /// Waits for every queued array; false when any of them was not regular.
  bool finish();
  /// The statistics of the array of `ticket` (after `finish` returned true).
  microbatch_stats take(std::size_t ticket);

private:
  struct task {
    std::uint64_t open = 0;
    std::uint64_t close = 0;
    microbatch_stats stats;
    bool regular = false;
  };
  void work();

  std::string_view text_;
  number_limits limits_;
  std::deque<task> tasks_;  // a deque: elements stay where they are while more are queued
  std::size_t next_ = 0;
  std::size_t done_ = 0;
  bool closed_ = false;
  std::mutex guard_;
  std::condition_variable changed_;
  std::vector<std::jthread> threads_;
};

}  // namespace normcheck::detail
