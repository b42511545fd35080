"""The probe's document from the ranks' records, without torch and without processes.

Records are built here by hand as ``_probe_gather.rank_record`` builds them on each rank; the tests
check what ``_probe_document.document`` makes of them (the normcheck/1 document, or the ProbeError
every rank would raise), the FSDP2 reassembly of sharded vectors and the reducer's inference.
"""

import json
import os
import pickle
import subprocess
import sys
from dataclasses import replace

import pytest

from normcheck import dump, run_check
from normcheck._probe_document import assemble, document, infer_reducer, unreduced
from normcheck._probe_record import Geometry, ProbeError, RankRecord

TWO = Geometry(slots=2, world_size=2, witness=False)  # components: rank 0's slots 0-1, rank 1's 2-3


def group(count):
    """One microbatch of ``count`` valid tokens, one group, as ``Microbatch.written()`` gives it."""
    return (dump.group(count, value=1, padding=0), None)


def record(rank, vector, *, used=1, counts=(2,), **fields):
    """Rank ``rank``'s record of one step whose reduced p.grad is ``vector`` (the reducer given as mean)."""
    defaults = dict(microbatches=tuple(group(n) for n in counts), sequences=(False,) * len(counts),
                    valid=tuple(counts), used=used, vectors={"": tuple(vector)}, dtype="float64", reducer="mean")
    defaults.update(fields)
    return RankRecord(rank=rank, **defaults)


def made(records, geometry=TWO, objective="token_mean", normalizer=None, description=None):
    return document(records, geometry, objective=objective, normalizer=normalizer, description=description,
                    origin="a hand-built step", backend="no backend")


def global_mean(counts=(2, 3)):
    """Both ranks' records of a global token mean: p.grad[k] = −(tokens of group k) / N on every rank."""
    total = sum(counts)
    vector = [-counts[0] / total, 0.0, -counts[1] / total, 0.0]
    return [record(r, vector, counts=(counts[r],)) for r in range(2)]


def local_mean(counts=(2, 3)):
    """Each rank divided by its own count, DDP averaged: p.grad[k] = −1 / W for every group."""
    vector = [-1 / 2, 0.0, -1 / 2, 0.0]
    return [record(r, vector, counts=(counts[r],)) for r in range(2)]


def test_a_global_token_mean_is_written_rank_by_rank_in_group_order():
    written = json.loads(dump.render(made(global_mean())))
    assert written["world_size"] == 2 and written["reducer"] == "mean"
    assert written["observed"]["dtype"] == "float64"
    assert written["observed"]["per_rank"] == [[(-0.4).hex(), (-0.6).hex()]] * 2
    assert written["description"] == "a hand-built step, W = 2 (no backend), reducer mean (given)"


def test_the_gate_passes_the_global_mean_and_fails_the_local_one(tmp_path, executable):
    for name, records, passed in (("global", global_mean(), True), ("local", local_mean(), False)):
        path = str(tmp_path / f"{name}.json")
        dump.write(path, made(records))
        verdict = run_check(path, executable=executable)[0]
        assert verdict.passed is passed, (name, verdict.message)
    assert "local_mean" in verdict.diagnosis


def test_every_rank_s_error_is_raised_once_in_rank_order():
    records = [RankRecord(rank=0, error="p is not 0"), RankRecord(rank=1, error="rank 1: ValueError: x"),
               RankRecord(rank=2, error="p is not 0")]
    with pytest.raises(ProbeError, match=r"^p is not 0; rank 1: ValueError: x$"):
        made(records, Geometry(2, 3, False))


def test_a_gradient_each_rank_kept_to_itself_was_never_reduced():
    own = [record(0, [-0.2, 0.0, 0.0, 0.0]), record(1, [0.0, 0.0, -0.3, 0.0])]
    assert unreduced(own, TWO).startswith("nothing combined the ranks' gradients of p")
    under_no_sync = [record(r, v.vectors[""], ddp_forward=True) for r, v in enumerate(own)]
    assert unreduced(under_no_sync, TWO).startswith("DistributedDataParallel never synchronized")
    with pytest.raises(ProbeError, match="nothing combined"):
        made(own)
    assert unreduced(global_mean(), TWO) is None
    assert unreduced(own, Geometry(2, 1, False)) is None  # one rank: nothing to combine


