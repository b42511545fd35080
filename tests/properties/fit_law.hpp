#pragma once
// The fit law of the per-group gate: for a random update (W 1–4, G 1–4, with and without sequences and
// padding) and a random planted per-group weight formula, the measured weight table is written into a
// normcheck/1 document twice, once exactly and once as a float32 program computes it, and judged by the
// whole gate (`check` of the document). The diagnosis must name the planted formula, or a formula whose
// table equals it on that update; a planted table never passes unless it equals the objective's (and a
// named mistake whose table equals the objective's could hide: inconclusive); the objective's own table
// passes or is inconclusive.
//
// What a name means is decided here, independently of the gate, from docs/gate.md: "local_mean" is the
// normalization of that name in the declared objective's counts, "local_mean(sequence_mean)" in another
// objective's, "token_mean" (any objective's name) that objective's correct table, "sum_of_sequence_means"
// local_sum in sequence counts, and a suffix ×W, /W, ×G, /G, ×W·G, /(W·G), ×W/G, ×G/W, ×k, /k, ×p/q
// multiplies the table by that factor ("objective×W", "local_mean×W"). Three names stand for families:
// "short_window" and "other_window" are some named table times G/k for an integer k > G (k < G), and
// "geometric" is the objective's or microbatch_mean's table with microbatch m of rank r times λ·a^(Gᵣ−1−m).
// A name denotes a table when its meaning equals it on every group the measurement sees.

#include "grouped.hpp"
#include "grouped_oracle.hpp"
#include "laws.hpp"

#include "normcheck/gate/gate.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace normcheck::properties {

/// A per-group weight formula planted in the program.
struct planted_formula {
  std::string name;          ///< the name the gate gives it, in its own terms ("local_mean×W", "geometric")
  std::string description;   ///< what the program computed, for counterexamples
  oracle::table delivered;   ///< the weight each group's tokens get in the synchronized gradient
  std::vector<std::uint64_t> rescales;  ///< per group: how often the accumulated buffer was rescaled after it
  rational rescale = 1;      ///< the geometric ratio a (1: no rescaling)
  bool plain = false;        ///< a normalization of the table without a factor (a candidate of the gate)
  bool correct = false;      ///< the objective's computation itself (on every update, not only on this one)
};

/// How a measurement is dumped.
enum class arithmetic { exact, float32 };

/// The observation a program with `formula` dumps for `update` (every rank holds the same vector), with the
/// witness when `witness`.
observation observe(const grouped_update& update, const planted_formula& formula, arithmetic dumped, bool witness);

/// The gate's judgement of an observation of `update`; nullopt when the document is rejected.
using fitter = std::function<std::optional<gate_result>(const grouped_update& update, const observation& observed)>;
/// The whole gate, through a normcheck/1 document and `check`.
fitter document_gate();

/// The table a name means on `update` (nullopt for a family name, an unknown name, or one undefined here).
std::optional<oracle::table> table_named(const grouped_update& update, std::string_view name);
/// Whether `name` denotes `weights` on the groups the measurement sees.
bool denotes(const grouped_update& update, std::string_view name, const oracle::table& weights, bool witness);

/// The fit law against `gate`.
law fit_law(const fitter& gate = document_gate());

/// The fit law for every mistake at once: for one update, every normalization the gate knows (in every
/// objective's counts the update can be counted in) whose table differs from the objective's on the groups
/// measured, dumped exactly, must be named by the gate (or by a name with its table).
law fit_each_mistake(const fitter& gate = document_gate());

/// The last case the fit law failed.
struct fit_counterexample {
  std::string report;
  std::vector<std::string> failing_documents;
  bool replayable = true;  ///< false when the gate under test is not the real one
};
const fit_counterexample& last_fit_counterexample();

/// Planted wrong fitters, wrappers that corrupt what the gate sees: one hands it every group at the weight
/// it measured for group 0, one hands it the table averaged over the groups (the scalar probe's view).
fitter group_zero_fitter();
fitter averaged_table_fitter();
/// A fitter without one candidate: the gate's answer with every explanation called `name` removed.
fitter dropped_candidate_fitter(std::string name);
/// A fitter that misreads the measurement's scale: every component doubled before it is judged.
fitter misscaled_fitter();

}  // namespace normcheck::properties
