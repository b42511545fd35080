// Exact optimizer trajectories: each feature against a hand computation, and the laws they obey.

#include "normcheck/core/errors.hpp"
#include "normcheck/teaching/trajectory.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

using normcheck::rational;

namespace {

rational exact(std::string_view text) { return normcheck::read_number(text, normcheck::literal_form::json_string); }

rational identity(const rational& x) { return x; }

normcheck::optimizer_settings plain(std::string_view learning_rate) {
  normcheck::optimizer_settings settings;
  settings.learning_rate = exact(learning_rate);
  return settings;
}

// A small rational from generated integers, denominator positive.
rational small_rational(int numerator, int denominator) {
  return rational(numerator) / rational(denominator == 0 ? 1 : (denominator < 0 ? -denominator : denominator));
}

}  // namespace

TEST_CASE("plain descent on x squared over 2 takes the lesson's two steps") {
  const std::vector<rational> slow = normcheck::trajectory(identity, 2, plain("0.1"), 1);
  const std::vector<rational> fast = normcheck::trajectory(identity, 2, plain("0.2"), 1);
  REQUIRE(slow.size() == 2);
  CHECK(slow[0] == 2);
  CHECK(slow[1] == exact("9/5"));
  CHECK(fast[1] == exact("8/5"));
}

TEST_CASE("clipping by value clamps the gradient to the threshold") {
  normcheck::optimizer_settings settings;
  settings.clip_value = exact("3/2");
  CHECK(normcheck::clip_gradient(3, settings) == exact("3/2"));
  CHECK(normcheck::clip_gradient(-3, settings) == exact("-3/2"));
  CHECK(normcheck::clip_gradient(exact("1/2"), settings) == exact("1/2"));
  CHECK(normcheck::clip_gradient(exact("3/2"), settings) == exact("3/2"));
  CHECK(normcheck::clip_gradient(0, settings) == 0);
}

TEST_CASE("clipping by norm scales a large gradient down to the threshold") {
  normcheck::optimizer_settings settings;
  settings.clip_norm = 2;
  CHECK(normcheck::clip_gradient(-5, settings) == -2);
  CHECK(normcheck::clip_gradient(exact("7/3"), settings) == 2);
  CHECK(normcheck::clip_gradient(exact("-1/3"), settings) == exact("-1/3"));
  settings.clip_norm = 0;
  CHECK(normcheck::clip_gradient(exact("1/3"), settings) == 0);
  CHECK(normcheck::clip_gradient(0, settings) == 0);
}

TEST_CASE("weight decay adds lambda times x to the gradient") {
  normcheck::optimizer_settings settings = plain("1/2");
  settings.weight_decay = exact("1/2");
  const std::vector<rational> path = normcheck::trajectory([](const rational&) { return rational(0); }, 1, settings, 2);
  CHECK(path[1] == exact("3/4"));
  CHECK(path[2] == exact("9/16"));
}

TEST_CASE("the momentum buffer starts with the first gradient") {
  normcheck::optimizer_settings settings = plain("1/2");
  settings.momentum = exact("1/2");
  const std::vector<rational> path = normcheck::trajectory(identity, 1, settings, 3);
  // b1 = 1, x1 = 1/2; b2 = 1/2 + 1/2 = 1, x2 = 0; b3 = 1/2 + 0, x3 = -1/4.
  CHECK(path[1] == exact("1/2"));
  CHECK(path[2] == 0);
  CHECK(path[3] == exact("-1/4"));
}

TEST_CASE("clipping happens before weight decay") {
  normcheck::optimizer_settings settings = plain("1");
  settings.clip_value = 1;
  settings.weight_decay = 1;
  // g = 10 is clipped to 1, then λ·x = 2 is added: x1 = 2 - (1 + 2) = -1.
  const std::vector<rational> path =
      normcheck::trajectory([](const rational&) { return rational(10); }, 2, settings, 1);
  CHECK(path[1] == -1);
}