def test_gradient_in_a_component_no_group_was_given_is_refused():
    records = global_mean()
    records[1] = record(1, [-0.4, 1e-3, -0.6, 0.0], counts=(3,))
    with pytest.raises(ProbeError, match=r"rank 1's p has gradient in components no group was given \(up to 0.001\)"):
        made(records)


def test_weights_make_the_objective_weighted_and_refuse_another():
    weighted = [record(r, [-0.5, 0.0, -0.5, 0.0], weighted=True,
                       microbatches=(([1, 1], [0.5, 0.5]),)) for r in range(2)]
    assert made(weighted)["objective"] == "weighted_token_mean"
    with pytest.raises(ProbeError, match="the objective is weighted_token_mean, not sequence_mean"):
        made(weighted, objective="sequence_mean")
    with pytest.raises(ProbeError, match="no loss of the step had weights"):
        made(global_mean(), objective="weighted_token_mean")
    mixed = [weighted[0], global_mean()[1]]
    with pytest.raises(ProbeError, match="some ranks' losses had weights and some did not"):
        made(mixed)


def test_a_sequence_objective_needs_every_microbatch_s_sequences():
    with pytest.raises(ProbeError, match="rank 0's microbatch 0 has none"):
        made(global_mean(), objective="sequence_mean")


def test_divided_by_on_some_ranks_only_is_refused_and_on_all_is_written():
    records = global_mean()
    with pytest.raises(ProbeError, match="divided_by\\(\\) was called on some ranks and not on others"):
        made([records[0], record(1, records[1].vectors[""], counts=(3,), divided_by=5)])
    both = [record(r, records[r].vectors[""], counts=(2 + r,), divided_by=d) for r, d in enumerate((5, ("5/2",)))]
    assert made(both)["observed"]["tokens"]["divided_by"] == [5, ["5/2"]]


def test_the_coarsest_arithmetic_names_the_dtype_and_a_finer_reduction_is_kept():
    records = [record(r, v.vectors[""], counts=(2 + r,), dtype="float32", loss_dtypes=("bfloat16",),
                      reduction_dtype="float16") for r, v in enumerate(global_mean())]
    observed = made(records)["observed"]
    assert observed["dtype"] == "bfloat16" and observed["reduction_dtype"] == "float16"
    same = [record(r, v.vectors[""], counts=(2 + r,), reduction_dtype="float64") for r, v in enumerate(global_mean())]
    assert "reduction_dtype" not in made(same)["observed"]


def test_the_reducer_is_the_hook_s_else_inferred_from_the_local_gradients():
    base = global_mean()
    hooked = [record(r, v.vectors[""], counts=(2 + r,), reducer=None, ddp=True, hook="fp16_compress_hook",
                     hook_reducer="mean", hook_dtype="float16") for r, v in enumerate(base)]
    written = made(hooked)
    assert written["reducer"] == "mean" and written["observed"]["reduction_dtype"] == "float16"
    assert written["description"].endswith("reducer mean (the hook fp16_compress_hook), communication hook "
                                           "fp16_compress_hook")
    plain_ddp = [record(r, v.vectors[""], counts=(2 + r,), reducer=None, ddp=True) for r, v in enumerate(base)]
    assert "DDP without a communication hook" in made(plain_ddp)["description"]
    # Without DDP: each rank's own components, reduced against local; a mean halves them on two ranks.
    for factor, reducer in ((2, "mean"), (1, "sum")):
        local = [(-0.4 * factor, 0.0, 0.0, 0.0), (0.0, 0.0, -0.6 * factor, 0.0)]
        inferred = [record(r, v.vectors[""], counts=(2 + r,), reducer=None, local=local[r]) for r, v in enumerate(base)]
        assert made(inferred)["reducer"] == reducer
    unknown = [record(r, v.vectors[""], counts=(2 + r,), reducer=None, ddp=True, hook="my_hook")
               for r, v in enumerate(base)]
    with pytest.raises(ProbeError, match="cannot tell how the communication hook my_hook combined"):
        made(unknown)


