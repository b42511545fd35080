"""The probe on a DeviceMesh: dp 2 × cp 2 on four gloo ranks, each rank holding zigzag slices of its data
group's sequences, measured with ``Probe(model, mesh=mesh, sequence_dims=("cp",))`` and
``probe.add(per_token, labels, positions=pos)``.

The model works token by token (an embedding and a linear head, no attention across ranks), so each CP
rank's loss on its slices is exactly its share of the whole sequences' loss. Each loop divides the
rank's loss sum by a count and DDP averages over all four ranks:

- ``correct``: the valid tokens all-reduced over dp × cp, times W: the gate passes;
- ``count_over_dp``: the count all-reduced over dp only (verl #5983): named ``count_over_data_dims``;
- ``own_count``: each rank's own slices' count: named ``local_mean`` (and ``sum_of_microbatch_means``,
  the same weights when a rank holds one microbatch).

Under ``objective="sequence_mean"`` (GRPO's per-sequence token mean) on rollouts whose prompts are masked,
so that some slices hold no valid token, three more loops run on DDP: ``sequence_correct`` divides each
row's slice by its whole sequence's count (all-reduced over cp) and by B (rows with a valid token, counted
on the joined counts and summed over dp), times W: the gate passes; ``slice_length`` divides each slice by
its own count: named ``slice_length``; ``sequences_over_dp`` counts the rows whose slice holds a valid
token and sums over dp only: named ``sequences_over_data_dims``.

The same token-mean loops run again with the model sharded by FSDP2 instead of DDP, on the same 2-D mesh, as
context-parallel trainers shard it: ``fsdp``, sharded over dp × cp flattened into one dimension (every
rank holds a quarter of each parameter); ``hsdp``, the mesh itself (replicated over dp, sharded over cp).
The probe reads its shards of p.grad and rank 0 puts them together; the verdicts are DDP's.

Every probed step's loss, gradients and SGD update are bitwise the unprobed step's. Needs DeviceMesh
(torch 2.x): registered on the virtual environment's torch only.
"""

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
init_device_mesh = pytest.importorskip("torch.distributed.device_mesh").init_device_mesh

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mesh_step  # noqa: E402
from normcheck.launch import launch  # noqa: E402

VOCAB, WIDTH, LENGTH, ROWS, CP = 11, 6, 8, 2, 2
LOOPS = ("correct", "count_over_dp", "own_count")
SEQUENCE_LOOPS = ("sequence_correct", "slice_length", "sequences_over_dp")
ROLLOUT_ROWS = 3
WRAPS = ("ddp", "fsdp", "hsdp")


def whole_batch(dp):
    """Data group dp's batch of whole sequences: tokens and labels (-100 where a position is padding)."""
    generator = torch.Generator().manual_seed(100 + dp)
    tokens = torch.randint(0, VOCAB, (ROWS, LENGTH), generator=generator)
    labels = torch.randint(0, VOCAB, (ROWS, LENGTH), generator=generator)
    # Uneven counts (13 and 15 valid tokens): data group 0 pads the tail of row 1, data group 1 the head of row 0.
    if dp == 0:
        labels[1, 5:] = -100
    else:
        labels[0, :1] = -100
    return tokens, labels


def rollout_batch(dp):
    """Data group dp's rollouts: each row a prompt (masked, -100) then a response, data group 1's row 0 padded
    at its end. Row 0 of data group 0 answers in the last chunk only, so CP rank 1's slice of it is empty;
    B = 6 sequences, not W = 4, so that the sum of sequence means differs from the objective."""
    generator = torch.Generator().manual_seed(200 + dp)
    tokens = torch.randint(0, VOCAB, (ROLLOUT_ROWS, LENGTH), generator=generator)
    labels = torch.randint(0, VOCAB, (ROLLOUT_ROWS, LENGTH), generator=generator)
    prompts = (6, 2, 4) if dp == 0 else (3, 1, 5)
    for row, prompt in enumerate(prompts):
        labels[row, :prompt] = -100
    if dp == 1:
        labels[0, LENGTH - 1:] = -100
    return tokens, labels


class PerToken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.head(torch.tanh(self.embed(tokens)))


def wrapped(model, wrap, mesh):
    """The model as `wrap` trains it: DDP over every rank, or FSDP2 over dp × cp flattened, or HSDP on the mesh."""
    if wrap == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    shards = mesh["dp", "cp"]._flatten("dp_cp") if wrap == "fsdp" else mesh
    for child in (model.embed, model.head):
        fully_shard(child, mesh=shards)
    return fully_shard(model, mesh=shards)


def zigzag_slice(batch, cp):
    """This cp rank's zigzag slice of a data group's (tokens, labels): the two, and each token's position."""
    tokens, labels = batch
    held = mesh_step.zigzag(cp, LENGTH, CP)
    return tokens[:, held], labels[:, held], held.expand(tokens.shape[0], -1)


def per_token_loss(ddp, tokens, labels, probe, positions):
    """Each row's per-token cross-entropy, the probe's term added at the tokens' positions when probed."""
    logits = ddp(tokens)
    per_token = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1),
                                reduction="none").view(tokens.shape[0], -1)
    return probe.add(per_token, labels, positions=positions) if probe else per_token


