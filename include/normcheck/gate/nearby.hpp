#pragma once
/// \file gate/nearby.hpp
/// Updates one change away from a given one. Two computations can give every group the same weight on an
/// update and differ on another: a double division by G and an uncompensated division by W agree where
/// G = W, a per-rank mean and the token mean agree where every rank holds as many tokens. The gate tells
/// whether two explanations are one computation in other words (they agree on every nearby update) or two
/// that this update cannot tell apart, and then names the change that would.

#include "normcheck/core/partition.hpp"

#include <string>
#include <vector>

namespace normcheck {

/// An update one change away, and that change in a user's words ("G ≠ W", "another number of ranks").
struct nearby_update {
  std::string change;
  partition update;
};

/// The updates one change from `update`, in this order: one more microbatch on every rank (another G, named
/// "G ≠ W" where G = W), one more rank (a copy of the last), and one more valid token in the first group
/// (uneven counts; not for weighted tokens, whose weights the change would have to invent), and for an auxiliary
/// term of a weight other than 1 that weight doubled. A change that
/// would take the update past the counts normcheck keeps exact is left out.
std::vector<nearby_update> nearby_updates(const partition& update);

}  // namespace normcheck
