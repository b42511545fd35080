"""The normcheck benchmark, in one command from the repository's top folder:

    python3 bench/run.py            # everything: 16 files (1M and 10M tokens), about 10 minutes
    python3 bench/run.py --quick    # the 1M-token files only

It builds normcheck (Release) in bench/out/build and the simdjson baseline in bench/out/, writes the
partition files into bench/data/ (git-ignored, reused while they exist), then times side by side, in
one run: `normcheck check FILE`; the inexact floor, simdjson On-Demand summing doubles
(baseline_simdjson.cpp); and the exact peers a Python user would write (fraction_peer.py, on the 1M-token
files): fractions.Fraction, and GMP's mpq through gmpy2 (Debian's python3-gmpy2, under /usr/bin/python3).
Literal shapes: shortest float64 repr (dec), float.hex() strings (hex) and six decimal places (short).
normcheck runs with --jobs 1 and --jobs 2 on each file; last, all the files of the run are checked in one
command with --jobs 1 and with --jobs 2. Every command's wall time, CPU time (user + system) and peak resident memory
are measured per run (wait4); the table shows medians. It prints the table and writes bench/RESULTS.md.
"""

import argparse
import datetime
import os
import platform
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
BASELINE = os.path.join(OUT, "baseline_simdjson")
MIB = 1024 * 1024


def build(build_normcheck=True):
    if build_normcheck:
        subprocess.run(["cmake", "-S", ROOT, "-B", os.path.join(OUT, "build"), "-DCMAKE_BUILD_TYPE=Release",
                        "-DNORMCHECK_BUILD_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", os.path.join(OUT, "build"), "--target", "normcheck", "-j2"], check=True,
                       stdout=subprocess.DEVNULL)
    os.makedirs(OUT, exist_ok=True)
    subprocess.run(["c++", "-O2", "-std=c++17", os.path.join(HERE, "baseline_simdjson.cpp"), "-lsimdjson", "-o",
                    BASELINE], check=True)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the 1M-token files")
    parser.add_argument("--runs", type=int, default=5, help="runs of normcheck and of the baseline per file")
    parser.add_argument("--peer-runs", type=int, default=1, help="runs of the Fraction peer per 1M-token file")
    parser.add_argument("--normcheck", help="time this normcheck executable instead of building one (Release)")
    parser.add_argument("--literals", default="dec,hex,short", help="literal shapes, comma-separated")
    args = parser.parse_args()

    global NORMCHECK
    build(build_normcheck=args.normcheck is None)
    if args.normcheck:
        NORMCHECK = os.path.abspath(args.normcheck)
    sizes = [1_000_000] if args.quick else [1_000_000, 10_000_000]
    configurations = [(tokens, ranks, microbatches, literal) for tokens in sizes for ranks in (8, 64)
                      for microbatches in (1, 8) for literal in args.literals.split(",")]
    load_before = os.getloadavg()
    rows = []
    for tokens, ranks, microbatches, literal in configurations:
        path = ensure_apart(tokens, ranks, microbatches, literal)
        size = os.path.getsize(path)
        normcheck_samples, parallel_samples, baseline_samples = [], [], []
        for _ in range(args.runs):  # interleaved, so that a busy moment hits all
            normcheck_samples.append(measure([NORMCHECK, "check", "--jobs", "1", path])[:3])
            parallel_samples.append(measure([NORMCHECK, "check", "--jobs", "2", path])[:3])
            baseline_samples.append(measure([BASELINE, path])[:3])
        row = {"file": os.path.basename(path), "path": path, "tokens": tokens, "size": size,
               "config": (ranks, microbatches, literal), "normcheck": medians(normcheck_samples),
               "parallel": medians(parallel_samples), "baseline": medians(baseline_samples), "peer": None,
               "gmpy2": None, "agree": True}
        if tokens == 1_000_000 and args.peer_runs > 0:
            report = subprocess.run([NORMCHECK, "check", "--json", path], capture_output=True, text=True).stdout
            for key, command in (("peer", [sys.executable, PEER, path]), ("gmpy2", [DEBIAN_PYTHON, PEER, "--gmpy2", path])):
                samples = [measure(command) for _ in range(args.peer_runs)]
                row[key] = medians([s[:3] for s in samples])
                # Both are exact: the objective must be the same rational.
                peer_mean = samples[0][3].split("\n")[0].split()[1]
                row["agree"] = row["agree"] and f'"global_mean": "{peer_mean}"' in report
        rows.append(row)
        print(format_row(row), flush=True)
    # Every file of the run in one command: files are checked in parallel with --jobs 2.
    paths = [row["path"] for row in rows]
    together = {}
    for jobs in (1, 2):
        together[jobs] = medians([measure([NORMCHECK, "check", "--jobs", str(jobs)] + paths)[:3] for _ in range(args.runs)])
    baseline_total = sum(row["baseline"]["wall"] for row in rows)
    load_after = os.getloadavg()
    text = results(rows, args, load_before, load_after, together, baseline_total)
    print("\n" + text)
    with open(os.path.join(HERE, "RESULTS.md"), "w") as out:
        out.write(text)


