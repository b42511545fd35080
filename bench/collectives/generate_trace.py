#!/usr/bin/env python3
"""Writes a clean collective trace of a DDP-like run and, with --check, times `normcheck collectives` on it.

Each step of each rank issues the all-reduce of the valid-token count and G gradient-bucket all-reduces;
the trace has --calls lines in all, one file per rank (OUT.rank<r>.jsonl) or, with --one-file, one file.
With --skip, rank 1 leaves out the count all-reduce of the middle step, and the check must find it.
"""

import argparse
import itertools
import subprocess
import sys
import time

BUCKETS = [("grad_bucket_%d" % b, "[%d]" % (1 << (10 + b % 4))) for b in range(6)]


def rank_lines(rank, steps, skip_step):
    seq = 0
    for step in range(1, steps + 1):
        calls = [("valid_tokens", "[1]", "int64")] + [(name, shape, "float32") for name, shape in BUCKETS]
        if step == skip_step:
            calls = calls[1:]
        for tensor, shape, dtype in calls:
            yield ('{"rank": %d, "step": %d, "seq": %d, "op": "all_reduce", "tensor": "%s", "shape": %s, '
                   '"dtype": "%s", "reduce_op": "sum"}\n' % (rank, step, seq, tensor, shape, dtype))
            seq += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1_000_000, help="lines in the whole trace")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--out", required=True, help="output path (per-rank files get .rank<r>.jsonl)")
    parser.add_argument("--one-file", action="store_true", help="write every rank's lines into OUT")
    parser.add_argument("--skip", action="store_true", help="rank 1 skips one collective")
    parser.add_argument("--check", help="the normcheck executable to time on the trace")
    parser.add_argument("--max-seconds", type=float, default=0, help="fail when the check takes longer")
    args = parser.parse_args()

    per_step = 1 + len(BUCKETS)
    steps = max(1, args.calls // (args.ranks * per_step))
    skip_step = steps // 2 + 1 if args.skip else -1
    paths = []
    if args.one_file:
        paths = [args.out]
        with open(args.out, "w") as out:
            generators = [rank_lines(r, steps, skip_step if r == 1 else -1) for r in range(args.ranks)]
            for lines in itertools.zip_longest(*generators):  # one line of each rank in turn
                out.writelines(line for line in lines if line is not None)
    else:
        for r in range(args.ranks):
            path = "%s.rank%d.jsonl" % (args.out, r)
            with open(path, "w") as out:
                out.writelines(rank_lines(r, steps, skip_step if r == 1 else -1))
            paths.append(path)
    lines = args.ranks * steps * per_step - (1 if args.skip else 0)
    print("wrote %d lines (%d ranks, %d steps) to %s" % (lines, args.ranks, steps,
                                                         args.out if args.one_file else "%s.rank*.jsonl" % args.out))
    if not args.check:
        return 0
    start = time.monotonic()
    result = subprocess.run([args.check, "collectives"] + paths, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    print(result.stdout, end="")
    print("normcheck collectives: %d lines in %.2f s (exit %d)" % (lines, seconds, result.returncode))
    expected = 1 if args.skip else 0
    if result.returncode != expected:
        print("expected exit %d" % expected, file=sys.stderr)
        return 1
    if args.skip and "MISSING CALL at step %d, position 0" % skip_step not in result.stdout:
        print("the skipped collective was not found at step %d" % skip_step, file=sys.stderr)
        return 1
    if args.max_seconds and seconds > args.max_seconds:
        print("took more than %.1f s" % args.max_seconds, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
