"""The normcheck benchmark, in one command from the repository's top folder:

    python3 bench/run.py            # everything: 50 files (1M, 4M on two ranks, 10M tokens)
    python3 bench/run.py --quick    # the 1M-token files only

It builds normcheck (Release) in bench/out/build and the two simdjson baselines in bench/out/, writes the
partition files into bench/data/ (git-ignored, reused while they exist), then times side by side, in
one run, interleaved in a shuffled order so that a busy moment of a shared machine hits all of them:
`normcheck check --jobs 1 FILE` and `--jobs 2`; the plain floor (floor.cpp: simdjson On-Demand reading
every token as a double and summing, strtod for quoted literals, no type test before a read), which is
what normcheck's speed is judged against; the checked read (baseline_simdjson.cpp: the same walk that
asks each value's type before reading it, and sums per rank), a slower inexact baseline; and the exact
peers a Python user would write (fraction_peer.py, on the 1M-token files): fractions.Fraction, and GMP's
mpq through gmpy2 (Debian's python3-gmpy2, under /usr/bin/python3). `--other-floor SOURCE` builds a
second floor from another source file and times it beside ours, to show the two are the same floor.
Literal shapes: shortest float64 repr (dec), six decimal places (short), seven significant digits with an
exponent (exp), integers (int) and float.hex() strings (hex); file shapes: 8 and 64 ranks, one token
array per rank (flat) or 8 microbatches (mb8), and the 4M-token files on two ranks (flat and mb8), whose
few long arrays only a reader that splits an array can share between two cores.
Last, all the files of the run are checked in one command with --jobs 1 and with --jobs 2. Every
command's wall time, CPU time (user + system) and peak resident memory are measured per run (wait4);
the tables show medians. It prints the tables and writes bench/RESULTS.md.
"""

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

OUT = os.path.join(HERE, "out")
DATA = os.path.join(HERE, "data")
NORMCHECK = os.path.join(OUT, "build", "normcheck")
PEER = os.path.join(HERE, "fraction_peer.py")
# Debian's Python, where python3-gmpy2 is installed (another python3 first on PATH may lack it).
DEBIAN_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# The checked read: the slower inexact baseline. The plain floor: what normcheck is judged against.
CHECKED = os.path.join(OUT, "baseline_simdjson")
FLOOR = os.path.join(OUT, "floor")
OTHER_FLOOR = os.path.join(OUT, "other_floor")
MIB = 1024 * 1024


def build(build_normcheck=True, other_floor=None):
    if build_normcheck:
        subprocess.run(["cmake", "-S", ROOT, "-B", os.path.join(OUT, "build"), "-DCMAKE_BUILD_TYPE=Release",
                        "-DNORMCHECK_BUILD_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", os.path.join(OUT, "build"), "--target", "normcheck", "-j2"], check=True,
                       stdout=subprocess.DEVNULL)
    os.makedirs(OUT, exist_ok=True)
    sources = [(os.path.join(HERE, "baseline_simdjson.cpp"), CHECKED), (os.path.join(HERE, "floor.cpp"), FLOOR)]
    if other_floor:
        sources.append((other_floor, OTHER_FLOOR))
    for source, executable in sources:  # the same compiler flags for every baseline
        subprocess.run(["c++", "-O2", "-std=c++17", source, "-lsimdjson", "-o", executable], check=True)