HEADER = ("| file | MiB | normcheck ms (CPU ms) | --jobs 2 ms (CPU ms) | simdjson ms (CPU ms) "
          "| normcheck/simdjson wall (CPU) | --jobs 2/simdjson wall "
          "| Fraction s (CPU s) | Fraction/normcheck wall (CPU) | gmpy2 s (CPU s) | gmpy2/normcheck wall (CPU) "
          "| peak MiB normcheck / simdjson / Fraction / gmpy2 | normcheck peak − input MiB |")


def format_row(row):
    n, j, b = row["normcheck"], row["parallel"], row["baseline"]

    def peer_columns(p):
        if not p:
            return "— | —"
        return f"{p['wall']:.2f} ({p['cpu']:.2f}) | {p['wall'] / n['wall']:.0f}× ({p['cpu'] / n['cpu']:.0f}×)"

    peaks = " / ".join([f"{n['peak'] / MIB:.0f}", f"{b['peak'] / MIB:.0f}"] +
                       [f"{row[k]['peak'] / MIB:.0f}" if row[k] else "—" for k in ("peer", "gmpy2")])
    agree = "" if row["agree"] else " DIFFERENT RESULT"
    return (f"| {row['file']} | {row['size'] / MIB:.1f} | {n['wall'] * 1000:.0f} ({n['cpu'] * 1000:.0f}) "
            f"| {j['wall'] * 1000:.0f} ({j['cpu'] * 1000:.0f}) "
            f"| {b['wall'] * 1000:.0f} ({b['cpu'] * 1000:.0f}) | {n['wall'] / b['wall']:.2f} ({n['cpu'] / b['cpu']:.2f}) "
            f"| {j['wall'] / b['wall']:.2f} "
            f"| {peer_columns(row['peer'])} | {peer_columns(row['gmpy2'])}{agree} | {peaks} "
            f"| {(n['peak'] - row['size']) / MIB:+.1f} |")