def test_sites_are_restricted_like_p_and_named_in_the_description():
    geometry = Geometry(2, 2, False, sites=("encoder",))
    records = [replace(v, vectors={"": v.vectors[""], "encoder": (-0.1, 0.0, -0.2, 0.0)}) for v in global_mean()]
    written = made(records, geometry)
    assert written["observed"]["sites"] == [{"name": "encoder", "per_rank": [[(-0.1).hex(), (-0.2).hex()]] * 2}]
    assert written["description"].endswith(", sites encoder")
    assert made(records, geometry, description="given")["description"] == "given"


def test_a_record_pickles_as_gather_object_sends_it():
    sent = global_mean()[1]
    assert pickle.loads(pickle.dumps(sent)) == sent
    with pytest.raises(AttributeError):
        sent.used = 2  # frozen: rank 0 reads what the rank sent


def test_the_document_is_made_without_torch():
    code = ("import sys, normcheck._probe_document, normcheck._probe_record; "
            "sys.exit('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0


# -- putting FSDP2's shards together on rank 0 ------------------------------------------------------

def shard(vector, span):
    return RankRecord(rank=0, vectors={"": tuple(vector)}, spans={"": span} if span is not None else {})


def test_each_rank_sees_its_own_shard_and_the_others_elsewhere():
    parts = assemble([shard([1, 2, 0, 0], (0, 2)), shard([0, 0, 3, 4], (2, 4))], TWO)
    assert [p.vectors[""] for p in parts] == [(1, 2, 3, 4), (1, 2, 3, 4)]


def test_replicas_keep_their_own_values_so_the_gate_sees_a_disagreement():
    parts = assemble([shard([1, 2, 3, 4], (0, 4)), shard([1, 2, 3, 5], (0, 4))], TWO)
    assert parts[0].vectors[""] == (1, 2, 3, 4)
    assert parts[1].vectors[""] == (1, 2, 3, 5)  # not overwritten by rank 0's copy


def test_a_component_no_shard_holds_is_an_error_not_a_zero():
    with pytest.raises(ProbeError, match="1 components of p's gradient \\(from 3\\) are on no rank's shard"):
        assemble([shard([1, 2, 0, 0], (0, 2)), shard([0, 0, 0, 0], (2, 3))], TWO)


def test_sharded_on_some_ranks_only_is_an_error():
    with pytest.raises(ProbeError, match="sharded by FSDP on some ranks and not on others"):
        assemble([shard([1, 2, 0, 0], (0, 2)), RankRecord(rank=1, vectors={"": (1, 2, 3, 4)})], TWO)


def test_unsharded_parts_are_left_alone():
    parts = [RankRecord(rank=0, vectors={"": (1, 2, 3, 4)}), RankRecord(rank=1, vectors={"": (1, 2, 3, 4.5)})]
    assert assemble(parts, TWO) == parts


# -- the reducer inferred from the local and reduced gradients ------------------------------------------

def test_the_reducer_is_inferred_from_own_components():
    assert infer_reducer([-1.0, -2.0, -4.0], [-0.5, -1.0, -2.0], 2) == "mean"
    assert infer_reducer([-1.0, -2.0], [-1.0, -2.0], 2) == "sum"
    assert infer_reducer([-1.0, -2.0], [-0.5009765625, -1.0], 2) == "mean"  # float16 rounding
    assert infer_reducer([-1.0, -2.0], [-7.0, -1.0], 2) is None
    assert infer_reducer([0.0, 0.0], [0.0, 0.0], 2) is None
    assert infer_reducer([float("nan"), 1.0], [float("nan"), 1.0], 2) is None
    assert infer_reducer([-4.0], [-4.0], 1) == "mean"
