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
from normcheck._probe_document import assemble, document, infer_reducer, replica_losses, unreduced
from normcheck._probe_record import Geometry, ProbeError, RankRecord, TermDeclaration, TermRecord

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


DP2_TP2 = Geometry(slots=2, world_size=4, witness=False, mesh=(("dp", 2, "data"), ("tp", 2, "replica")))


def replicated(counts=(2, 3), vector=None):
    """dp 2 × tp 2: ranks 2·dp + tp, each tp pair holding data group dp's tokens and writing its region."""
    total = sum(counts)
    vector = vector or [-counts[0] / total, 0.0, -counts[1] / total, 0.0]
    return [record(r, vector, counts=(counts[r // 2],)) for r in range(4)]


def test_replicas_share_a_region_and_every_rank_is_listed_with_its_coordinates(tmp_path, executable):
    assert DP2_TP2.regions == 2 and [DP2_TP2.region(r) for r in range(4)] == [0, 0, 1, 1]
    assert DP2_TP2.components == 4
    written = made(replicated(), DP2_TP2)
    assert [rank["coords"] for rank in written["ranks"]] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert written["observed"]["per_rank"] == [[(-0.4).hex(), (-0.6).hex()]] * 4
    path = str(tmp_path / "replicas.json")
    dump.write(path, written)
    verdict = run_check(path, executable=executable)[0]
    assert verdict.passed, verdict.message
    # Counted over tp as well: every weight halved, named in the mesh's terms.
    halved = made(replicated(vector=[-0.2, 0.0, -0.3, 0.0]), DP2_TP2)
    dump.write(path, halved)
    verdict = run_check(path, executable=executable)[0]
    assert not verdict.passed and "count_with_replicas" in verdict.diagnosis, verdict.message


def test_a_replica_that_recorded_other_groups_than_its_first_is_refused():
    records = replicated()
    records[3] = replace(records[3], used=2, microbatches=(group(1), group(2)), valid=(1, 2), sequences=(False,) * 2)
    with pytest.raises(ProbeError, match=r"rank 3 recorded 2 groups, but rank 2, a replica of it \(the same "
                                         r"coordinates but along tp\), recorded 1"):
        made(records, DP2_TP2)


def test_replicas_losses_are_compared_within_the_loss_dtype_s_roundoff():
    def with_losses(*losses):
        return [replace(part, losses=tuple(values), loss_dtypes=("float32",))
                for part, values in zip(replicated(), losses)]

    same = (2.5, 0.75, 1.0)
    assert replica_losses(with_losses(same, same, (1.0,), (1.0,)), DP2_TP2) is None
    nearly = (2.5 * (1 + 2.0 ** -20), 0.75, 1.0)  # 16 units of float32 roundoff: the same loss
    assert replica_losses(with_losses(same, nearly, (1.0,), (1.0,)), DP2_TP2) is None
    off = (2.5, 0.75 * (1 + 2.0 ** -12), 1.0)  # 4096 units: another loss
    found = replica_losses(with_losses(same, same, (1.0,), (1.0, 0.5)), DP2_TP2)
    assert found.startswith("rank 3 (dp 1, tp 1) recorded 2 loss values, its replica rank 2 (dp 1, tp 0) 1")
    found = replica_losses(with_losses(same, off, (1.0,), (1.0,)), DP2_TP2)
    assert found.startswith("rank 1 (dp 0, tp 1) computed 0.75018310546875 for loss value 1"), found
    assert replica_losses(with_losses(same, (2.5, float("nan"), 1.0), (1.0,), (1.0,)), DP2_TP2) is not None
    assert replica_losses(global_mean(), TWO) is None  # no replicas: nothing to compare


def test_a_check_failed_outside_the_gate_fails_a_passing_verdict(tmp_path, executable):
    path = str(tmp_path / "replicas.json")
    dump.write(path, made(replicated(), DP2_TP2))
    passing = run_check(path, executable=executable)[0]
    failed = passing.with_failed_check("replica_losses", "rank 1 computed 2 where rank 0 computed 1")
    assert passing.passed and not failed.passed and failed.failed_checks == ("replica_losses",)
    assert failed.message.startswith("normcheck: the gate FAILED on")
    assert failed.message.split("\n")[1] == "  check replica_losses failed: rank 1 computed 2 where rank 0 computed 1"


def test_under_replicas_a_region_is_reduced_when_another_region_reaches_a_rank():
    own = [record(r, [-0.4, 0.0, 0.0, 0.0] if r < 2 else [0.0, 0.0, -0.6, 0.0], counts=((2, 3)[r // 2],))
           for r in range(4)]
    assert unreduced(own, DP2_TP2).startswith("nothing combined")
    assert unreduced(replicated(), DP2_TP2) is None


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


def test_the_nominal_accumulation_steps_are_written_and_name_a_short_window(tmp_path, executable):
    """A window of two microbatches whose means were divided by a nominal three: short_window where the step
    declares accumulation_steps=3, a plain factor on the microbatch mean where it declares none or another."""
    counts = ((2, 3), (1, 4))
    vector = [-1 / 6] * 4  # each microbatch's mean ÷ 3, then DDP's mean: every group −n/(3·n·2)
    records = [record(r, vector, used=2, counts=counts[r]) for r in range(2)]
    names = {}
    for declared in (3, None, 4):
        written = document(records, TWO, objective="token_mean", normalizer=None, description=None,
                           origin="a hand-built step", backend="no backend", accumulation_steps=declared)
        assert written.get("accumulation_steps") == declared
        path = str(tmp_path / f"window-{declared}.json")
        dump.write(path, written)
        names[declared] = run_check(path, executable=executable)[0].explanations
    assert names == {3: ("short_window",), None: ("microbatch_mean×2/3",), 4: ("microbatch_mean×2/3",)}


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


def with_term(weights, term_weights, counts=(2, 3), term_counts=(1, 2)):
    """Both ranks' records of a step with an auxiliary term "mtp": slot 0 a main group, slot 1 the term's (of
    ``term_counts[r]`` tokens), each rank's p.grad holding ``weights[r]``/``term_weights[r]`` per token."""
    vector = []
    for r in range(2):
        vector += [-counts[r] * weights[r], -term_counts[r] * term_weights[r]]
    records = []
    for r in range(2):
        term = TermRecord(name="mtp", microbatches=(group(term_counts[r]),), sequences=(False,),
                          valid=(term_counts[r],), slots=(1,))
        records.append(record(r, vector, counts=(counts[r],), used=2, slots=(0,), terms=(term,)))
    return records


def test_an_auxiliary_term_is_written_with_its_own_tokens_and_components():
    declared = {"mtp": TermDeclaration(name="mtp", weight="3/10")}
    written = json.loads(dump.render(document(with_term([0.2, 0.2], [0.1, 0.1]), TWO, objective="token_mean",
                                              normalizer=None, description=None, origin="a hand-built step",
                                              backend="no backend", terms=declared)))
    assert written["terms"] == [{"name": "mtp", "weight": "3/10", "ranks": [{"targets": {"count": 1, "value": 1}},
                                                                           {"targets": {"count": 2, "value": 1}}]}]
    # The main loss's components are slot 0 of each rank's region, the term's slot 1.
    assert written["observed"]["per_rank"] == [[(-0.4).hex(), (-0.6000000000000001).hex()]] * 2
    assert written["observed"]["terms"] == [{"name": "mtp", "per_rank": [[(-0.1).hex(), (-0.2).hex()]] * 2}]
    assert written["description"].endswith(", terms mtp")


def test_a_term_a_rank_never_saw_holds_no_token_there(tmp_path, executable):
    records = with_term([0.2, 0.2], [0.1, 0.0])
    records[1] = replace(records[1], terms=(), slots=None, used=1)
    made_document = made(records)
    assert made_document["terms"][0]["ranks"][1] == {"targets": []}
    assert made_document["observed"]["terms"][0]["per_rank"][0] == [(-0.1).hex()]


def test_an_auxiliary_term_is_judged_on_its_own(tmp_path, executable):
    declared = {"mtp": TermDeclaration(name="mtp", weight="1/2")}
    # The main loss: 1/5 a token (its N = 5); the term: 1/2 · 1/3 (its N = 3) right, 1/2 · 1/5 by the main count.
    for name, term_weight, verdict, names in (("right", 1 / 6, "pass", ()),
                                              ("main_count", 1 / 10, "fail", ("term mtp: main_count",))):
        path = str(tmp_path / f"{name}.json")
        dump.write(path, document(with_term([0.2, 0.2], [term_weight] * 2), TWO, objective="token_mean",
                                  normalizer=None, description=None, origin="a hand-built step",
                                  backend="no backend", terms=declared))
        judged = run_check(path, executable=executable)[0]
        assert (judged.verdict, judged.explanations) == (verdict, names), judged.message
        assert [(t.name, t.verdict) for t in judged.terms] == [("mtp", verdict)]
