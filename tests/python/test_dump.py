"""normcheck.dump: exact literals, every field of normcheck/1 read back by the executable, atomic writes.

Standard library only (no torch).
"""

import json
import math
import os
import random
import stat
import struct
import subprocess
import sys
import threading
import time
from fractions import Fraction

import pytest

from normcheck import dump


def exact_value(text):
    """What normcheck reads from a literal: a hexadecimal float exactly, a decimal or p/q as the rational it names."""
    if isinstance(text, int):
        return Fraction(text)
    if "0x" in text.lower():
        return Fraction(float.fromhex(text))
    return Fraction(text)


def corner_doubles(count=4000, seed=15):
    generator = random.Random(seed)
    values = [0.0, -0.0, 0.1, 1 / 3, 2.0 ** -1074, -(2.0 ** -1074), 2.0 ** -1022, sys.float_info.max,
              -sys.float_info.max, 1.0 + 2.0 ** -52, 3.0]
    for _ in range(count):
        values.append(struct.unpack("<d", generator.getrandbits(64).to_bytes(8, "little"))[0])
        # float32 values as a program holds them, converted to Python floats
        values.append(struct.unpack("<f", generator.getrandbits(32).to_bytes(4, "little"))[0])
    return [v for v in values if math.isfinite(v)]


def test_literal_is_exact_for_every_finite_double():
    for value in corner_doubles():
        text = dump.literal(value)
        assert exact_value(text) == Fraction(value), (value, text)
        assert float.fromhex(text) == value and math.copysign(1, float.fromhex(text)) == math.copysign(1, value)


def test_the_exactness_check_catches_a_decimal_writer():
    # repr() round-trips in Python, but normcheck reads "0.1" as 1/10, not as the double nearest it.
    wrong = [v for v in corner_doubles(200) if exact_value(repr(v)) != Fraction(v)]
    assert len(wrong) > 100


def test_literal_keeps_integers_fractions_and_strings_and_refuses_the_rest():
    assert dump.literal(3) == 3 and dump.literal(-7) == -7
    assert dump.literal(Fraction(-3, 2)) == "-3/2" and dump.literal(Fraction(4, 2)) == 2
    assert dump.literal("1/3") == "1/3"
    for wrong in (True, None, [1.0], "", object()):
        with pytest.raises((TypeError, ValueError)):
            dump.literal(wrong)
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            dump.literal(value)
        assert dump.literal(value, finite=False) == value.hex()
    assert [dump.literal(v, finite=False) for v in (math.nan, math.inf, -math.inf)] == ["nan", "inf", "-inf"]


def test_render_refuses_a_float_anywhere():
    document = dump.document([[[1, None]]], theta=0)
    document["observed"] = {"gradient": 0.5, "dtype": "float32"}  # what json.dumps would print with repr()
    with pytest.raises(TypeError, match="float"):
        dump.render(document)
    document["observed"] = {"gradient": dump.literal(0.5), "dtype": "float32"}
    assert '"0x1.0000000000000p-1"' in dump.render(document)


def test_tokens_and_validity():
    assert dump.tokens([1.5, 2, None]) == ["0x1.8000000000000p+0", 2, None]
    assert dump.tokens([1.0, 2.0, 3.0], [True, False, True]) == ["0x1.0000000000000p+0", None, "0x1.8000000000000p+1"]
    with pytest.raises(ValueError):
        dump.tokens([1.0], [True, False])


def test_observed_fields():
    seen = dump.observed(dtype="float32", per_rank=[-1.5, math.nan], reduction_dtype="float16",
                         tokens_global=7, tokens_per_rank=[3, 4], divided_by=[7, [2, 5]], mass_global=Fraction(5, 2),
                         mass_per_rank=[1, Fraction(3, 2)], tolerance_absolute=0, tolerance_relative=Fraction(1, 1000))
    assert seen == {"per_rank": ["-0x1.8000000000000p+0", "nan"], "dtype": "float32", "reduction_dtype": "float16",
                    "tokens": {"global": 7, "per_rank": [3, 4], "divided_by": [7, [2, 5]]},
                    "mass": {"global": "5/2", "per_rank": [1, "3/2"]},
                    "tolerance": {"absolute": 0, "relative": "1/1000"}}
    with pytest.raises(ValueError):
        dump.observed(dtype="float32")
    with pytest.raises(ValueError):
        dump.observed(dtype="float32", gradient=1.0, per_rank=[1.0])
    with pytest.raises(ValueError):
        dump.observed(dtype="float8", gradient=1.0)
    with pytest.raises(ValueError):
        dump.observed(dtype="float32", gradient=1.0, tokens_global=-1)


