#include "token_pool.hpp"

#include "normcheck/core/exact_sum.hpp"

namespace normcheck::detail {

namespace {

bool is_whitespace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

std::optional<std::uint64_t> token_array_end(const json_reader& json, std::string_view text, std::uint64_t open) {
  if (json.depth() >= json.limits().max_depth) return std::nullopt;
  // The first ']' after the '[' (memchr speed). It is the array's end exactly when the worker then reads
  // the text between as regular elements: a ']' inside a string, or a nested array or object, leaves an
  // irregular text behind, and the document is read again on one thread.
  const std::size_t close = text.find(']', open + 1);
  if (close == std::string_view::npos) return std::nullopt;
  return close;
}

bool read_regular_tokens(std::string_view body, const number_limits& limits, microbatch_builder& builder) {
  std::size_t i = 0;
  auto skip_whitespace = [&] {
    while (i < body.size() && is_whitespace(body[i])) ++i;
  };
  skip_whitespace();
  if (i == body.size()) return true;  // []
  while (true) {
    skip_whitespace();
    if (i == body.size()) return false;  // a comma with no element after it
    machine_literal literal;
    if (body.compare(i, 4, "null") == 0) {
      i += 4;
      builder.add_padding();
    } else if (body[i] == '"') {
      const std::size_t length = scan_machine_prefix(body.substr(i + 1), literal_form::json_string, limits, literal);
      const std::size_t close = i + 1 + length;
      if (length == 0 || close >= body.size() || body[close] != '"') return false;
      i = close + 1;
      builder.add_token(literal);
    } else if (body[i] == '-' || (body[i] >= '0' && body[i] <= '9')) {
      // What follows must be whitespace, a comma or the end (checked below): a longer number, such as
      // 1.2.3, is not taken.
      const std::size_t length = scan_machine_prefix(body.substr(i), literal_form::json_number, limits, literal);
      if (length == 0) return false;
      i += length;
      builder.add_token(literal);
    } else {
      return false;
    }
    skip_whitespace();
    if (i == body.size()) return true;
    if (body[i] != ',') return false;
    ++i;
  }
}

token_pool::token_pool(std::string_view text, const number_limits& limits, unsigned workers)
    : text_(text), limits_(limits) {
  for (unsigned w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
}

token_pool::~token_pool() {
  {
    const std::lock_guard<std::mutex> lock(guard_);
    closed_ = true;
    next_ = tasks_.size();  // queued arrays nobody waits for any more are not read
  }
  changed_.notify_all();
  // The threads join as threads_ is destroyed.
}

std::size_t token_pool::add(std::uint64_t open, std::uint64_t close) {
  std::size_t ticket = 0;
  {
    const std::lock_guard<std::mutex> lock(guard_);
    ticket = tasks_.size();
    tasks_.push_back({open, close, {}, false});
  }
  changed_.notify_one();
  return ticket;
}

bool token_pool::finish() {
  std::unique_lock<std::mutex> lock(guard_);
  changed_.wait(lock, [&] { return done_ == tasks_.size(); });
  for (const task& t : tasks_)
    if (!t.regular) return false;
  return true;
}

microbatch_stats token_pool::take(std::size_t ticket) { return std::move(tasks_[ticket].stats); }

void token_pool::work() {
  while (true) {
    task* current = nullptr;
    {
      std::unique_lock<std::mutex> lock(guard_);
      changed_.wait(lock, [&] { return next_ < tasks_.size() || closed_; });
      if (next_ >= tasks_.size()) return;  // closed, nothing left
      current = &tasks_[next_++];
    }
    bool regular = false;
    microbatch_stats stats;
    try {
      microbatch_builder builder;
      regular =
          read_regular_tokens(text_.substr(current->open + 1, current->close - current->open - 1), limits_, builder);
      if (regular) stats = builder.finish();
    } catch (...) {  // out of memory, say: the reading thread reads it again and meets it there
      regular = false;
    }
    {
      const std::lock_guard<std::mutex> lock(guard_);
      current->stats = std::move(stats);
      current->regular = regular;
      ++done_;
    }
    changed_.notify_all();
  }
}

}  // namespace normcheck::detail
