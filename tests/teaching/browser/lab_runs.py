"""The shared lab runs (tests/teaching/lab_runs.json) and the command-line lab's side of them.

A run is a list of commands; for each the table gives the status the lab gives it (done, refused,
malformed, quit, or not_run for commands after quit) and the lines it shows. `normcheck lab` fed a run on
standard input writes the banner and the lines of done commands to standard output, and each line of a
refused or malformed command to standard error as 'line N: LINE', then a summary, and exits 2 if any
command was refused or malformed. The page's lab shows each command's lines in its transcript. Both are
compared with the same outcomes: a list of (status, lines) per command.
"""

import json
import random
import subprocess

FAILED = ("refused", "malformed")


def load_runs(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["runs"]


def expected_outcomes(run):
    return [(c["status"], list(c["lines"])) for c in run["commands"]]


def commands_of(run):
    return [c["command"] for c in run["commands"]]


def cli_lab(normcheck, commands, timeout=60):
    """(exit status, stdout lines, stderr lines) of `normcheck lab` fed `commands`."""
    result = subprocess.run([normcheck, "lab"], input="".join(c + "\n" for c in commands), capture_output=True,
                            text=True, encoding="utf-8", timeout=timeout)
    return result.returncode, result.stdout.splitlines(), result.stderr.splitlines()


def cli_banner(normcheck):
    status, out, err = cli_lab(normcheck, [])
    if status != 0 or err:
        raise AssertionError("normcheck lab with no input: exit %d, stderr %r" % (status, err))
    return out


def streams(banner, outcomes):
    """What the command-line lab writes for these outcomes: (exit status, stdout lines, stderr lines
    before the summary)."""
    out, err = list(banner), []
    for number, (status, lines) in enumerate(outcomes, start=1):
        if status in FAILED:
            err += ["line %d: %s" % (number, line) for line in lines]
        elif status in ("done", "quit"):
            out += lines
    return (2 if any(status in FAILED for status, _ in outcomes) else 0), out, err


def compare_cli(normcheck, banner, commands, outcomes, label):
    """Problems found when `normcheck lab` runs `commands` and should give `outcomes`."""
    status, out, err = cli_lab(normcheck, commands)
    want_status, want_out, want_err = streams(banner, outcomes)
    summary = err[len(want_err):]
    problems = []
    if status != want_status:
        problems.append("%s: normcheck lab exits %d, expected %d" % (label, status, want_status))
    problems += diff_lines("%s: normcheck lab's standard output" % label, want_out, out)
    problems += diff_lines("%s: normcheck lab's standard error" % label, want_err, err[:len(want_err)])
    if want_status == 2 and not (len(summary) == 1 and summary[0].startswith("normcheck lab: ")):
        problems.append("%s: expected one summary line on standard error after the failures, got %r" % (label, summary))
    if want_status == 0 and summary:
        problems.append("%s: unexpected standard error %r" % (label, summary))
    return problems


def diff_lines(label, want, got):
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            return ["%s differs at line %d:\n  expected %r\n  found    %r" % (label, i + 1, w, g)]
    if len(want) != len(got):
        return ["%s has %d lines, expected %d; first extra or missing: %r" % (
            label, len(got), len(want), (got[len(want):] or want[len(got):])[:2])]
    return []


def diff_outcomes(label, commands, want, got):
    """Problems where two lists of (status, lines) per command differ."""
    problems = []
    for i, command in enumerate(commands):
        w = tuple(want[i]) if i < len(want) else None
        g = tuple(got[i]) if i < len(got) else None
        if w != g:
            problems.append("%s: command %d %r gives %r, expected %r" % (label, i + 1, command, g, w))
            if len(problems) >= 5:
                break
    return problems


def random_literal(rng, near_limits=True):
    """A literal the lab may or may not accept, biased toward corners of the syntax and of the arithmetic.
    Without `near_limits`, no literal at the exponent limit: an iterate or step size of 10^±10000 would
    make every later line ten thousand digits long."""
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))
    nonzero = lambda: rng.choice("123456789") + digits(rng.randint(0, 6))
    hexdigits = lambda n: "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(n))
    sign = rng.choice(["", "", "-"])
    form = rng.randrange(12)
    if form == 0:
        return sign + rng.choice(["0", nonzero()])
    if form == 1:
        return sign + rng.choice(["0", nonzero()]) + "." + digits(rng.randint(1, 12))
    if form == 2:
        mantissa = rng.choice(["0", nonzero()]) + rng.choice(["", "." + digits(rng.randint(1, 6))])
        return sign + mantissa + rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 30))
    if form == 3:
        return sign + nonzero() + "/" + nonzero()
    if form == 4:
        whole, fraction = hexdigits(rng.randint(0, 3)), hexdigits(rng.randint(0, 14))
        if not whole and not fraction:
            whole = "1"
        return (sign + "0" + rng.choice("xX") + whole + ("." + fraction if fraction or rng.random() < 0.2 else "")
                + rng.choice("pP") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 60)))
    if form == 5:  # a double as float.hex() prints it
        return (sign + float(rng.uniform(-10, 10)).hex()).replace("--", "-")
    if form == 6:  # tiny and huge values: exponent notation in the approximation
        return sign + nonzero() + "e" + str(rng.choice([-400, -30, -7, -6, -5, 14, 15, 16, 40]))
    if form == 7 and near_limits:  # at and just past the exponent limit
        return sign + "1e" + rng.choice(["10000", "-10000", "10001", "-10001", "010000", "99999999999"])
    if form == 8:  # halves: rounding half away from zero at the last shown digit
        return sign + rng.choice(["0.1234565", "999999.5", "9.999995", "0.000099999950", "1.0000005", "2.5e-7"])
    if form == 9:  # malformed in every way the reader knows
        return rng.choice(["", "-", "+1", ".5", "1.", "01", "00/1", "1/0", "1/", "1e", "1e+", "0x", "0x1", "0x1p",
                           "0x.p1", "1x", "1/2/3", "1/01", "0/07", "-0/5", "NaN", "inf", "1,5", "0b101", "１",
                           "é" * rng.randint(1, 30), "12" + "€" * rng.randint(10, 16),
                           "0." + digits(45) + "z"]).strip() or "z"
    if form == 10:  # long literals, quoted cut short in a message
        return sign + nonzero() + "." + digits(rng.randint(30, 60)) + rng.choice(["", "q"])
    return sign + rng.choice(["1/3", "2/3", "1/7", "22/7", "1/10", "3/2", "1/1000000", "5/4"])


