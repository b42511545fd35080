// Where the partition reader's worker threads start (src/documents/token_pool.hpp): on a core other than
// their creator's, then free to run on every core their creator may.

#include "token_pool.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <optional>

#include <pthread.h>
#include <sched.h>

namespace {

using normcheck::detail::start_thread;
using normcheck::detail::started_thread;

TEST_CASE("a worker starts off its creator's core, then may run on every core its creator may") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  // A thread left to the scheduler starts on its creator's core often enough (the first of a process about
  // half the time, later ones less): two hundred starts, so that a worker not placed elsewhere does not
  // pass by chance.
  for (int attempt = 0; attempt < 200; ++attempt) {
    CAPTURE(attempt);
    std::atomic<bool> ran = false;
    int first_core = -2;
    cpu_set_t widened;
    CPU_ZERO(&widened);
    const std::optional<started_thread> started = start_thread([&](int core) {
      first_core = core;
      ::sched_getaffinity(0, sizeof widened, &widened);
      ran = true;
    });
    REQUIRE(started);
    // Busy, as the reader is while its worker starts, for at most a second.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!ran && std::chrono::steady_clock::now() < until) {
    }
    REQUIRE(::pthread_join(started->handle, nullptr) == 0);
    REQUIRE(ran);
    REQUIRE(CPU_EQUAL(&widened, &allowed));
    REQUIRE(first_core >= 0);
    if (CPU_COUNT(&allowed) > 1) {
      REQUIRE(started->kept_off >= 0);
      REQUIRE(first_core != started->kept_off);
      REQUIRE(CPU_ISSET(first_core, &allowed));
    } else {
      REQUIRE(started->kept_off == -1);  // one core: nowhere else to go
    }
  }
}

TEST_CASE("a caller confined to one core starts its worker there") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  const int here = ::sched_getcpu();
  REQUIRE(here >= 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(here, &one);
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);
  int first_core = -2;
  const std::optional<started_thread> started = start_thread([&](int core) { first_core = core; });
  ::sched_setaffinity(0, sizeof allowed, &allowed);
  REQUIRE(started);
  REQUIRE(::pthread_join(started->handle, nullptr) == 0);
  CHECK(started->kept_off == -1);
  CHECK(first_core == here);
}

}  // namespace
