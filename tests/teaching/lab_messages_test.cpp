// The lab's messages: one text per message, shared by the session and the teaching page.

#include "normcheck/teaching/lab.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

using normcheck::lab_message;
using normcheck::lab_say;

TEST_CASE("every lab message sits at the index of its id and has a unique name") {
  const auto& messages = normcheck::lab_messages();
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    CAPTURE(messages[i].name);
    CHECK(static_cast<std::size_t>(messages[i].id) == i);
    CHECK(names.insert(messages[i].name).second);
    CHECK_FALSE(messages[i].text.empty());
  }
  CHECK(static_cast<std::size_t>(lab_message::show_no_prediction) + 1 == messages.size());
}

TEST_CASE("lab_say fills each gap once and never searches a part for gaps") {
  CHECK(lab_say(lab_message::iterate, {"1", "9/5 (≈ 1.8)"}) == "x1 = 9/5 (≈ 1.8)");
  CHECK(lab_say(lab_message::unknown_command, {"{1}{0}"}) == "unknown command '{1}{0}'; help lists the commands");
  CHECK(lab_say(lab_message::prediction_wrong, {"8/5", "2", "81/50", "-1/50"}) ==
        "prediction 8/5 is wrong: x2 = 81/50, the prediction is off by -1/50");
  CHECK(lab_say(lab_message::reset_done) == "reset: lr, x and the prediction are cleared");
}

TEST_CASE("the session's replies are the catalogue's texts") {
  normcheck::lab_session lab;
  CHECK(lab.execute("step").lines.front() == lab_say(lab_message::refused_lr_and_x));
  CHECK(lab.execute("frobnicate").lines.front() ==
        lab_say(lab_message::malformed, {lab_say(lab_message::unknown_command, {"frobnicate"})}));
  CHECK(lab.execute("step 0").lines.front() ==
        lab_say(lab_message::malformed,
                {lab_say(lab_message::bad_step_count, {std::to_string(normcheck::lab_max_steps), "0"})}));
  lab.execute("set lr 1/10");
  CHECK(lab.execute("step").lines.front() == lab_say(lab_message::refused_x));
  CHECK(lab.execute("show").lines.front() == lab_say(lab_message::show_lr, {"1/10 (≈ 0.1)"}));
}
