"""What each rank of a real two-process job prints when its step is checked, and what it leaves in the temporary folder.

Two processes (env://, gloo on loopback), started as a user's job starts them, each with its own
standard output and error: report_step.py runs every scenario in one process group and marks each in
both streams. The temporary directory ($TMPDIR) is a fresh folder, listed before and after.
"""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("torch")

from normcheck.launch import free_port  # noqa: E402

SCENARIOS = ("pass", "fail", "warn", "keep", "error")
HEADING = "the gate FAILED on "
# torch's own logging, not normcheck's: DDP's warning about unused parameters, and the glog lines of
# Debian's torch 1.13 ("WARNING: Logging before InitGoogleLogging() ...", "I1204 00:00:00.000 ...")
NOISE = re.compile(r".*reducer\.cpp|WARNING: Logging before InitGoogleLogging|[IWEF]\d{4} \d\d:\d\d:\d\d")


def split(text):
    """{scenario: what the stream holds after its ``=== scenario`` mark}."""
    parts, current = {}, None
    for line in text.splitlines():
        if line.startswith("=== "):
            current = line[4:]
            parts[current] = []
        elif current is not None and not NOISE.match(line):
            parts[current].append(line)
    return {k: "\n".join(v) for k, v in parts.items()}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Both ranks' {stream: {scenario: text}}, and the temporary directory's listing before and after."""
    import normcheck

    folder = tmp_path_factory.mktemp("report")
    temporary = folder / "tmp"
    temporary.mkdir()
    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.dirname(os.path.dirname(os.path.abspath(normcheck.__file__)))
    before = sorted(os.listdir(temporary))
    for attempt in range(3):
        port = str(free_port())
        processes = []
        for rank in range(2):
            environment = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                               TMPDIR=str(temporary), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                               PYTHONPATH=os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")])))
            environment.pop("NORMCHECK_PROBE_DIR", None)
            processes.append(subprocess.Popen([sys.executable, os.path.join(here, "report_step.py"), *SCENARIOS],
                                              env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
        outputs = []
        for process in processes:
            try:
                out, err = process.communicate(timeout=200)
            except subprocess.TimeoutExpired:
                for p in processes:
                    p.kill()
                raise
            outputs.append((process.returncode, out, err))
        if all(code == 0 for code, _, _ in outputs) or "address already in use" not in str(outputs).lower():
            break
    for code, out, err in outputs:
        assert code == 0, out + err
    after = sorted(os.listdir(temporary))
    return {"ranks": [{"out": split(out), "err": split(err)} for _, out, err in outputs],
            "before": before, "after": after, "temporary": str(temporary)}


def test_a_pass_is_one_line_on_rank_0_and_nothing_elsewhere(ranks):
    zero, one = ranks["ranks"]
    assert zero["err"]["pass"].splitlines() == [
        "normcheck: step 0 judged on 2 ranks, 4 microbatches, 31 tokens: the token-mean gradient"]
    assert zero["out"]["pass"] == "" and one["out"]["pass"] == "" and one["err"]["pass"] == ""


def test_a_failure_is_diagnosed_once_by_rank_0_and_pointed_to_by_the_others(ranks):
    zero, one = ranks["ranks"]
    for scenario in ("fail", "keep"):
        assert zero["err"][scenario].count(HEADING) == 1, zero["err"][scenario]
        assert zero["err"][scenario].count("local_mean = ") == 1
        assert "NormcheckFailure: normcheck: the gate FAILED" in zero["err"][scenario]
        raised = [line for line in one["err"][scenario].splitlines()
                  if line.startswith("normcheck.check.NormcheckFailure")]
        assert raised == ["normcheck.check.NormcheckFailure: normcheck: step 0 FAILED (local_mean): "
                          "rank 0 reports the whole diagnosis"]
        assert HEADING not in one["err"][scenario] and "weight per token" not in one["err"][scenario]


def test_the_remedy_is_in_the_framework_s_terms_before_the_mathematics(ranks):
    text = ranks["ranks"][0]["err"]["fail"]
    lines = text[text.index("NormcheckFailure: "):].splitlines()
    assert HEADING in lines[0]
    assert lines[1] == "  what to change in accelerate (the mathematics follows):"
    assert lines[2].startswith("    if local_mean: backpropagate the loss sum × `accelerator.num_processes`")
    assert next(k for k, line in enumerate(lines) if line.startswith("    diagnosis: local_mean = ")) > 2
    assert "instead: backpropagate W·Sᵣ/N" in text
    assert "what to change" not in ranks["ranks"][0]["err"]["keep"]  # no framework named: the mathematics only


def test_without_raising_every_rank_warns_alike(ranks):
    zero, one = ranks["ranks"]
    assert zero["err"]["warn"].count("NormcheckWarning: normcheck: the gate FAILED on ") == 1
    assert "Traceback" not in zero["err"]["warn"] and "Traceback" not in one["err"]["warn"]
    assert "NormcheckWarning: normcheck: step 0 FAILED (local_mean): rank 0 reports the whole diagnosis" in \
        one["err"]["warn"]


def test_an_error_is_raised_on_every_rank(ranks):
    for rank in ranks["ranks"]:
        assert "NormcheckError: the normcheck executable given, /nonexistent/normcheck, does not exist" in \
            rank["err"]["error"]


def test_only_the_kept_folder_is_left_behind_and_it_holds_the_named_picture(ranks):
    assert ranks["before"] == []
    ours = [name for name in ranks["after"] if not name.startswith("torch")]  # torch's own caches may appear
    assert len(ours) == 1 and ours[0].startswith("normcheck-probe-"), ranks["after"]
    kept = os.path.join(ranks["temporary"], ours[0])
    text = ranks["ranks"][0]["err"]["keep"]
    named = re.search(r"picture of the weight table: (\S+\.svg)", text)
    assert named and os.path.dirname(named.group(1)) == kept, text
    assert sorted(os.listdir(kept)) == sorted([os.path.basename(named.group(1)),
                                               os.path.basename(named.group(1))[:-4] + ".json"])
    assert ET.parse(named.group(1)).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    assert "now removed: construct the probe with keep=True" in ranks["ranks"][0]["err"]["fail"]