def run_check(executable, *paths):
    done = subprocess.run([executable, "check", "--json", *map(str, paths)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode in (0, 1, 2), done.stderr
    return {r["file"]: r for r in json.loads(done.stdout)["reports"]}


def every_field_document():
    """One document with every field the baseline format has, its values chosen to hold."""
    ranks = [[[0.0]], [[2.0, 2.0, None], [2.0]]]
    return dump.document(
        ranks, world_size=2, reducer="mean", theta=0.0, description="every field: ü, \"quoted\"",
        expect={"global_mean": Fraction(-3, 2), "local_mean": -1},
        observed=dump.observed(dtype="float32", per_rank=[-1.0, -1.0], tokens_global=4, tokens_per_rank=[1, 3],
                               tolerance_absolute=Fraction(1, 10**9), tolerance_relative=0),
        expect_gate={"verdict": "fail", "explanations": ["local_mean", "microbatch_mean"]},
        recipe={"scale": "W / N", "reducer": "mean"})


def test_every_field_reads_back_through_normcheck(tmp_path, executable):
    path = tmp_path / "every.json"
    dump.write(path, every_field_document())
    weighted = tmp_path / "weighted.json"
    dump.write(weighted, dump.document(
        [[[1, 2, None]], [[3], []]], weights=[[[1, Fraction(1, 2), None]], [[2], []]], theta=0,
        observed=dump.observed(dtype="exact", gradient=Fraction(-16, 7), mass_global=Fraction(7, 2),
                               mass_per_rank=[Fraction(3, 2), 2]),
        expect_gate={"verdict": "pass", "explanations": []}))
    rejected = tmp_path / "rejected.json"
    dump.write(rejected, dump.document([[[1]], [[2]]], world_size=3, expect_error="world_size_mismatch"))
    reports = run_check(executable, path, weighted, rejected)
    every = reports[str(path)]
    assert every["status"] == "pass", every["failures"]
    assert every["gate"]["verdict"] == "fail"
    assert [e["name"] for e in every["gate"]["diagnosis"]] == ["local_mean", "microbatch_mean"]
    assert every["gate"]["bound_is_explicit"] and every["recipe"]["equals_objective"]
    assert all(e["held"] for e in every["expectations"]) and len(every["expectations"]) == 2
    assert reports[str(weighted)]["status"] == "pass" and reports[str(weighted)]["objective"] == "weighted_token_mean"
    assert (reports[str(rejected)]["status"] == "pass"
            and reports[str(rejected)]["error"]["code"] == "world_size_mismatch")
    text = path.read_text(encoding="utf-8")
    read = json.loads(text)
    # Braces on their own lines, one member per line, and the ranks' brackets and one line per rank.
    assert "ü" in text and text.count("\n") == 2 + (len(read) - 1) + 2 + len(read["ranks"])


def test_the_round_trip_check_catches_a_wrong_value(tmp_path, executable):
    document = every_field_document()
    document["expect"]["global_mean"] = dump.literal(-1.5000001)
    path = tmp_path / "wrong.json"
    dump.write(path, document)
    report = run_check(executable, path)[str(path)]
    assert report["status"] == "fail"
    assert [e["held"] for e in report["expectations"] if e["gradient"] == "global_mean"] == [False]


def test_the_examples_document_keeps_its_shape():
    parts = [dump.rank_part([([0.0], [True])], -1.0, counted_tokens=1),
             dump.rank_part([([2.0, 2.0], [True, False]), ([2.0], [True])], -1.0, counted_tokens=2)]
    document = dump.build_document(parts, reducer="mean", theta=0.0, dtype="float32", global_tokens=3,
                                   description="d")
    assert list(document) == ["format", "description", "ranks", "world_size", "reducer", "theta", "observed"]
    assert document["ranks"][0] == {"targets": ["0x0.0p+0"]}
    assert document["ranks"][1] == {"microbatches": [["0x1.0000000000000p+1", None], ["0x1.0000000000000p+1"]]}
    assert document["observed"] == {"per_rank": ["-0x1.0000000000000p+0"] * 2, "dtype": "float32",
                                    "tokens": {"global": 3, "per_rank": [1, 2]}}


# ---------------------------------------------------------------------------------------------------
# Atomic writes

def leftovers(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "d.json"
    path.write_text("old")
    dump.write_atomically(path, "new text")
    assert path.read_text() == "new text" and leftovers(tmp_path) == []


KILLED_WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from normcheck import dump
dump.write_atomically(sys.argv[2], "x" * 100000, pause_mid_write=60)
"""

NAIVE_WRITER = """
import sys, time
f = open(sys.argv[2], "w"); f.write("x" * 50000); f.flush(); time.sleep(60)
"""


def killed_mid_write(tmp_path, program, path):
    """Starts a writer of 100000 bytes over `path`, kills it once half is on disk; returns what `path` holds."""
    import normcheck

    package = os.path.dirname(os.path.dirname(normcheck.__file__))
    writer = subprocess.Popen([sys.executable, "-c", program, package, str(path)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sizes = [os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if n != "keep"]
            if any(size >= 50000 for size in sizes):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the writer never got halfway")
    finally:
        writer.kill()
        writer.wait()
    return path.read_text()


def test_a_killed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "d.json"
    path.write_text("old")
    assert killed_mid_write(tmp_path, KILLED_WRITER, path) == "old"
    assert len(leftovers(tmp_path)) == 1  # the temporary, which a *.json scan skips


def test_the_interruption_check_catches_a_plain_write(tmp_path):
    path = tmp_path / "d.json"
    path.write_text("old")
    assert killed_mid_write(tmp_path, NAIVE_WRITER, path) == "x" * 50000


def test_a_symbolic_link_is_followed(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    dump.write_atomically(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and leftovers(tmp_path) == []


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo).read()))
    reader.start()
    dump.write_atomically(fifo, "through the pipe")
    reader.join(10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and leftovers(tmp_path) == []


def test_a_directory_is_an_error(tmp_path):
    with pytest.raises(IsADirectoryError):
        dump.write_atomically(tmp_path, "x")


def test_fields_of_issue_15_read_back_through_normcheck(tmp_path, executable):
    """Non-finite observed values, reduction_dtype and divided_by, as the probe writes them."""
    empty = tmp_path / "nan.json"
    dump.write(empty, dump.document([[[1, 1], []], [[2]]], world_size=2, theta=0,
                                    observed=dump.observed(dtype="float32", per_rank=[math.nan, math.nan])))
    halved = tmp_path / "float16.json"
    # The objective −5/3 as float16 holds it: the correct gradient after a float16 all-reduce.
    dump.write(halved, dump.document([[[1, 1]], [[3]]], world_size=2, theta=0,
                                     observed=dump.observed(dtype="float32", reduction_dtype="float16",
                                                            per_rank=[-1.6669921875, -1.6669921875])))
    divided = tmp_path / "divided.json"
    dump.write(divided, dump.document([[[1, 1]], [[3]]], world_size=2, theta=0,
                                      observed=dump.observed(dtype="float32", per_rank=[-2.0, -2.0],
                                                             divided_by=[2, 1])))
    reports = run_check(executable, empty, halved, divided)
    nan = reports[str(empty)]
    assert nan["status"] == "fail" and nan["gate"]["verdict"] == "fail", nan.get("error")
    assert "mean_of_empty" in [e["name"] for e in nan["gate"]["diagnosis"]]
    assert reports[str(halved)]["status"] == "pass", (
        reports[str(halved)].get("error") or reports[str(halved)]["failures"])
    denominator = [c for c in (reports[str(divided)].get("gate") or {}).get("checks", []) if c["name"] == "denominator"]
    assert denominator and not denominator[0]["passed"], reports[str(divided)].get("error")


def test_a_mesh_and_sequence_slices_read_back_through_normcheck(tmp_path, executable):
    """dp 2 × cp 2: coords written row-major, zigzag slices joined into sequences; N counts each token once."""
    mesh = [{"name": "dp", "size": 2, "role": "data"}, {"name": "cp", "size": 2, "role": "sequence"}]
    ranks = [[dump.sequences([dump.sliced([1, 2], sequence="a", positions=[[0, 1], [3, 4]])])],
             [dump.sequences([dump.sliced(dump.group(1, value=3, padding=1), sequence="a", positions=[[1, 3]])])],
             [[5]], [[7, None]]]
    document = dump.document(ranks, world_size=4, theta=0, mesh=mesh, expect={"global_mean": Fraction(-18, 5)})
    assert [rank["coords"] for rank in document["ranks"]] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    path = tmp_path / "mesh.json"
    dump.write(path, document)
    report = run_check(executable, path)[str(path)]
    assert report["status"] == "pass", report.get("error") or report["failures"]
    assert report["valid_tokens"] == 5 and report["world_size"] == 4
    # Positions that are not ascending ranges, and a mesh that does not hold every rank, are refused here.
    with pytest.raises(ValueError, match="ascending ranges"):
        dump.sliced([1], sequence="a", positions=[[2, 3], [1, 2]])
    with pytest.raises(ValueError, match="multiply to 2"):
        dump.document([[[1]], [[2]], [[3]]], mesh=[{"name": "dp", "size": 2, "role": "data"}])


def test_a_float16_reduced_gradient_declared_float32_fails(tmp_path, executable):
    """Why reduction_dtype exists: without it, the float16 rounding is far outside the float32 bound."""
    path = tmp_path / "float16-as-float32.json"
    dump.write(path, dump.document([[[1, 1]], [[3]]], world_size=2, theta=0,
                                   observed=dump.observed(dtype="float32", per_rank=[-1.6669921875] * 2)))
    report = run_check(executable, path)[str(path)]
    assert report["status"] == "fail" and report["gate"]["verdict"] == "fail"


def test_exact_writes_every_number_exactly_or_refuses_it():
    from decimal import Decimal

    assert dump.exact(1.5) == "0x1.8000000000000p+0"
    assert dump.exact(float("nan")) == "nan" and dump.exact(float("-inf")) == "-inf"
    assert dump.exact(3) == (3.0).hex()  # held exactly by a float: its float.hex() text
    assert dump.exact(2 ** 60) == float(2 ** 60).hex()
    assert dump.exact(2 ** 53 + 1) == "9007199254740993"  # not a float: never rounded to 2**53
    assert dump.exact(-(10 ** 400)) == "-1" + "0" * 400  # beyond every float
    assert dump.exact(Fraction(1, 3)) == "1/3"
    assert dump.exact(Fraction(3, 4)) == (0.75).hex()
    assert dump.exact(Fraction(2 ** 53 + 1, 2)) == f"{2 ** 53 + 1}/2"
    assert dump.exact("0.1") == "0.1"  # the literal as written, not the float nearest to it
    assert dump.exact(Decimal("0.1")) == "1/10"
    assert dump.exact(Decimal("NaN")) == "nan"
    for refused in (True, None, object(), [1.0]):
        with pytest.raises(TypeError):
            dump.exact(refused)
    for refused in ("", " 1", "1 "):
        with pytest.raises(ValueError):
            dump.exact(refused)
    for value in (2 ** 53 + 1, Fraction(1, 3), "0.1", Decimal("2.5e-400"), 2.0 ** -1074):
        assert exact_value(dump.exact(value)) == Fraction(value if not isinstance(value, str) else Fraction(value))


def test_token_values_and_the_update_keep_large_integers_and_fractions(tmp_path, executable):
    big = 2 ** 53 + 1
    assert dump.token_values([big, Fraction(1, 3), "0.1", 0.5], [True, True, True, False]) == [
        str(big), "1/3", "0.1", None]
    part = dump.rank_part([([big, 1], [True, True])], gradient=Fraction(-1, 3), counted_tokens=2)
    assert part["gradient"] == "-1/3" and part["microbatches"] == [[str(big), (1.0).hex()]]
    document = dump.build_document([part, dump.rank_part([([2], [True])], gradient=Fraction(-1, 3), counted_tokens=1)],
                                   reducer="mean", theta=Fraction(1, 7), dtype="exact", global_tokens=3)
    assert document["theta"] == "1/7"
    path = tmp_path / "big.json"
    dump.write(path, document)
    done = subprocess.run([executable, "check", "--json", str(path)], capture_output=True, text=True)
    report = json.loads(done.stdout)["reports"][0]
    assert report["theta"] == "1/7" and report["valid_tokens"] == 3
    # (θ·n − Σy) per rank, exactly: rank 0 holds 2^53 + 1 and 1, which a float would have made 2^53 and 1.
    assert report["ranks"][0]["loss_gradient_sum"] == str(Fraction(2, 7) - big - 1)


def test_counts_are_refused_unless_they_are_non_negative_integers():
    for refused in (2.7, True, -1, "3"):
        with pytest.raises(ValueError):
            dump.rank_part([([1], [True])], gradient=0.5, counted_tokens=refused)
        with pytest.raises(ValueError):
            dump.observed(dtype="float32", gradient=0.5, tokens_global=refused)
    assert dump.rank_part([([1], [True])], gradient=0.5, counted_tokens=1)["counted_tokens"] == 1


def test_a_fifo_nobody_reads_is_a_timeout_not_a_hang(tmp_path):
    fifo = tmp_path / "unread"
    os.mkfifo(fifo)
    outcome = []

    def attempt():
        try:
            dump.write(fifo, dump.document([[[1]]]), wait_for_reader=0.2)
            outcome.append("written")
        except TimeoutError as e:
            outcome.append(str(e))

    writer = threading.Thread(target=attempt, daemon=True)
    writer.start()
    writer.join(30)
    assert not writer.is_alive(), "dump.write blocked on a FIFO that nobody reads"
    assert len(outcome) == 1 and "no process opened for reading" in outcome[0]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_an_auxiliary_term_and_its_measurement_read_back_through_normcheck(tmp_path, executable):
    """A term's tokens on the main loss's ranks (coords on a mesh), its weight exact, its measurement judged."""
    mesh = [{"name": "dp", "size": 2, "role": "data"}]
    mtp = dump.term("mtp", [[[2, None]], [[6, 7]]], weight=Fraction(3, 10))
    # A main token weighs 1/5; a token of the term 3/10 · 1/3 = 1/10: its components are −2/10 and −(6 + 7)/10.
    seen = dump.observed(dtype="exact", per_rank=[["-3/5", "-12/5"]] * 2,
                         terms=[dump.term_measurement("mtp", [["-1/5", "-13/10"]] * 2)])
    document = dump.document([[[1, 2]], [[3, 4, 5, None]]], theta=0, mesh=mesh, terms=[mtp], observed=seen,
                             expect_gate={"verdict": "pass"})
    assert document["terms"][0]["ranks"][1] == {"targets": [6, 7], "coords": [1]}
    assert '\n  "terms": [\n    {"name": "mtp"' in dump.render(document)
    path = tmp_path / "term.json"
    dump.write(path, document)
    report = run_check(executable, path)[str(path)]
    assert report["status"] == "pass", report.get("error") or report["failures"]
    assert report["terms"] == [{"name": "mtp", "weight": "3/10", "objective": "token_mean", "valid_tokens": 3,
                                "count": "3"}]
    for name in ("main", "MTP", ""):
        with pytest.raises(ValueError, match="identifier"):
            dump.term(name, [[[1]]])
    with pytest.raises(ValueError, match="mixes numbers and vectors"):
        dump.term_measurement("mtp", [[1], 2])
    with pytest.raises(ValueError, match="3 ranks, the main loss 2"):
        dump.document([[[1]], [[2]]], terms=[dump.term("mtp", [[[1]], [[2]], [[3]]])])
