#include "token_pool.hpp"

#include "normcheck/core/machine_scan.hpp"

#include <cstring>
#include <memory>

#include <sched.h>

namespace normcheck::detail {

namespace {

bool is_whitespace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

std::optional<started_thread> start_thread(std::function<void(int first_core)> work) {
  struct start {
    std::function<void(int)> work;
    cpu_set_t allowed;
    bool widen;
  };
  auto begin = std::make_unique<start>(start{std::move(work), {}, false});
  started_thread started;
  pthread_attr_t attributes;
  if (::pthread_attr_init(&attributes) != 0) return std::nullopt;
  CPU_ZERO(&begin->allowed);
  const int here = ::sched_getcpu();
  if (here >= 0 && here < CPU_SETSIZE && ::sched_getaffinity(0, sizeof begin->allowed, &begin->allowed) == 0 &&
      CPU_ISSET(here, &begin->allowed) && CPU_COUNT(&begin->allowed) > 1) {
    cpu_set_t elsewhere = begin->allowed;
    CPU_CLR(here, &elsewhere);
    begin->widen = ::pthread_attr_setaffinity_np(&attributes, sizeof elsewhere, &elsewhere) == 0;
    if (begin->widen) started.kept_off = here;
  }
  auto run = [](void* argument) -> void* {
    const std::unique_ptr<start> owned(static_cast<start*>(argument));
    const int first_core = ::sched_getcpu();
    if (owned->widen) ::pthread_setaffinity_np(::pthread_self(), sizeof owned->allowed, &owned->allowed);
    owned->work(first_core);
    return nullptr;
  };
  const bool made = ::pthread_create(&started.handle, &attributes, run, begin.get()) == 0;
  ::pthread_attr_destroy(&attributes);
  if (!made) return std::nullopt;
  begin.release();  // the thread owns it now
  return started;
}

std::optional<std::uint64_t> token_array_end(const json_reader& json, std::string_view text, std::uint64_t open) {
  if (json.depth() >= json.limits().max_depth) return std::nullopt;
  // The first ']' after the '[' (memchr speed). It is the array's end exactly when the worker then reads
  // the text between as regular elements: a ']' inside a string, or a nested array or object, leaves an
  // irregular text behind, and the document is read again on one thread.
  const std::size_t close = text.find(']', open + 1);
  if (close == std::string_view::npos) return std::nullopt;
  return close;
}

std::size_t read_regular_elements(std::string_view text, std::size_t from, const number_limits& limits,
                                  microbatch_builder& builder) {
  const char* p = text.data() + from;
  const char* const end = text.data() + text.size();
  const char* after_last = p;  // just after the last element taken
  auto skip_whitespace = [&] {
    while (p != end && is_whitespace(*p)) ++p;
  };
  skip_whitespace();
  machine_literal literal;
  while (p != end) {
    const char first = *p;
    if (first == '"') {
      // Only a literal's own characters are read, so no escape or multi-byte character is passed over:
      // when the closing quote follows, the string's text is exactly the literal read.
      const std::size_t length = scan_machine_prefix({p + 1, static_cast<std::size_t>(end - p - 1)},
                                                     literal_form::json_string, limits, literal);
      const char* const close = p + 1 + length;
      if (length == 0 || close == end || *close != '"') break;
      p = close + 1;
      builder.add_token(literal);
    } else if (first == 'n') {
      if (end - p < 4 || std::memcmp(p, "null", 4) != 0) break;
      p += 4;
      builder.add_padding();
    } else {
      // The whole number token, as the general reader delimits it, must be the literal read: 1.2.3 is not
      // taken as 1.2.
      const std::size_t length = scan_machine_number({p, static_cast<std::size_t>(end - p)}, limits, literal);
      if (length == 0 || (length < static_cast<std::size_t>(end - p) && is_number_char(p[length]))) break;
      p += length;
      builder.add_token(literal);
    }
    after_last = p;
    if (p != end && *p == ',') {
      ++p;
    } else {
      skip_whitespace();
      if (p == end || *p != ',') break;
      ++p;
    }
    if (p != end && *p == ' ') ++p;
    skip_whitespace();
  }
  return static_cast<std::size_t>(after_last - text.data());
}

bool read_regular_piece(std::string_view text, std::uint64_t begin, std::uint64_t end, bool whole,
                        const number_limits& limits, microbatch_builder& builder) {
  // The text up to the piece's end, which is a delimiter: no element is read past it.
  std::size_t stop = read_regular_elements(text.substr(0, end), begin, limits, builder);
  const bool none = stop == begin;
  while (stop < end && is_whitespace(text[stop])) ++stop;
  return stop == end && (whole || !none);
}

token_pool::token_pool(std::string_view text, const number_limits& limits, unsigned workers)
    : text_(text), limits_(limits) {
  threads_.reserve(workers);  // before any thread starts: a started thread is always joined
  for (unsigned w = 1; w < workers; ++w) {
    // Without a thread, the calling thread reads what it would have (`finish`).
    const std::optional<started_thread> started = start_thread([this](int) { work(); });
    if (!started) break;
    threads_.push_back(started->handle);
  }
}

token_pool::~token_pool() {
  {
    const std::lock_guard<std::mutex> lock(guard_);
    closed_ = true;
    next_ = tasks_.size();  // queued pieces nobody waits for any more are not read
  }
  changed_.notify_all();
  for (const pthread_t handle : threads_) ::pthread_join(handle, nullptr);
}

std::size_t token_pool::add(std::uint64_t open, std::uint64_t close) {
  std::size_t ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(guard_);
    ticket = arrays_.size();
    const std::size_t first = tasks_.size();
    // Pieces end at a comma at least piece_bytes on; the last at the ']'. A comma inside a string, or
    // one that is not followed by an element, leaves a piece that is not regular.
    std::uint64_t begin = open + 1;
    while (close - begin >= 2 * piece_bytes) {
      const std::size_t comma = text_.find(',', begin + piece_bytes);
      if (comma >= close) break;
      tasks_.push_back({begin, comma, false, {}, false});
      begin = comma + 1;
    }
    const bool whole = tasks_.size() == first;
    tasks_.push_back({begin, close, whole, {}, false});
    arrays_.push_back({first, tasks_.size() - first});
  }
  changed_.notify_all();
  return ticket;
}

bool token_pool::finish() {
  while (run_one()) {
  }
  std::unique_lock<std::mutex> lock(guard_);
  changed_.wait(lock, [&] { return done_ == tasks_.size(); });
  for (const task& t : tasks_)
    if (!t.regular) return false;
  return true;
}

microbatch_stats token_pool::take(std::size_t ticket) {
  const auto [first, count] = arrays_[ticket];
  if (count == 1) return std::move(tasks_[first].stats);
  // The pieces' sums are exact, so that their sum is the array's: what one builder over it would give.
  microbatch_stats joined;
  rational sum;
  rational abs_sum;
  for (std::size_t t = first; t < first + count; ++t) {
    const microbatch_stats& piece = tasks_[t].stats;
    joined.valid_tokens += piece.valid_tokens;
    joined.padding += piece.padding;
    sum += piece.target_sum();
    abs_sum += piece.target_abs_sum();
  }
  if (joined.valid_tokens != 0) joined.set_sums({std::move(sum), std::move(abs_sum), {}});
  return joined;
}

bool token_pool::run_one() {
  task* current = nullptr;
  {
    const std::lock_guard<std::mutex> lock(guard_);
    if (next_ >= tasks_.size()) return false;
    current = &tasks_[next_++];
  }
  read(*current);
  return true;
}

void token_pool::read(task& piece) {
  bool regular = false;
  microbatch_stats stats;
  try {
    microbatch_builder builder;
    regular = read_regular_piece(text_, piece.begin, piece.end, piece.whole, limits_, builder);
    if (regular) stats = builder.finish();
  } catch (...) {  // out of memory, say: the reading thread reads it again and meets it there
    regular = false;
  }
  {
    const std::lock_guard<std::mutex> lock(guard_);
    piece.stats = std::move(stats);
    piece.regular = regular;
    ++done_;
  }
  changed_.notify_all();
}

void token_pool::work() {
  while (true) {
    task* current = nullptr;
    {
      std::unique_lock<std::mutex> lock(guard_);
      changed_.wait(lock, [&] { return next_ < tasks_.size() || closed_; });
      if (next_ >= tasks_.size()) return;  // closed, nothing left
      current = &tasks_[next_++];
    }
    read(*current);
  }
}

}  // namespace normcheck::detail