def one_step(loop, mesh, probe_factory, wrap="ddp"):
    """One step of `loop` on this rank; (loss, gradients, parameters after SGD, verdict or None)."""
    torch.manual_seed(0)
    model = PerToken()
    # FSDP2 wants one dtype per parameter group: p takes the model's (on four ranks the probe's default is the
    # other float dtype, which gives p a DDP bucket of its own).
    options = {} if wrap == "ddp" else {"dtype": torch.float32}
    options["keep"] = True  # the dump is read back (for how p was read), then removed with its folder
    probe = probe_factory(model, mesh=mesh, sequence_dims=("cp",), **options) if probe_factory else None
    ddp = wrapped(model, wrap, mesh)
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.5)
    dp, cp = mesh.get_coordinate()
    tokens, labels, positions = zigzag_slice(whole_batch(dp), cp)

    def loss_of():
        local_sum = per_token_loss(ddp, tokens, labels, probe, positions).sum()
        count = (labels != -100).sum().to(torch.float64)
        if loop == "correct":
            dist.all_reduce(count)
            return local_sum * dist.get_world_size() / count
        if loop == "count_over_dp":
            dist.all_reduce(count, group=mesh.get_group("dp"))
            return local_sum * dist.get_world_size() / count
        return local_sum / count

    return mesh_step.step(loss_of, model, probe, ddp, optimizer)


def one_sequence_step(loop, mesh, probe_factory):
    """One step of a sequence_mean loop on this rank (DDP); (loss, gradients, parameters after SGD, verdict)."""
    torch.manual_seed(0)
    model = PerToken()
    probe = (probe_factory(model, mesh=mesh, sequence_dims=("cp",), objective="sequence_mean", keep=True)
             if probe_factory else None)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.5)
    dp, cp = mesh.get_coordinate()
    tokens, labels, positions = zigzag_slice(rollout_batch(dp), cp)

    def loss_of():
        row_sums = per_token_loss(ddp, tokens, labels, probe, positions).sum(dim=1)
        slice_counts = (labels != -100).sum(dim=1).to(torch.float64)
        whole_counts = slice_counts.clone()
        dist.all_reduce(whole_counts, group=mesh.get_group("cp"))  # each row's nₛ over its slices
        if loop == "sequences_over_dp":  # the rows this rank's slices hold a valid token of, over dp only
            sequences = (slice_counts > 0).sum().to(torch.float64)
        else:  # each row once: its joined count, on every cp rank alike, summed over dp
            sequences = (whole_counts > 0).sum().to(torch.float64)
        dist.all_reduce(sequences, group=mesh.get_group("dp"))
        lengths = slice_counts.clamp(min=1) if loop == "slice_length" else whole_counts.clamp(min=1)
        return (row_sums / lengths).sum() * dist.get_world_size() / sequences

    return mesh_step.step(loss_of, model, probe, ddp, optimizer)


def every_loop(rank, world_size, probe):
    mesh = init_device_mesh("cpu", (2, CP), mesh_dim_names=("dp", "cp"))
    out = {}
    for loop in SEQUENCE_LOOPS:
        plain = one_sequence_step(loop, mesh, None)
        probed = one_sequence_step(loop, mesh, probe)
        verdict = probed[3]
        if rank == 0:
            shutil.rmtree(os.path.dirname(verdict.file), ignore_errors=True)
        out["sequence", loop] = {"bitwise": mesh_step.unchanged(plain, probed), "verdict": verdict.verdict,
                                 "explanations": verdict.explanations,
                                 "message": verdict.message if rank == 0 else ""}
    for wrap in WRAPS:
        for loop in LOOPS:
            plain = one_step(loop, mesh, None, wrap)
            probed = one_step(loop, mesh, probe, wrap)
            verdict = probed[3]
            sharded = None
            if rank == 0:  # rank 0 writes the dump
                with open(verdict.file, encoding="utf-8") as f:
                    sharded = "p sharded by FSDP2" in json.load(f).get("description", "")
                shutil.rmtree(os.path.dirname(verdict.file), ignore_errors=True)
            out[wrap, loop] = {"bitwise": mesh_step.unchanged(plain, probed), "sharded": sharded,
                               "verdict": verdict.verdict, "explanations": verdict.explanations,
                               "message": verdict.message if rank == 0 else ""}
    return out


_ranks = {}


def ranks():
    if "values" not in _ranks:
        _ranks["values"] = launch(every_loop, 4, timeout=240)
    return _ranks["values"]


@pytest.mark.parametrize("wrap", WRAPS)
@pytest.mark.parametrize("loop", LOOPS)
def test_the_probed_step_is_bitwise_the_unprobed_one(loop, wrap):
    assert all(values[wrap, loop]["bitwise"] for values in ranks())