def provenance(executable):
    """Where the timed normcheck comes from: its build type when a CMake cache sits beside it, and its mtime."""
    build_type = "unknown build type"
    cache = os.path.join(os.path.dirname(executable), "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache) as lines:
            for line in lines:
                if line.startswith("CMAKE_BUILD_TYPE:"):
                    build_type = line.split("=", 1)[1].strip() or "no build type"
    stamp = os.stat(executable).st_mtime
    return build_type, stamp


def measure(command):
    """Runs command once: (wall seconds, CPU seconds, peak RSS in bytes, stdout)."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.stdout.read(), process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}: {err.decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, out.decode()


def ensure_apart(tokens, ranks, microbatches, literal):
    """generate.ensure in a child process. A child's peak resident set starts at its parent's (the pages
    count until exec): writing a file here would grow this process and every peak measured after it."""
    code = f"import generate; print(generate.ensure({DATA!r}, {tokens}, {ranks}, {microbatches}, {literal!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=HERE, check=True, capture_output=True,
                          text=True).stdout.strip()


def medians(samples):
    return {key: statistics.median(s[i] for s in samples) for i, key in enumerate(("wall", "cpu", "peak"))}


def command_output(command):
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as meminfo:
        memory = int(meminfo.readline().split()[1]) // (1024 * 1024)
    simdjson = command_output(["dpkg-query", "-W", "-f=${Version}", "libsimdjson-dev"])
    return [
        f"CPU: {model}, {os.cpu_count()} cores; memory {memory} GiB; {platform.system()} {platform.release()}",
        f"compiler: {command_output(['c++', '--version']).splitlines()[0]}; simdjson {simdjson}; "
        f"Python {platform.python_version()}",
    ]


SERIES = (("normcheck", "normcheck --jobs 1"), ("parallel", "--jobs 2"), ("floor", "floor"),
          ("checked", "checked read"), ("other", "other floor"))
TARGET_ONE_CORE, TARGET_TWO_CORES = 0.8, 0.5  # normcheck / plain floor, wall time, on every file
LITERALS = ("dec", "short", "exp", "int", "hex")
TWO_RANK_SIZES = (4_000_000,)  # token counts whose files hold two ranks (a few long arrays)


def size_name(tokens):
    return f"{tokens // 1_000_000}M-token" + (" two-rank" if tokens in TWO_RANK_SIZES else "")


def sizes_of(rows):
    return sorted({r["tokens"] for r in rows})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the 1M-token files")
    parser.add_argument("--runs", type=int, default=5, help="runs of normcheck and of each baseline per file")
    parser.add_argument("--peer-runs", type=int, default=1, help="runs of the Fraction peer per 1M-token file")
    parser.add_argument("--normcheck", help="time this normcheck executable instead of building one (Release)")
    parser.add_argument("--other-floor", help="also build this floor source and time it beside floor.cpp")
    parser.add_argument("--literals", default=",".join(LITERALS), help="literal shapes, comma-separated")
    parser.add_argument("--sizes", default="1,4,10", help="file sizes in millions of tokens, comma-separated "
                        "(4: on two ranks)")
    parser.add_argument("--output", default=os.path.join(HERE, "RESULTS.md"), help="where to write the results")
    args = parser.parse_args()

    if args.peer_runs > 0 and subprocess.run([DEBIAN_PYTHON, "-c", "import gmpy2"], capture_output=True).returncode:
        parser.error(f"the gmpy2 peer needs gmpy2 under {DEBIAN_PYTHON} (apt-get install python3-gmpy2), "
                     "or --peer-runs 0")
    global NORMCHECK
    build(build_normcheck=args.normcheck is None, other_floor=args.other_floor)
    if args.normcheck:
        NORMCHECK = os.path.abspath(args.normcheck)
    build_type, stamp = provenance(NORMCHECK)
    sizes = [1_000_000] if args.quick else [int(millions) * 1_000_000 for millions in args.sizes.split(",")]
    configurations = [(tokens, ranks, microbatches, literal) for tokens in sizes
                      for ranks in ((2,) if tokens in TWO_RANK_SIZES else (8, 64))
                      for microbatches in (1, 8) for literal in args.literals.split(",")]
    shuffler = random.Random(1)
    load_before = os.getloadavg()
    rows = []
    for tokens, ranks, microbatches, literal in configurations:
        path = ensure_apart(tokens, ranks, microbatches, literal)
        size = os.path.getsize(path)
        commands = {"normcheck": [NORMCHECK, "check", "--jobs", "1", path],
                    "parallel": [NORMCHECK, "check", "--jobs", "2", path],
                    "floor": [FLOOR, path], "checked": [CHECKED, path]}
        if args.other_floor:
            commands["other"] = [OTHER_FLOOR, path]
        samples, outputs = {key: [] for key in commands}, {}
        order = list(commands)
        for _ in range(args.runs):  # interleaved, so that a busy moment hits all
            shuffler.shuffle(order)
            for key in order:
                wall, cpu, peak, outputs[key] = measure(commands[key])
                samples[key].append((wall, cpu, peak))
        report = subprocess.run([NORMCHECK, "check", "--json", path], capture_output=True, text=True).stdout
        valid = json.loads(report)["reports"][0]["valid_tokens"]
        # Every reader must have read the tokens normcheck counted; two floors must print the same sum.
        counts = [int(outputs["floor"].split()[0]), int(outputs["checked"].split("N ")[1].split()[0])]
        row = {"file": os.path.basename(path), "path": path, "tokens": tokens, "size": size,
               "config": (ranks, microbatches, literal), "peer": None, "gmpy2": None, "agree": True,
               "counts_agree": all(count == valid for count in counts),
               "floors_agree": outputs.get("other", outputs["floor"]) == outputs["floor"]}
        row.update({key: medians(s) for key, s in samples.items()})
        if tokens == 1_000_000 and args.peer_runs > 0:
            for key, command in (("peer", [sys.executable, PEER, path]),
                                 ("gmpy2", [DEBIAN_PYTHON, PEER, "--gmpy2", path])):
                peer_samples = [measure(command) for _ in range(args.peer_runs)]
                row[key] = medians([s[:3] for s in peer_samples])
                # Both are exact: the objective must be the same rational.
                peer_mean = peer_samples[0][3].split("\n")[0].split()[1]
                row["agree"] = row["agree"] and f'"global_mean": "{peer_mean}"' in report
        rows.append(row)
        print(time_row(row, args), "\n", ratio_row(row, args), flush=True)
    # Every file of the run in one command: files are checked in parallel with --jobs 2.
    paths = [row["path"] for row in rows]
    together = {}
    for jobs in (1, 2):
        together[jobs] = medians([measure([NORMCHECK, "check", "--jobs", str(jobs)] + paths)[:3]
                                  for _ in range(args.runs)])
    load_after = os.getloadavg()
    changed = os.stat(NORMCHECK).st_mtime != stamp
    text = results(rows, args, load_before, load_after, together, build_type, changed)
    print("\n" + text)
    with open(args.output, "w") as out:
        out.write(text)


def ms(m):
    return f"{m['wall'] * 1000:.0f} ({m['cpu'] * 1000:.0f})"


def ratio(a, b):
    return a["wall"] / b["wall"], a["cpu"] / b["cpu"]


def both(a, b):
    wall, cpu = ratio(a, b)
    return f"{wall:.2f} ({cpu:.2f})"


def time_header(args):
    names = [name for key, name in SERIES if key != "other" or args.other_floor]
    return "| file | MiB | " + " | ".join(f"{name} ms (CPU ms)" for name in names) + " |"


def time_row(row, args):
    keys = [key for key, _ in SERIES if key != "other" or args.other_floor]
    return f"| {row['file']} | {row['size'] / MIB:.1f} | " + " | ".join(ms(row[key]) for key in keys) + " |"


def ratio_header(args):
    return ("| file | --jobs 1 / floor wall (CPU) | --jobs 2 / floor wall (CPU) | --jobs 1 / checked wall (CPU) "
            "| --jobs 2 / checked wall (CPU) | floor / checked wall (CPU) "
            + ("| other floor / floor wall (CPU) " if args.other_floor else "")
            + f"| ≤ {TARGET_ONE_CORE} on one core, ≤ {TARGET_TWO_CORES} on two (wall) |")


def ratio_row(row, args):
    n, j, f, c = row["normcheck"], row["parallel"], row["floor"], row["checked"]
    met = (f"{'met' if ratio(n, f)[0] <= TARGET_ONE_CORE else 'MISSED'}, "
           f"{'met' if ratio(j, f)[0] <= TARGET_TWO_CORES else 'MISSED'}")
    flags = ("" if row["counts_agree"] else " TOKEN COUNTS DIFFER") + ("" if row["floors_agree"] else " FLOORS DIFFER")
    return (f"| {row['file']} | {both(n, f)} | {both(j, f)} | {both(n, c)} | {both(j, c)} | {both(f, c)} "
            + (f"| {both(row['other'], f)} " if args.other_floor else "") + f"| {met}{flags} |")


PEER_HEADER = ("| file | Fraction s (CPU s) | Fraction/normcheck wall (CPU) | gmpy2 s (CPU s) "
               "| gmpy2/normcheck wall (CPU) "
               "| peak MiB normcheck / floor / checked / Fraction / gmpy2 | normcheck peak − input MiB |")


def peer_row(row):
    n = row["normcheck"]

    def peer_columns(p):
        if not p:
            return "— | —"
        return f"{p['wall']:.2f} ({p['cpu']:.2f}) | {p['wall'] / n['wall']:.0f}× ({p['cpu'] / n['cpu']:.0f}×)"

    peaks = " / ".join([f"{row[k]['peak'] / MIB:.0f}" for k in ("normcheck", "floor", "checked")] +
                       [f"{row[k]['peak'] / MIB:.0f}" if row[k] else "—" for k in ("peer", "gmpy2")])
    agree = "" if row["agree"] else " DIFFERENT RESULT"
    return (f"| {row['file']} | {peer_columns(row['peer'])} | {peer_columns(row['gmpy2'])}{agree} | {peaks} "
            f"| {(n['peak'] - row['size']) / MIB:+.1f} |")


def table(header, body):
    return [header, "|" + "---|" * (header.count("|") - 1)] + body


def median_of(values):
    return statistics.median(values) if values else float("nan")


def summary(chosen, key, against):
    """Median and worst of key / against over the chosen rows, wall and CPU, the worst file named."""
    walls = [(ratio(r[key], r[against])[0], r["file"]) for r in chosen]
    cpus = [(ratio(r[key], r[against])[1], r["file"]) for r in chosen]
    worst, worst_cpu = max(walls), max(cpus)
    return (f"median {median_of([w for w, _ in walls]):.2f} wall ({median_of([c for c, _ in cpus]):.2f} CPU), "
            f"worst {worst[0]:.2f} wall ({worst[1]}), worst {worst_cpu[0]:.2f} CPU ({worst_cpu[1]})")


def shape_name(config):
    ranks, microbatches, _ = config
    return f"r{ranks}_{'flat' if microbatches == 1 else f'mb{microbatches}'}"


def results(rows, args, load_before, load_after, together, build_type, changed):
    command = (f"python3 bench/run.py{' --quick' if args.quick else ''} --literals {args.literals} --runs {args.runs}"
               + (f" --sizes {args.sizes}" if not args.quick and args.sizes != "1,4,10" else "")
               + (f" --peer-runs {args.peer_runs}" if args.peer_runs != 1 else "")
               + (f" --normcheck {os.path.relpath(NORMCHECK, ROOT)}" if args.normcheck else "")
               + (" --other-floor OTHER.cpp" if args.other_floor else ""))
    lines = ["# Benchmark results", "",
             f"Measured {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} with `{command}` "
             f"({args.runs} runs of normcheck and of each baseline per file, interleaved in a shuffled order, "
             f"{args.peer_runs} of each exact peer; medians), normcheck "
             f"{'built Release by the script' if not args.normcheck else 'from ' + os.path.relpath(NORMCHECK, ROOT)}"
             f" ({build_type} build{'; THE EXECUTABLE CHANGED DURING THE RUN' if changed else ''}).", "",
             "Baselines, both inexact simdjson On-Demand reads of the same file, built `-O2`:",
             "- **floor** (`bench/floor.cpp`): the plain floor normcheck is judged against. Every token is read as a "
             "double first, nulls skipped, quoted literals through strtod; a sum and a count.",
             "- **checked read** (`bench/baseline_simdjson.cpp`): the same walk asking each value's type and null "
             "before reading it, summing per rank and computing the gradients; slower than the floor."]
    if args.other_floor:
        lines.append("- **other floor** (`--other-floor`): a second plain floor written independently of floor.cpp, "
                     "doing the same work, timed beside it to show that the two measure the same thing.")
    lines.append("")
    lines += [f"- {line}" for line in machine()]
    lines += [f"- load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after, on "
              f"{os.cpu_count()} cores: on a shared machine wall time includes waiting for a core, CPU time does not; "
              "--jobs 2 needs both cores free to show its wall time", ""]
    lines += ["## Times", ""] + table(time_header(args), [time_row(r, args) for r in rows])
    lines += ["", "## Ratios", ""] + table(ratio_header(args), [ratio_row(r, args) for r in rows])
    if not all(r["counts_agree"] for r in rows):
        lines += ["", "SOME READERS COUNTED A DIFFERENT NUMBER OF TOKENS THAN NORMCHECK"]
    lines += ["", "## Targets", "",
              f"normcheck / floor, wall time, on every literal shape and file shape: ≤ {TARGET_ONE_CORE} with "
              f"--jobs 1 (one core), ≤ {TARGET_TWO_CORES} with --jobs 2 (two cores). CPU time beside it.", ""]
    for tokens in sizes_of(rows):
        name = size_name(tokens)
        chosen = [r for r in rows if r["tokens"] == tokens]
        one = sum(ratio(r["normcheck"], r["floor"])[0] <= TARGET_ONE_CORE for r in chosen)
        one_cpu = sum(ratio(r["normcheck"], r["floor"])[1] <= TARGET_ONE_CORE for r in chosen)
        two = sum(ratio(r["parallel"], r["floor"])[0] <= TARGET_TWO_CORES for r in chosen)
        lines.append(f"- {name} files, --jobs 1 / floor (target ≤ {TARGET_ONE_CORE}): "
                     f"{summary(chosen, 'normcheck', 'floor')}; met on {one} of {len(chosen)} files by wall time, "
                     f"{one_cpu} of {len(chosen)} by CPU time")
        lines.append(f"- {name} files, --jobs 2 / floor (target ≤ {TARGET_TWO_CORES}): "
                     f"{summary(chosen, 'parallel', 'floor')}; met on {two} of {len(chosen)} files by wall time")
        groups = [(f"{literal} literals", [r for r in chosen if r["config"][2] == literal])
                  for literal in args.literals.split(",")]
        groups += [(f"{shape} files", [r for r in chosen if shape_name(r["config"]) == shape])
                   for shape in dict.fromkeys(shape_name(r["config"]) for r in chosen)]
        for label, group in groups:
            if group:
                one_wall = max(ratio(r["normcheck"], r["floor"])[0] for r in group)
                one_cpu = max(ratio(r["normcheck"], r["floor"])[1] for r in group)
                two_wall = max(ratio(r["parallel"], r["floor"])[0] for r in group)
                lines.append(f"  - {label}: worst --jobs 1 {one_wall:.2f} wall ({one_cpu:.2f} CPU) "
                             f"{'met' if one_wall <= TARGET_ONE_CORE else 'MISSED'}; "
                             f"worst --jobs 2 {two_wall:.2f} wall "
                             f"{'met' if two_wall <= TARGET_TWO_CORES else 'MISSED'}")
    lines += ["", "Against the checked read (the slower baseline; earlier targets ≤ 1.0 and ≤ 0.7):", ""]
    for tokens in sizes_of(rows):
        name = size_name(tokens)
        chosen = [r for r in rows if r["tokens"] == tokens]
        if chosen:
            lines.append(f"- {name} files, --jobs 1 / checked read: {summary(chosen, 'normcheck', 'checked')}")
            lines.append(f"- {name} files, --jobs 2 / checked read: {summary(chosen, 'parallel', 'checked')}")
            lines.append(f"- {name} files, floor / checked read: {summary(chosen, 'floor', 'checked')}")
    if args.other_floor:
        walls = [ratio(r["other"], r["floor"])[0] for r in rows]
        cpus = [ratio(r["other"], r["floor"])[1] for r in rows]
        same = all(r["floors_agree"] for r in rows)
        lines.append(f"- other floor / floor: median {median_of(walls):.2f} wall ({median_of(cpus):.2f} CPU), "
                     f"from {min(walls):.2f} to {max(walls):.2f} wall, {min(cpus):.2f} to {max(cpus):.2f} CPU; "
                     f"{'the same count and sum on every file' if same else 'SOME FLOORS PRINT DIFFERENT SUMS'}")
    lines += [""]
    peers = [r for r in rows if r["peer"]]
    if peers:
        lines += ["## Exact peers and memory", ""] + table(PEER_HEADER, [peer_row(r) for r in rows]) + [""]
        agree = all(r["agree"] for r in peers)
        for key, name in (("peer", "Fraction"), ("gmpy2", "gmpy2 mpq")):
            speedup = median_of([r[key]["wall"] / r["normcheck"]["wall"] for r in peers])
            speedup_cpu = median_of([r[key]["cpu"] / r["normcheck"]["cpu"] for r in peers])
            lines.append(f"- {name} peer / normcheck on the 1M-token files: median {speedup:.0f}× wall, "
                         f"{speedup_cpu:.0f}× CPU")
        lines.append(f"  - {'the same global_mean from every peer on every file' if agree else 'SOME RESULTS DIFFER'}")
        floor = median_of([r["peer"]["cpu"] / r["floor"]["cpu"] for r in peers])
        lines.append(f"  - for scale: the plain floor is itself {floor:.0f}× faster than the Fraction peer in CPU time "
                     "on these files, so a factor of 200 asks for more than reading the input at the floor's speed")
    growth = []
    for row in rows:
        if row["tokens"] == 10_000_000:
            small = [r for r in rows if r["tokens"] == 1_000_000 and r["config"] == row["config"]]
            if small:
                growth.append((row["normcheck"]["wall"] / small[0]["normcheck"]["wall"],
                               row["normcheck"]["cpu"] / small[0]["normcheck"]["cpu"]))
    if growth:
        lines.append("- 10M / 1M time of normcheck (target ≤ 11): "
                     f"median {median_of([g[0] for g in growth]):.1f} wall, "
                     f"{median_of([g[1] for g in growth]):.1f} CPU")
    over = max((r["normcheck"]["peak"] - r["size"]) / MIB for r in rows)
    lines.append(f"- normcheck peak memory above the input size (target ≤ 32 MiB): at most {over:+.1f} MiB")
    floor_total = sum(row["floor"]["wall"] for row in rows)
    checked_total = sum(row["checked"]["wall"] for row in rows)
    lines.append(f"- all {len(rows)} files in one `check`: --jobs 1 {together[1]['wall']:.2f} s, --jobs 2 "
                 f"{together[2]['wall']:.2f} s wall ({together[2]['wall'] / together[1]['wall']:.2f}×; CPU "
                 f"{together[1]['cpu']:.2f} s and {together[2]['cpu']:.2f} s); one file after another the floor takes "
                 f"{floor_total:.2f} s and the checked read {checked_total:.2f} s, so --jobs 2 / floor "
                 f"{together[2]['wall'] / floor_total:.2f}, --jobs 1 / floor {together[1]['wall'] / floor_total:.2f}, "
                 f"--jobs 2 / checked read {together[2]['wall'] / checked_total:.2f}")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