TEST_CASE("a negative clipping threshold is rejected") {
  normcheck::optimizer_settings settings = plain("0.1");
  settings.clip_norm = -1;
  try {
    (void)normcheck::trajectory(identity, 1, settings, 1);
    FAIL("a negative threshold was accepted");
  } catch (const normcheck::error& e) {
    CHECK(e.code() == normcheck::error_code::usage_error);
  }
}

TEST_CASE("first_parting finds the first difference and its gap") {
  const std::vector<rational> a{0, 1, 2, 5};
  const std::vector<rational> b{0, 1, 3, 5};
  const std::optional<normcheck::parting> parts = normcheck::first_parting(a, b);
  REQUIRE(parts);
  CHECK(parts->step == 2);
  CHECK(parts->gap == -1);
  CHECK_FALSE(normcheck::first_parting(a, a));
}

TEST_CASE("describe names every feature that is on") {
  normcheck::optimizer_settings settings = plain("0.1");
  CHECK(normcheck::describe(settings) == "η = 1/10");
  settings.momentum = exact("0.9");
  settings.clip_value = 2;
  const std::string text = normcheck::describe(settings);
  CHECK(text.find("μ = 9/10") != std::string::npos);
  CHECK(text.find("c = 2") != std::string::npos);
}

TEST_CASE("laws of the disguise on random linear optimizers") {
  CHECK(rc::check(
      "a gradient scaled by k with rate eta equals the true gradient with rate k times eta under linear optimizers",
      [](int kn, int kd, int rate, int start, int target, int momentum) {
        const rational k = small_rational(kn % 50, kd % 50);
        const rational eta = small_rational(rate % 20, 40);
        const rational mu = small_rational(momentum % 10, 10);
        const rational y = small_rational(target % 100, 7);
        const rational x0 = small_rational(start % 100, 3);
        const normcheck::gradient_function correct = [y](const rational& x) {
          rational g = x - y;
          return g;
        };
        const normcheck::gradient_function scaled = [y, k](const rational& x) {
          rational g = k * (x - y);
          return g;
        };
        normcheck::optimizer_settings a;
        a.learning_rate = eta;
        a.momentum = mu;
        normcheck::optimizer_settings b = a;
        b.learning_rate = k * eta;
        RC_ASSERT(!normcheck::first_parting(normcheck::trajectory(scaled, x0, a, 5),
                                            normcheck::trajectory(correct, x0, b, 5)));
      }));
}

TEST_CASE("a wrong disguise that forgets to scale the rate parts at once") {
  // The law above must be able to fail: keep the learning rate as it is and the runs part at step 1.
  const normcheck::gradient_function correct = [](const rational& x) {
    rational g = x - 3;
    return g;
  };
  const normcheck::gradient_function scaled = [](const rational& x) {
    rational g = 2 * (x - 3);
    return g;
  };
  const std::optional<normcheck::parting> parts = normcheck::first_parting(
      normcheck::trajectory(scaled, 0, plain("0.1"), 3), normcheck::trajectory(correct, 0, plain("0.1"), 3));
  REQUIRE(parts);
  CHECK(parts->step == 1);
  CHECK(parts->gap == exact("0.3"));
}

TEST_CASE("laws of clipping in one dimension") {
  CHECK(rc::check("clipping by norm equals clipping by value in one dimension", [](int gn, int gd, int cn, int cd) {
    const rational g = small_rational(gn % 1000, gd % 97);
    rational c = small_rational(cn % 1000, cd % 89);
    if (c < 0) c = -c;
    normcheck::optimizer_settings by_value;
    by_value.clip_value = c;
    normcheck::optimizer_settings by_norm;
    by_norm.clip_norm = c;
    const rational v = normcheck::clip_gradient(g, by_value);
    RC_ASSERT(v == normcheck::clip_gradient(g, by_norm));
    RC_ASSERT(abs(v) <= c);
    RC_ASSERT(normcheck::is_canonical(v));
  }));
}