def results(rows, args, load_before, load_after, together, baseline_total):
    def median_of(values):
        return statistics.median(values) if values else float("nan")

    lines = ["# Benchmark results", "",
             f"Measured {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} with `python3 bench/run.py"
             f"{' --quick' if args.quick else ''} --literals {args.literals} --runs {args.runs}` ({args.runs} runs of normcheck and simdjson per file, interleaved, "
             f"{args.peer_runs} of each exact peer; medians), normcheck "
             f"{'built Release by the script' if not args.normcheck else 'from ' + os.path.relpath(NORMCHECK, ROOT)}.", ""]
    lines += [f"- {line}" for line in machine()]
    lines += [f"- load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after: "
              "on a shared machine wall time includes waiting for a core, CPU time does not", ""]
    lines += [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    lines += [format_row(row) for row in rows]
    lines += ["", "## Targets", ""]
    for tokens, name in ((1_000_000, "1M"), (10_000_000, "10M")):
        chosen = [r for r in rows if r["tokens"] == tokens]
        if not chosen:
            continue
        wall = median_of([r["normcheck"]["wall"] / r["baseline"]["wall"] for r in chosen])
        cpu = median_of([r["normcheck"]["cpu"] / r["baseline"]["cpu"] for r in chosen])
        lines.append(f"- normcheck --jobs 1 / simdjson on the {name}-token files (target ≤ 1.0): median {wall:.2f} wall, "
                     f"{cpu:.2f} CPU; worst {max(r['normcheck']['wall'] / r['baseline']['wall'] for r in chosen):.2f} wall")
        parallel = [r["parallel"]["wall"] / r["baseline"]["wall"] for r in chosen]
        lines.append(f"- normcheck --jobs 2 / simdjson on the {name}-token files (target ≤ 0.7): median "
                     f"{median_of(parallel):.2f} wall, worst {max(parallel):.2f}")
    for literal in args.literals.split(","):
        chosen = [r for r in rows if r["config"][2] == literal]
        if chosen:
            lines.append(f"  - {literal} literals: --jobs 1 median "
                         f"{median_of([r['normcheck']['wall'] / r['baseline']['wall'] for r in chosen]):.2f} wall, --jobs 2 "
                         f"{median_of([r['parallel']['wall'] / r['baseline']['wall'] for r in chosen]):.2f} wall")
    peers = [r for r in rows if r["peer"]]
    if peers:
        agree = all(r["agree"] for r in peers)
        for key, name in (("peer", "Fraction"), ("gmpy2", "gmpy2 mpq")):
            speedup = median_of([r[key]["wall"] / r["normcheck"]["wall"] for r in peers])
            speedup_cpu = median_of([r[key]["cpu"] / r["normcheck"]["cpu"] for r in peers])
            lines.append(f"- {name} peer / normcheck on the 1M-token files: median {speedup:.0f}× wall, "
                         f"{speedup_cpu:.0f}× CPU")
        lines.append(f"  - {'the same global_mean from every peer on every file' if agree else 'SOME RESULTS DIFFER'}")
        floor = median_of([r["peer"]["cpu"] / r["baseline"]["cpu"] for r in peers])
        lines.append(f"  - for scale: the inexact floor (simdjson) is itself {floor:.0f}× faster than the peer in CPU time "
                     "on these files, so a factor of 200 asks for more than reading the input at simdjson's speed")
    growth = []
    for row in rows:
        if row["tokens"] == 10_000_000:
            small = [r for r in rows if r["tokens"] == 1_000_000 and r["config"] == row["config"]]
            if small:
                growth.append((row["normcheck"]["wall"] / small[0]["normcheck"]["wall"],
                               row["normcheck"]["cpu"] / small[0]["normcheck"]["cpu"]))
    if growth:
        lines.append(f"- 10M / 1M time of normcheck (target ≤ 11): median {median_of([g[0] for g in growth]):.1f} wall, "
                     f"{median_of([g[1] for g in growth]):.1f} CPU")
    over = max((r["normcheck"]["peak"] - r["size"]) / MIB for r in rows)
    lines.append(f"- normcheck peak memory above the input size (target ≤ 32 MiB): at most {over:+.1f} MiB")
    lines.append(f"- all {len(rows)} files in one `check`: --jobs 1 {together[1]['wall']:.2f} s, --jobs 2 "
                 f"{together[2]['wall']:.2f} s wall ({together[2]['wall'] / together[1]['wall']:.2f}×; CPU "
                 f"{together[1]['cpu']:.2f} s and {together[2]['cpu']:.2f} s); simdjson one file after another "
                 f"{baseline_total:.2f} s, so --jobs 2 / simdjson {together[2]['wall'] / baseline_total:.2f}")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
