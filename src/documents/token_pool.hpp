#pragma once
// Token arrays of one document read on worker threads (private to the partition reader).
//
// The reader, on the calling thread, finds where a large token array would end (its first ']'), hands the
// extent to the pool and goes on after it. The pool cuts a long array into pieces at commas, in place (no
// copy), and a worker reads a piece's literals straight into machine integers with the loop the reader's
// own token arrays go through (`read_regular_elements`). It accepts only the regular case: numbers and
// quoted literals the machine-integer scan takes, and null, separated by commas. Anything else (a
// fraction, a long significand, anything malformed, a comma that was not a separator) marks the piece
// irregular, and the caller then reads the whole document again on one thread, so that results and error
// positions are those of a sequential read; the sums are exact, so where every piece is regular the
// partition is the same too.

#include "normcheck/core/partition.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/io/json_reader.hpp"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include <pthread.h>

namespace normcheck::detail {

/// Where the token array that starts at `open` (a '[', the next value of `json`) ends if it is regular:
/// the offset of the first ']' after it. Nothing when there is none, or when entering the array would nest
/// deeper than `json`'s limit allows: that array is the reader's own, to reject it where it stands, as a
/// read on one thread does. `read_regular_piece` confirms the end.
std::optional<std::uint64_t> token_array_end(const json_reader& json, std::string_view text, std::uint64_t open);

/// Sums the regular elements (see above) of the token array whose first element is at or after `from` (just
/// after its '[') into `builder`, up to the first element that is not regular or the first separator that is
/// not a comma. Returns the offset just after the last element taken (`from` when none): the reader goes on
/// from there, with the array's ']', the element it did not take or whatever else stands there, as if it had
/// read those elements itself.
std::size_t read_regular_elements(std::string_view text, std::size_t from, const number_limits& limits,
                                  microbatch_builder& builder);

/// Sums the elements of the piece [begin, end) of a token array (from just after its '[' or a comma to just
/// before a comma or its ']') into `builder`; false when any of them is not regular, or when the piece is
/// not the `whole` array and holds no element.
bool read_regular_piece(std::string_view text, std::uint64_t begin, std::uint64_t end, bool whole,
                        const number_limits& limits, microbatch_builder& builder);

/// A thread made by `start_thread`: its handle (to join), and the core it was kept off at its start (-1
/// when none).
struct started_thread {
  pthread_t handle{};
  int kept_off = -1;
};

/// Starts `work` on a new thread, placed on one of the caller's allowed cores other than the one the
/// caller runs on. Left to itself, the scheduler often queues a new thread behind its creator, busy
/// reading, until its next balancing pass 3 to 4 ms later: longer than two cores take to read a 1M-token
/// document. Placed, the thread starts within about 0.2 ms; its first act is to widen its mask back to
/// the caller's, so that from then on it runs wherever the scheduler likes. `work` is given the core the
/// thread ran on before that (-1 when unknown). Nothing when no thread could be made.
std::optional<started_thread> start_thread(std::function<void(int first_core)> work);

/// Token arrays of one text read by `workers` threads: the calling thread is one of them in `finish`. A large
/// array is read in pieces, so that the threads share it.
class token_pool {
public:
  token_pool(std::string_view text, const number_limits& limits, unsigned workers);
  ~token_pool();
  token_pool(const token_pool&) = delete;
  token_pool& operator=(const token_pool&) = delete;

  /// Queues the array whose '[' is at `open` and ']' at `close`; returns its ticket.
  std::size_t add(std::uint64_t open, std::uint64_t close);
  /// Reads what is still queued and waits for every array; false when any of them was not regular.
  bool finish();
  /// The statistics of the array of `ticket` (after `finish` returned true).
  microbatch_stats take(std::size_t ticket);

  /// The length a piece of an array has at least (the last one of an array up to twice as long).
  static constexpr std::uint64_t piece_bytes = 1 << 18;

private:
  struct task {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    bool whole = false;  // the piece is its array's only one
    microbatch_stats stats;
    bool regular = false;
  };
  struct array {
    std::size_t first;  // its first piece in tasks_
    std::size_t count;  // and how many
  };
  bool run_one();
  void read(task& piece);
  void work();

  std::string_view text_;
  number_limits limits_;
  std::deque<task> tasks_;  // a deque: elements stay where they are while more are queued
  std::vector<array> arrays_;
  std::size_t next_ = 0;
  std::size_t done_ = 0;
  bool closed_ = false;
  std::mutex guard_;
  std::condition_variable changed_;
  std::vector<pthread_t> threads_;  // joined by the destructor
};

}  // namespace normcheck::detail