@pytest.mark.parametrize("loop, verdict, explanations", [
    ("correct", "pass", ()),
    ("count_over_dp", "fail", ("count_over_data_dims",)),
    # One microbatch per rank: a microbatch's own mean is the rank's, told apart only by accumulating.
    ("own_count", "fail", ("local_mean", "sum_of_microbatch_means")),
])
@pytest.mark.parametrize("wrap", WRAPS)
def test_the_gate_names_the_count_in_the_mesh_s_terms(loop, verdict, explanations, wrap):
    first = ranks()[0][wrap, loop]
    assert first["sharded"] == (wrap != "ddp"), "the dump says whether p was read from FSDP2's shards"
    assert (first["verdict"], first["explanations"]) == (verdict, explanations), first["message"]
    assert first["message"].split("\n")[0].endswith(", mesh dp 2 × cp 2 (sequence))"), first["message"]
    if loop == "count_over_dp":
        assert "reduced over dp only, not over dp × cp" in first["message"]
        assert "rank 1 (dp 0, cp 1)" in first["message"]


@pytest.mark.parametrize("loop", SEQUENCE_LOOPS)
def test_the_probed_sequence_mean_step_is_bitwise_the_unprobed_one(loop):
    assert all(values["sequence", loop]["bitwise"] for values in ranks())


@pytest.mark.parametrize("loop, verdict, explanations", [
    ("sequence_correct", "pass", ()),
    ("slice_length", "fail", ("slice_length",)),
    ("sequences_over_dp", "fail", ("sequences_over_data_dims",)),
])
def test_the_gate_joins_the_slices_under_sequence_mean(loop, verdict, explanations):
    first = ranks()[0]["sequence", loop]
    assert (first["verdict"], first["explanations"]) == (verdict, explanations), first["message"]
    if loop == "slice_length":
        assert "each cp rank divided its slice by the slice's length, not the whole sequence's" in first["message"]


class FakeMesh:
    """What the probe reads of a DeviceMesh: its dimension names and its ranks' layout."""

    def __init__(self, layout, names):
        self.mesh = layout
        self.mesh_dim_names = names


def test_a_mesh_is_checked_when_the_probe_is_built():
    from normcheck.probe import Probe, ProbeError

    row_major = torch.arange(4).view(2, 2)
    with pytest.raises(ProbeError, match="named dimensions"):
        Probe(PerToken(), mesh=FakeMesh(row_major, None), world_size=4, rank=0)
    with pytest.raises(ProbeError, match="no dimension 'sp'"):
        Probe(PerToken(), mesh=FakeMesh(row_major, ("dp", "cp")), sequence_dims=("sp",), rank=0)
    with pytest.raises(ProbeError, match="row-major"):
        Probe(PerToken(), mesh=FakeMesh(row_major.t(), ("dp", "cp")), sequence_dims=("cp",), rank=0)
    with pytest.raises(ProbeError, match="cannot hold both"):
        Probe(PerToken(), mesh=FakeMesh(row_major, ("dp", "cp")), sequence_dims=("cp",), replica_dims=("cp",), rank=0)
    with pytest.raises(ProbeError, match="not the world's 2"):
        Probe(PerToken(), mesh=FakeMesh(row_major, ("dp", "cp")), sequence_dims=("cp",), world_size=2, rank=0)
    with pytest.raises(ProbeError, match="pass mesh="):
        Probe(PerToken(), sequence_dims=("cp",))
    probe = Probe(PerToken(), mesh=FakeMesh(row_major, ("dp", "cp")), sequence_dims=("cp",), rank=1)
    assert probe.world_size == 4 and probe.mesh_dims == (("dp", 2, "data"), ("cp", 2, "sequence"))
    # Replicas share one region of p: rank 3 (dp 1, tp 1) writes the components of rank 2 (dp 1, tp 0).
    replicated = Probe(PerToken(), mesh=FakeMesh(row_major, ("dp", "tp")), replica_dims=("tp",), rank=3, slots=5)
    assert (replicated.world_size, replicated.regions, replicated.region) == (4, 2, 1)
    assert replicated.components == 5 * 2 * 2  # slots × regions, twice for the witness
    inner = Probe(PerToken(), mesh=FakeMesh(torch.arange(8).view(2, 2, 2), ("dp", "tp", "cp")), replica_dims=("tp",),
                  sequence_dims=("cp",), rank=5)  # coordinates (1, 0, 1): region (dp 1, cp 1) of four
    assert (inner.regions, inner.region) == (4, 3)


def test_positions_need_sequence_dimensions():
    from normcheck.probe import Probe, ProbeError

    plain = Probe(PerToken())
    loss = torch.zeros(2, 3, requires_grad=True)
    with pytest.raises(ProbeError, match="context parallelism"):
        plain.add(loss, torch.zeros(2, 3, dtype=torch.int64), positions=torch.zeros(2, 3, dtype=torch.int64))
    sliced = Probe(PerToken(), mesh=FakeMesh(torch.arange(2).view(1, 2), ("dp", "cp")), sequence_dims=("cp",), rank=0)
    with pytest.raises(ProbeError, match="one position per token"):
        sliced.add(loss, positions=torch.zeros(3, dtype=torch.int64))
    with pytest.raises(ProbeError, match="integers"):
        sliced.add(loss, positions=torch.zeros(2, 3))
