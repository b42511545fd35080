"""Per-group dumps as the PyTorch probe writes them, and what checking them costs, old executable against new.

A per-group dump (docs/format.md, "Per-group observations") holds one vector per rank with one component per
group, a witness vector shaped alike, and sites: the same measurement by probes in submodules. The shapes here
are those docs/hardening.md promises a cost for (a document under 10 MB: at most 2 s of CPU and at most its size
+ 64 MiB of peak memory), and one over 10 MB:

    w1_sites          W = 1, 2^17 one-token sequences, witness + 4 sites                    8.75 MiB
    w2_sites          W = 2, 2^16 groups (2^15 a rank), every copy 2^16 components, witness
                      + 4 sites                                                              8.5 MiB
    w1_witness        W = 1, 2^17 one-token sequences, witness, no sites                    3.25 MiB
    w2_site_witness   W = 2, 2^16 groups, witness + 4 sites with witnesses                  14 MiB

Every component is the token mean's, −1/N (θ = 0, every target 1), written as float.hex() writes it; with
--wrong G group G weighs twice that in the top-level vector and every site, so that the gate fails, diagnoses
and keeps the first outside row.

    python3 bench/group_dump.py write bench/data/groups            # the four files
    python3 bench/group_dump.py measure --old OLD --new build/normcheck --runs 3 --output bench/GROUP_DUMPS.md

`measure` times `check FILE` and `check --json FILE` with each executable, interleaved (old, new, old, new, …
in a shuffled order of shapes each round), reading CPU time (user + system) and peak RSS from wait4, and
checks that both executables print the same bytes and exit alike.
"""

import argparse
import hashlib
import os
import random
import statistics
import subprocess
import sys

SHAPES = {
    # name: (ranks, groups of the whole update, sites, whether the sites carry witnesses)
    "w1_sites": (1, 1 << 17, 4, False),
    "w2_sites": (2, 1 << 16, 4, False),
    "w1_witness": (1, 1 << 17, 0, False),
    "w2_site_witness": (2, 1 << 16, 4, True),
}


def hex_component(groups, doubled):
    """−1/N for a one-token group of target 1 at θ = 0 (twice that where `doubled`), as float.hex() spells it."""
    exponent = groups.bit_length() - 1
    assert 1 << exponent == groups, "the component is −2^−k: a power of two groups"
    return '"-0x1p-%d"' % (exponent - 1 if doubled else exponent)


def write_dump(path, ranks, groups, sites, site_witness, wrong=None):
    """One dump: `ranks` ranks of groups/ranks one-token sequences in one microbatch each."""
    per_rank = groups // ranks
    sequences = ",".join(["[1]"] * per_rank)
    rank = '{"microbatches": [{"sequences": [' + sequences + "]}]}"
    right = hex_component(groups, False)
    components = [right] * groups
    if wrong is not None:
        components[wrong] = hex_component(groups, True)
    vector = "[" + ",".join(components) + "]"
    copies = "[" + ",".join([vector] * ranks) + "]"
    site_list = []
    for s in range(sites):
        site = '{"name": "layers.%d", "per_rank": %s' % (s, copies)
        if site_witness:
            site += ', "witness": ' + copies
        site_list.append(site + "}")
    text = ('{"format": "normcheck/1", "world_size": %d, "ranks": [%s], "observed": {"dtype": "float32", '
            '"per_rank": %s, "witness": %s' % (ranks, ",".join([rank] * ranks), copies, copies))
    if sites:
        text += ', "sites": [' + ",".join(site_list) + "]"
    text += "}}\n"
    tmp = path + ".part"
    with open(tmp, "w") as out:
        out.write(text)
    os.replace(tmp, path)


def write_all(directory, wrong=None):
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name, (ranks, groups, sites, site_witness) in SHAPES.items():
        path = os.path.join(directory, name + ("" if wrong is None else "_wrong%d" % wrong) + ".json")
        write_dump(path, ranks, groups, sites, site_witness, wrong)
        paths[name] = path
    return paths


def reset_peak():
    """This process's peak resident set back to its present size (Linux). A child started with vfork, as
    subprocess starts it, shares this process's memory until its exec, and the kernel carries this process's
    peak over into the child's ru_maxrss: without the reset every run would report at least the peak of the
    Python that wrote the dumps."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def run_once(executable, args):
    """(CPU seconds, peak RSS in KiB, exit status, a digest of standard output) of one run."""
    reset_peak()
    with open(os.devnull, "wb") as null:
        process = subprocess.Popen([executable] + args, stdout=subprocess.PIPE, stderr=null)
        out = hashlib.sha256(process.stdout.read()).hexdigest()  # not the report itself: it would raise the floor
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss, process.returncode, out


def measure(old, new, paths, runs, seed):
    rng = random.Random(seed)
    modes = [("text", []), ("--json", ["--json"])]
    results = {}
    for _ in range(runs):
        order = [(name, mode) for name in paths for mode in modes]
        rng.shuffle(order)
        for name, (mode, flags) in order:
            args = ["check"] + flags + [paths[name]]
            pair = [("old", old), ("new", new)]
            rng.shuffle(pair)
            outputs = {}
            for label, executable in pair:
                cpu, peak, status, out = run_once(executable, args)
                results.setdefault((name, mode, label), []).append((cpu, peak))
                outputs[label] = (status, out)
            if outputs["old"] != outputs["new"]:
                sys.exit("the executables disagree on %s %s (exit %d and %d)" %
                         (name, mode, outputs["old"][0], outputs["new"][0]))
            results.setdefault((name, mode, "status"), outputs["new"][0])
    return results


def table(results, paths, runs, old, new):
    lines = ["| dump | size MiB | report | old CPU s | old peak MiB | new CPU s | new peak MiB | promise MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for name, path in paths.items():
        size = os.path.getsize(path)
        for mode in ("text", "--json"):
            row = ["%s" % name, "%.2f" % (size / 2**20), mode]
            for label in ("old", "new"):
                samples = results[(name, mode, label)]
                row.append("%.2f" % statistics.median(s[0] for s in samples))
                row.append("%.0f" % (statistics.median(s[1] for s in samples) / 1024))
            row.append("%.0f" % (size / 2**20 + 64) if size < 10_000_000 else "none (over 10 MB)")
            lines.append("| " + " | ".join(row) + " |")
    header = ("Medians of %d interleaved runs each; CPU = user + system; peak = maximum resident set; both "
              "executables printed the same bytes and exit status on every run.\nold: %s\nnew: %s\n" % (runs, old, new))
    return header + "\n" + "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the four dumps into DIRECTORY")
    w.add_argument("directory")
    w.add_argument("--wrong", type=int, help="make group G weigh twice the objective's")
    m = sub.add_parser("measure", help="time two executables side by side on the four dumps")
    m.add_argument("--old", required=True)
    m.add_argument("--new", required=True)
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "groups"))
    m.add_argument("--wrong", type=int)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--output", help="also write the table to this file")
    args = parser.parse_args()
    if args.command == "write":
        for path in write_all(args.directory, args.wrong).values():
            print(path, os.path.getsize(path))
        return
    paths = write_all(args.data, args.wrong)
    results = measure(args.old, args.new, paths, args.runs, args.seed)
    text = table(results, paths, args.runs, args.old, args.new)
    print(text)
    if args.output:
        with open(args.output, "w") as out:
            out.write(text)


if __name__ == "__main__":
    main()
