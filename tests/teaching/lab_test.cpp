// The optimization lab driven command by command.

#include "normcheck/teaching/lab.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

using normcheck::lab_session;
using normcheck::lab_status;
using normcheck::rational;

namespace {

rational lab_value(std::string_view text) { return normcheck::read_number(text, normcheck::literal_form::json_string); }

std::string joined(const normcheck::lab_reply& reply) {
  std::string out;
  for (const std::string& line : reply.lines) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("the lab reproduces the lesson exactly") {
  lab_session lab;
  CHECK(lab.execute("reset").status == lab_status::done);
  CHECK(lab.execute("set lr 0.1").status == lab_status::done);
  CHECK(lab.execute("set x 2").status == lab_status::done);
  const normcheck::lab_reply first = lab.execute("step");
  CHECK(first.status == lab_status::done);
  CHECK(joined(first) == "x1 = 9/5 (≈ 1.8)\n");
  CHECK(*lab.state().position == lab_value("1.8"));

  lab.execute("reset");
  lab.execute("set lr 0.2");
  lab.execute("set x 2");
  CHECK(joined(lab.execute("step")) == "x1 = 8/5 (≈ 1.6)\n");
  CHECK(*lab.state().position == lab_value("1.6"));
}

TEST_CASE("stepping before lr and x are set is refused and names what to set") {
  lab_session lab;
  normcheck::lab_reply reply = lab.execute("step");
  CHECK(reply.status == lab_status::refused);
  CHECK(joined(reply).find("lr (set lr VALUE) and x (set x VALUE)") != std::string::npos);
  lab.execute("set lr 0.1");
  reply = lab.execute("step 3");
  CHECK(reply.status == lab_status::refused);
  CHECK(joined(reply).find("x (set x VALUE) is set") != std::string::npos);
  CHECK(lab.state().iteration == 0);
  lab.execute("reset");
  lab.execute("set x 2");
  reply = lab.execute("step");
  CHECK(reply.status == lab_status::refused);
  CHECK(joined(reply).find("lr (set lr VALUE) is set") != std::string::npos);
  CHECK(*lab.state().position == 2);
}

TEST_CASE("a prediction is judged against the exact next iterate") {
  lab_session lab;
  lab.execute("set lr 0.1");
  lab.execute("set x 2");
  lab.execute("predict 1.8");
  CHECK(joined(lab.execute("step")).find("prediction 9/5 is right") != std::string::npos);
  CHECK_FALSE(lab.state().prediction);
  lab.execute("predict 1.6");
  const std::string wrong = joined(lab.execute("step"));
  CHECK(wrong.find("prediction 8/5 is wrong: x2 = 81/50, the prediction is off by -1/50") != std::string::npos);
  // The double nearest 1.8, written as float.hex() prints it, is not 9/5.
  lab.execute("reset");
  lab.execute("set lr 1/10");
  lab.execute("set x 2");
  lab.execute("predict 0x1.ccccccccccccdp+0");
  CHECK(joined(lab.execute("step")).find("is wrong: x1 = 9/5") != std::string::npos);
}

TEST_CASE("step K shows every iterate and judges only the next one") {
  lab_session lab;
  lab.execute("set lr 1/2");
  lab.execute("set x 8");
  lab.execute("predict 4");
  const normcheck::lab_reply reply = lab.execute("step 3");
  CHECK(joined(reply) == "x1 = 4\nprediction 4 is right: it equals x1 exactly\nx2 = 2\nx3 = 1\n");
  CHECK(lab.state().iteration == 3);
}

TEST_CASE("set x restarts the count and reset clears everything") {
  lab_session lab;
  lab.execute("set lr 0.5");
  lab.execute("set x 1");
  lab.execute("step 2");
  CHECK(lab.state().iteration == 2);
  lab.execute("set x 3");
  CHECK(lab.state().iteration == 0);
  lab.execute("predict 1");
  lab.execute("reset");
  CHECK_FALSE(lab.state().learning_rate);
  CHECK_FALSE(lab.state().position);
  CHECK_FALSE(lab.state().prediction);
  CHECK(lab.state().iteration == 0);
}

TEST_CASE("malformed commands are reported and change nothing") {
  for (const char* line : {"frobnicate", "set", "set lr", "set y 2", "set lr abc", "set lr 0", "set lr -1/10",
                           "set x 1e", "set x 0.1.2", "step 0", "step 1001", "step two", "step 1 2", "show extra",
                           "predict", "predict 1 2", "reset now", "quit please", "set lr NaN"}) {
    CAPTURE(line);
    lab_session lab;
    const normcheck::lab_reply reply = lab.execute(line);
    CHECK(reply.status == lab_status::malformed);
    REQUIRE(reply.lines.size() == 1);
    CHECK(reply.lines.front().rfind("malformed: ", 0) == 0);
    CHECK_FALSE(lab.state().learning_rate);
    CHECK_FALSE(lab.state().position);
  }
}

TEST_CASE("comments, blank lines, carriage returns and quit") {
  lab_session lab;
  CHECK(lab.execute("").lines.empty());
  CHECK(lab.execute("   ").lines.empty());
  CHECK(lab.execute("# set lr 5").lines.empty());
  CHECK_FALSE(lab.state().learning_rate);
  CHECK(lab.execute("set lr 0.1\r").status == lab_status::done);
  CHECK(lab.execute("quit").status == lab_status::quit);
}

TEST_CASE("show describes what is set and what is not") {
  lab_session lab;
  std::string text = joined(lab.execute("show"));
  CHECK(text.find("lr: not set (set lr VALUE)") != std::string::npos);
  CHECK(text.find("x: not set (set x VALUE)") != std::string::npos);
  lab.execute("set lr 0.1");
  lab.execute("set x 2");
  lab.execute("step");
  text = joined(lab.execute("show"));
  CHECK(text.find("lr: 1/10 (≈ 0.1)") != std::string::npos);
  CHECK(text.find("x: x1 = 9/5 (≈ 1.8)") != std::string::npos);
  CHECK(text.find("prediction for x2: none") != std::string::npos);
}

TEST_CASE("help and the banner say what the instrument does not have") {
  for (const std::vector<std::string>& lines : {normcheck::lab_help(), normcheck::lab_banner()}) {
    std::string text;
    for (const std::string& line : lines) text += line + "\n";
    for (const char* missing : {"no replicas", "no all-reduce", "no optimizer state", "no data pipeline",
                                "no completion semantics"})
      CHECK(text.find(missing) != std::string::npos);
  }
  std::string help;
  for (const std::string& line : normcheck::lab_help()) help += line + "\n";
  for (const char* command :
       {"reset", "set lr VALUE", "set x VALUE", "predict VALUE", "step [K]", "show", "help", "quit"})
    CHECK(help.find(command) != std::string::npos);
}

TEST_CASE("the lab's gradient is the library's gradient of x squared over 2") {
  CHECK(normcheck::lab_gradient(lab_value("9/5")) == lab_value("9/5"));
  CHECK(rc::check("the gradient of x squared over 2 is x", [](int n, int d) {
    const rational x = rational(n) / rational(d == 0 ? 1 : d);
    RC_ASSERT(normcheck::lab_gradient(x) == x);
  }));
}

TEST_CASE("a step is x minus lr times x") {
  CHECK(rc::check("one lab step gives (1 - lr) x", [](int xn, unsigned rate) {
    lab_session lab;
    const std::string lr = std::to_string(rate % 1000 + 1) + "/" + std::to_string(100);
    RC_ASSERT(lab.set_learning_rate(lr).status == lab_status::done);
    RC_ASSERT(lab.set_position(std::to_string(xn)).status == lab_status::done);
    lab.step(1);
    const rational eta = lab_value(lr);
    const rational x0(xn);
    RC_ASSERT(*lab.state().position == x0 - eta * x0);
  }));
}
