#!/usr/bin/env python3
"""Real DistributedDataParallel runs (examples/pytorch_ddp/driver.py) judged by normcheck.

    ddp_test.py verdicts  --normcheck EXE --driver driver.py --work DIR
    ddp_test.py hang      ...
    ddp_test.py interrupt ...

verdicts   runs every variant for W = 2 and 3 in float32 and float64, then `normcheck check --json` on
           every dump: the correct variants pass, each buggy one fails naming its mistake, the
           empty-rank run completes.
hang       runs a rank that skips its collective: the driver must kill the launch at its time limit
           and report a failure, leaving no worker behind.
interrupt  kills the driver while a dump is half written: nothing may appear under the final name.

Needs only the standard library; the driver needs an interpreter that imports torch: the first of
/usr/bin/python3, this interpreter and python3 on PATH that has torch, or only $NORMCHECK_TORCH_PYTHON
when that is set.
Exit status: 0 passed, 1 failed, 77 skipped (no interpreter imports torch; the reason is printed).
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIPPED = 77

# What the gate must conclude on each variant's dump: the verdict and, for a failure, a name that
# must be among the explanations of its diagnosis.
EXPECTED = {
    "local_mean": ("fail", "local_mean"),
    "local_sum": ("fail", "local_sum"),
    "scaled_sum": ("pass", None),
    "global_share": ("fail", "global_share"),
    "microbatch_mean": ("fail", "microbatch_mean"),
    "accumulated_scaled_sum": ("pass", None),
    "sum_hook": ("fail", "scaled_sum"),
    "empty_rank": ("pass", None),
    "weighted_scaled_sum": ("pass", None),
    "weighted_count": ("fail", "count_denominator"),
    "weighted_local_mean": ("fail", "local_mean"),
    "weighted_accumulated": ("pass", None),
    "weighted_microbatch_mean": ("fail", "microbatch_mean"),
}
WORLD_SIZES = (2, 3)
DTYPES = ("float32", "float64")


class TestFailure(Exception):
    pass


def require(condition, message):
    if not condition:
        raise TestFailure(message)


def skip(reason):
    print(f"SKIPPED: {reason}", flush=True)
    sys.exit(SKIPPED)


def torch_interpreter():
    """The first candidate interpreter that has torch installed (the driver does the real import)."""
    chosen = os.environ.get("NORMCHECK_TORCH_PYTHON")
    candidates = [chosen] if chosen else ["/usr/bin/python3", sys.executable, shutil.which("python3")]
    tried = []
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"
    for candidate in candidates:
        if not candidate or candidate in (t for t, _ in tried):
            continue
        if not os.path.exists(candidate):
            tried.append((candidate, "does not exist"))
            continue
        try:
            done = subprocess.run([candidate, "-c", probe], capture_output=True, timeout=60)
            found = done.returncode == 0
            why = "has no module torch" if done.returncode == 3 else f"probe exited with {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as e:
            found, why = False, str(e)
        if found:
            return candidate
        tried.append((candidate, why))
    skip("no interpreter can import torch (" + "; ".join(f"{c}: {w}" for c, w in tried) +
         "); install Debian's python3-torch")


def run_driver(options, python, out, arguments, timeout):
    """Runs the driver to completion; returns (exit status, output, seconds). Skips without torch."""
    command = [python, options.driver, "--out", out] + arguments
    print("$ " + " ".join(command), flush=True)
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    output = done.stdout + done.stderr
    print(output, end="", flush=True)
    if done.returncode == 3:
        skip(f"{python} cannot run the example: {done.stderr.strip()}")
    return done.returncode, output, seconds


def read_manifest(out):
    with open(os.path.join(out, "manifest.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check_json(normcheck, files):
    """normcheck check --json on `files`: report by file."""
    done = subprocess.run([normcheck, "check", "--json"] + files, capture_output=True, text=True, timeout=120)
    require(done.returncode in (0, 1, 2), f"normcheck check exited with {done.returncode}: {done.stderr}")
    document = json.loads(done.stdout)
    return {report["file"]: report for report in document["reports"]}


def expected_dumps():
    """(W, dtype, partition, variant) of every dump the full run must write."""
    expected = set()
    for world_size in WORLD_SIZES:
        for dtype in DTYPES:
            for variant in EXPECTED:
                if variant in ("microbatch_mean", "accumulated_scaled_sum", "weighted_accumulated",
                               "weighted_microbatch_mean"):
                    partitions = ["suggest-g2", "seed-microbatches"]
                elif variant == "empty_rank":
                    partitions = ["suggest-empty-rank", "seed-empty-rank"]
                else:
                    partitions = ["suggest", "seed"]
                for partition in partitions:
                    if partition.startswith("seed") and world_size != 2:
                        continue  # the seed example has two ranks
                    expected.add((world_size, dtype, partition, variant))
    return expected


def test_verdicts(options, python):
    started = time.monotonic()
    out = os.path.join(options.work, "run")
    shutil.rmtree(out, ignore_errors=True)
    status, _, driver_seconds = run_driver(options, python, out,
                                           ["--normcheck", options.normcheck, "--timeout", "60"], timeout=600)
    require(status == 0, f"the driver exited with {status}")
    records = read_manifest(out)
    launches = [r for r in records if r["kind"] == "launch"]
    dumps = [r for r in records if r["kind"] == "dump"]
    require({(r["world_size"], r["dtype"]) for r in launches} == {(w, d) for w in WORLD_SIZES for d in DTYPES},
            "the driver did not launch every W and dtype")
    require(all(r["status"] == "ok" for r in launches), "some launch failed")
    written = {(r["world_size"], r["dtype"], r["partition"], r["variant"]) for r in dumps}
    missing = expected_dumps() - written
    require(not missing, f"dumps missing: {sorted(missing)}")
    require(written == expected_dumps(), f"unexpected dumps: {sorted(written - expected_dumps())}")
    files = [os.path.join(out, r["file"]) for r in dumps]
    on_disk = sorted(glob.glob(os.path.join(out, "dumps", "*.json")))
    require(sorted(files) == on_disk, "the dumps folder holds files the manifest does not list")

    reports = check_json(options.normcheck, files)
    problems = []
    rows = []
    for record, path in zip(dumps, files):
        report = reports.get(path)
        if report is None:
            problems.append(f"{path}: no report")
            continue
        gate = report.get("gate") or {}
        verdict = gate.get("verdict")
        diagnosis = [e["name"] for e in gate.get("diagnosis", [])]
        hiding = [e["name"] for e in gate.get("could_hide", [])]
        want_verdict, want_name = EXPECTED[record["variant"]]
        rows.append((record["world_size"], record["dtype"], record["partition"], record["variant"], verdict,
                     ", ".join(diagnosis) or "-"))
        if report["status"] == "error":
            problems.append(f"{path}: rejected: {report.get('error')}")
            continue
        if verdict != want_verdict:
            problems.append(f"{path}: gate verdict {verdict} (could hide: {hiding}), expected {want_verdict}")
        if want_name and want_name not in diagnosis:
            problems.append(f"{path}: {want_name} is not in the diagnosis {diagnosis}")
        if report["status"] != ("pass" if want_verdict == "pass" else "fail"):
            problems.append(f"{path}: status {report['status']}")
        for check in gate.get("checks", []):
            if check.get("name") in ("replica_agreement", "denominator") and not check.get("passed"):
                problems.append(f"{path}: check {check['name']} failed: {check.get('detail')}")

    print(f"\n{'W':>2} {'dtype':8} {'partition':19} {'variant':23} {'verdict':8} diagnosis")
    for row in rows:
        print(f"{row[0]:>2} {row[1]:8} {row[2]:19} {row[3]:23} {row[4] or '-':8} {row[5]}")
    print(f"\ninterpreter: {python}")
    for r in launches:
        print(f"launch W={r['world_size']} {r['dtype']}: {r['updates']} updates, {r['seconds']:.2f} s")
    print(f"driver {driver_seconds:.2f} s; test wall time {time.monotonic() - started:.2f} s; "
          f"{len(rows)} dumps judged, {len(problems)} problems")
    for p in problems:
        print("PROBLEM: " + p)
    require(not problems, f"{len(problems)} dumps were not judged as expected")
    empty = [r for r in dumps if r["variant"] == "empty_rank"]
    require(len(empty) == sum(1 for e in expected_dumps() if e[3] == "empty_rank"),
            "an empty-rank run did not complete")


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie still answers kill(0): it has exited, but not been reaped yet.
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def worker_pids(output):
    found = re.search(r"workers ((?:\d+ ?)+)", output)
    require(found, "the driver did not name its workers")
    return [int(p) for p in found.group(1).split()]


def wait_until_gone(pids, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.05)
    return all(gone(p) for p in pids)


def test_hang(options, python):
    limit = 6.0
    out = os.path.join(options.work, "run")
    shutil.rmtree(out, ignore_errors=True)
    status, output, seconds = run_driver(
        options, python, out, ["--variants", "hang", "--partitions", "seed", "-W", "2", "--dtype", "float32",
                               "--timeout", str(limit)], timeout=limit + 120)
    require(status == 1, f"the driver exited with {status}, expected 1 (a failed launch)")
    require("skips its step" in output, "the hanging rank never reached the point where it skips its collective")
    require(f"time limit of {limit:g} s reached: killed ranks 0 1" in output,
            "the driver did not report killing both ranks at its time limit")
    launch = [r for r in read_manifest(out) if r["kind"] == "launch"]
    require(len(launch) == 1 and launch[0]["status"] == "timeout", f"manifest: {launch}")
    require(limit <= launch[0]["seconds"] < limit + 10,
            f"the launch took {launch[0]['seconds']} s; the limit is {limit:g} s")
    pids = worker_pids(output)
    require(wait_until_gone(pids, 5), f"workers still alive after the driver exited: {pids}")
    require(not glob.glob(os.path.join(out, "dumps", "*.json")), "a hanging update wrote a dump")
    print(f"\ninterpreter: {python}\nthe hanging launch was killed after {launch[0]['seconds']:.2f} s "
          f"(limit {limit:g} s); driver wall time {seconds:.2f} s; workers {pids} gone")


def half_written(normcheck, paths):
    """The files among `paths` that are not a whole normcheck/1 document."""
    if not paths:
        return []
    reports = check_json(normcheck, paths)
    return [p for p in paths if reports[p]["status"] == "error"]


def test_interrupt(options, python):
    out = os.path.join(options.work, "run")
    shutil.rmtree(out, ignore_errors=True)
    dumps = os.path.join(out, "dumps")
    os.makedirs(out)
    log_path = os.path.join(options.work, "driver.log")
    command = [python, options.driver, "--out", out, "--variants", "scaled_sum", "--partitions", "seed",
               "-W", "2", "--dtype", "float32", "--pause-mid-write", "60", "--timeout", "120"]
    print("$ " + " ".join(command), flush=True)
    with open(log_path, "w", encoding="utf-8") as log:
        driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        temporaries = []
        while time.monotonic() < deadline and driver.poll() is None:
            temporaries = glob.glob(os.path.join(dumps, ".*.tmp"))
            if temporaries and os.path.getsize(temporaries[0]) > 0:
                break
            time.sleep(0.05)
        with open(log_path, encoding="utf-8") as f:
            output = f.read()
        if driver.poll() == 3:
            skip(f"{python} cannot run the example: {output.strip()}")
        require(temporaries, f"no dump was being written (driver status {driver.poll()}):\n{output}")
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    with open(log_path, encoding="utf-8") as f:
        output = f.read()
    print(output, end="")
    pids = worker_pids(output)
    require(wait_until_gone(pids, 5), f"workers outlived the killed driver: {pids}")
    final = os.path.join(dumps, "w2-float32-seed-scaled_sum.json")
    require(not os.path.exists(final), "the interrupted dump appeared under its final name")
    finals = sorted(glob.glob(os.path.join(out, "**", "*.json"), recursive=True))
    broken = half_written(options.normcheck, finals)
    require(not broken, f"half-written files under their final names: {broken}")
    temporary = temporaries[0]
    require(os.path.exists(temporary), "the temporary vanished: the kill did not land inside the write")
    with open(temporary, encoding="utf-8") as f:
        partial = f.read()
    try:
        json.loads(partial)
        require(False, "the temporary holds a whole document: the kill did not land inside the write")
    except ValueError:
        pass

    # The detector above must be able to fail: a plain write to the final name, killed halfway, is caught.
    direct = os.path.join(dumps, "direct-write.json")
    writer = subprocess.Popen([sys.executable, "-c",
                               "import os, sys, time\n"
                               "f = open(sys.argv[1], 'w'); f.write(sys.argv[2]); f.flush(); os.fsync(f.fileno())\n"
                               "print('half', flush=True); time.sleep(60)", direct, partial],
                              stdout=subprocess.PIPE, text=True)
    require(writer.stdout.readline().strip() == "half", "the direct writer did not start")
    writer.kill()
    writer.wait()
    require(half_written(options.normcheck, [direct]) == [direct],
            "a half-written document under a final name was not detected")
    os.unlink(direct)
    print(f"\ninterpreter: {python}\nkilled the driver while {os.path.basename(temporary)} held "
          f"{len(partial)} bytes: no file under a final name is half-written, workers {pids} gone; "
          f"a direct write killed the same way is detected")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("test", choices=("verdicts", "hang", "interrupt"))
    parser.add_argument("--normcheck", required=True)
    parser.add_argument("--driver", required=True)
    parser.add_argument("--work", required=True, help="a build-tree folder for this test's files")
    options = parser.parse_args()
    os.makedirs(options.work, exist_ok=True)
    python = torch_interpreter()
    print(f"interpreter: {python}", flush=True)
    try:
        {"verdicts": test_verdicts, "hang": test_hang, "interrupt": test_interrupt}[options.test](options, python)
    except TestFailure as e:
        print(f"FAILED: {e}", flush=True)
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"FAILED: {' '.join(map(str, e.cmd))} did not finish within {e.timeout} s", flush=True)
        return 1
    print("PASSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