def random_commands(seed, count):
    """`count` commands: mostly well formed, with malformed ones, comments, blank lines, tabs and
    refusals; one literal beyond the digit limit; never quit (the session must run to the end)."""
    rng = random.Random(seed)
    commands = ["set x " + "1" * 100001, "set x " + "1" * 40 + "x", "step"]
    for _ in range(count - len(commands)):
        kind = rng.randrange(20)
        if kind < 5:
            command = "set lr " + random_literal(rng, near_limits=False)
        elif kind < 9:
            command = "set x " + random_literal(rng, near_limits=False)
        elif kind < 11:
            command = "predict " + random_literal(rng)
        elif kind < 15:
            command = rng.choice(["step", "step", "step " + str(rng.randint(1, 4)),
                                  "step " + rng.choice(["0", "1001", "1000", "01", "-1", "+1", "1.0", "x", "2 3"])])
        elif kind == 15:
            command = rng.choice(["reset", "show", "help"])
        elif kind == 16:
            command = rng.choice(["show now", "reset x", "set", "set lr", "set y 1", "predict", "predict 1 2",
                                  "frobnicate", "STEP", "set LR 1", "#", "# set lr 5", "", "   "])
        elif kind == 17:
            command = "\t".join(["set", "x", random_literal(rng, near_limits=False)])
        elif kind == 18:
            command = "  " + rng.choice(["show", "step", "set x 3/4", "predict 1/2"]) + "  "
        else:
            command = rng.choice(["set lr 1/2", "set lr 3/2", "set lr 2", "set x 1", "set x -7/3"])
        commands.append(command)
    return commands


# Runs lists of commands through the page's lab core (the function normcheckLab that the page's script
# defines), each list in a fresh session, as (status, lines) per command; commands after quit do not run.
CORE_RUNNER = r"""
function runSessions(data, runs) {
  const lab = normcheckLab(data);
  return runs.map((commands) => {
    const session = lab.newSession();
    let ended = false;
    return commands.map((command) => {
      if (ended) return ["not_run", []];
      const reply = session.execute(command);
      if (reply.status === "quit") ended = true;
      return [reply.status, reply.lines];
    });
  });
}
"""


def as_outcomes(raw):
    return [(status, list(lines)) for status, lines in raw]
