"""The probe on a model with a multi-token-prediction head: the main loss and an auxiliary term, each judged
on its own tokens, under DDP on gloo.

The model works token by token (an embedding, a next-token head and an MTP head that predicts the token
after next), so a context-parallel rank's loss on its slices is exactly its share of the whole sequences'.
The MTP labels are the labels shifted once more, the last position of every row left out: the term has
fewer valid tokens than the main loss. The step's loss is main + WEIGHT·mtp, both per-token losses
probed (``probe.add(mtp, mtp_labels, term="mtp")``, the weight declared with ``probe.term``).

W = 2, G = 2 (``no_sync`` on the first microbatch), every loop normalizing the main loss right:

- ``correct``: each loss divided by its own count over both ranks and microbatches, times W: pass;
- ``main_count``: the term divided by the main loss's count (Megatron-LM #2417): ``term mtp: main_count``;
- ``local_count``: the term divided by the rank's own count (Megatron-LM #7452 finding 3): ``term mtp: local_mean``;
- ``microbatch_count``: the term divided by each microbatch's own count, the accumulation by G (the current
  microbatch's count, Megatron-LM #7213): ``term mtp: microbatch_mean``;
- ``overwritten``: the main loss divided by the term's count, which overwrote a count the two shared
  (Megatron-LM #7452 finding 10): ``count_of(mtp)``.

dp 2 × cp 2 on four ranks (``init_device_mesh``), each CP rank holding zigzag slices of its data group's
sequences, G = 1:

- ``correct``: each count all-reduced over dp × cp, times W: pass;
- ``without_cp_compensation``: the term scaled by the dp size only, as if cp did not average it (Megatron-LM
  #3674; verl #6609): the term's weights are the objective's ÷ CP, named on the weight table as
  ``term mtp: count_before_sequence_sharding``, whose words say the loss was averaged over cp once too often;
- ``main_count``: the term divided by the main loss's count over dp × cp: ``term mtp: main_count``.

Every probed step's loss, gradients and SGD update are bitwise the unprobed step's (``invisible``). The mesh
needs DeviceMesh (torch 2.x): registered on the virtual environment's torch only.
"""

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mesh_step  # noqa: E402
from invisible import differences, record  # noqa: E402
from normcheck.launch import launch  # noqa: E402

VOCAB, WIDTH, LENGTH, ROWS, CP = 11, 6, 8, 2, 2
WEIGHT = 0.3  # the code multiplies by the float; the probe is told the weight meant, 3/10
PAIR_LOOPS = ("correct", "main_count", "local_count", "microbatch_count", "overwritten")
MESH_LOOPS = ("correct", "without_cp_compensation", "main_count")


class WithMTP(torch.nn.Module):
    """Token by token: the next token's logits and, from the same state, the logits of the token after it."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.mtp = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        hidden = torch.tanh(self.embed(tokens))
        return self.head(hidden), self.mtp(hidden)


def batch(seed, padding):
    """Tokens and labels of ROWS rows (-100 on the last `padding[b]` positions of row b), and the MTP labels: the
    labels shifted once more, the last position of each row without one."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (ROWS, LENGTH), generator=generator)
    labels = torch.randint(0, VOCAB, (ROWS, LENGTH), generator=generator)
    for row, pad in enumerate(padding):
        if pad:
            labels[row, LENGTH - pad:] = -100
    mtp_labels = torch.full_like(labels, -100)
    mtp_labels[:, :-1] = labels[:, 1:]
    return tokens, labels, mtp_labels


# Per rank, per microbatch: the padding of each row. Counts (main, MTP) per microbatch: rank 0 (13, 11) and
# (16, 14); rank 1 (10, 8) and (15, 13): every loop's weights differ from the objective's and from each other's.
PADDING = [[(0, 3), (0, 0)], [(2, 4), (1, 0)]]


def per_token(logits, labels):
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none").view(labels.shape)


def counted(labels, group=None):
    """The valid labels, all-reduced over `group` (None: every rank)."""
    count = (labels != -100).sum().to(torch.float64)
    dist.all_reduce(count, group=group)
    return count


def pair_step(loop, rank, probe_factory):
    """One DDP update of two microbatches on this rank: (the invisibility record, the verdict or None)."""
    torch.manual_seed(0)
    model = WithMTP()
    probe = probe_factory(model) if probe_factory else None
    if probe:
        probe.term("mtp", weight=Fraction(3, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.5)
    microbatches = [batch(10 * rank + m, PADDING[rank][m]) for m in range(2)]
    world = dist.get_world_size()
    main_total = sum(counted(labels) for _, labels, _ in microbatches)
    mtp_total = sum(counted(mtp_labels) for _, _, mtp_labels in microbatches)
    mtp_own = sum((mtp_labels != -100).sum().to(torch.float64) for _, _, mtp_labels in microbatches)
    losses = []
    with probe.step(wrap=False) if probe else torch.enable_grad():
        for m, (tokens, labels, mtp_labels) in enumerate(microbatches):
            context = ddp.no_sync() if m == 0 else torch.enable_grad()
            with context:
                logits, mtp_logits = ddp(tokens)
                main, mtp = per_token(logits, labels), per_token(mtp_logits, mtp_labels)
                if probe:
                    main = probe.add(main, labels)
                    mtp = probe.add(mtp, mtp_labels, term="mtp")
                main_loss = main.sum() * world / (mtp_total if loop == "overwritten" else main_total)
                if loop == "main_count":
                    mtp_loss = mtp.sum() * world / main_total
                elif loop == "local_count":
                    mtp_loss = mtp.sum() / mtp_own
                elif loop == "microbatch_count":
                    mtp_loss = mtp.sum() / (mtp_labels != -100).sum() / len(microbatches)
                else:
                    mtp_loss = mtp.sum() * world / mtp_total
                loss = main_loss + WEIGHT * mtp_loss
                loss.backward()
                losses.append(loss)
    verdict = probe.judge(ddp) if probe else None
    return record(losses, model, optimizer, probe), verdict


def every_loop(loops, run, probe, rank):
    """Each loop run unprobed and probed (``run(loop, probe_factory)``): what changed, and the verdict."""
    out = {}
    for loop in loops:
        plain, _ = run(loop, None)
        probed, verdict = run(loop, probe)
        out[loop] = {"differences": differences(plain, probed), "verdict": verdict.verdict,
                     "explanations": verdict.explanations,
                     "terms": [(t.name, t.verdict, t.diagnosis) for t in verdict.terms],
                     "message": verdict.message if rank == 0 else ""}
    return out


def every_pair_loop(rank, world_size, probe):
    def run(loop, factory):
        return pair_step(loop, rank, factory)

    return every_loop(PAIR_LOOPS, run, probe, rank)


def one_mesh_step(loop, mesh, probe_factory):
    """One DDP step on dp 2 × cp 2: (the invisibility record, the verdict or None)."""
    torch.manual_seed(0)
    model = WithMTP()
    probe = probe_factory(model, mesh=mesh, sequence_dims=("cp",)) if probe_factory else None
    if probe:
        probe.term("mtp", weight=Fraction(3, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.5)
    dp, cp = mesh.get_coordinate()
    tokens, labels, mtp_labels = batch(100 + dp, [(0, 3), (2, 0)][dp])
    held = mesh_step.zigzag(cp, LENGTH, CP)
    tokens, labels, mtp_labels = tokens[:, held], labels[:, held], mtp_labels[:, held]
    positions = held.expand(ROWS, -1)
    world = dist.get_world_size()
    with probe.step(wrap=False) if probe else torch.enable_grad():
        logits, mtp_logits = ddp(tokens)
        main, mtp = per_token(logits, labels), per_token(mtp_logits, mtp_labels)
        if probe:
            main = probe.add(main, labels, positions=positions)
            mtp = probe.add(mtp, mtp_labels, positions=positions, term="mtp")
        main_total, mtp_total = counted(labels), counted(mtp_labels)
        main_loss = main.sum() * world / main_total
        if loop == "without_cp_compensation":
            mtp_loss = mtp.sum() * (world // CP) / mtp_total
        elif loop == "main_count":
            mtp_loss = mtp.sum() * world / main_total
        else:
            mtp_loss = mtp.sum() * world / mtp_total
        loss = main_loss + WEIGHT * mtp_loss
        loss.backward()
    verdict = probe.judge(ddp) if probe else None
    return record([loss], model, optimizer, probe), verdict


def every_mesh_loop(rank, world_size, probe):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, CP), mesh_dim_names=("dp", "cp"))

    def run(loop, factory):
        return one_mesh_step(loop, mesh, factory)

    return every_loop(MESH_LOOPS, run, probe, rank)


_ranks = {}


def ranks(kind):
    if kind not in _ranks:
        _ranks[kind] = (launch(every_pair_loop, 2, timeout=240) if kind == "pair"
                        else launch(every_mesh_loop, 4, timeout=240))
    return _ranks[kind]


@pytest.mark.parametrize("loop", PAIR_LOOPS)
def test_the_probed_step_is_bitwise_the_unprobed_one(loop):
    for values in ranks("pair"):
        assert values[loop]["differences"] == [], values[loop]["differences"]


@pytest.mark.parametrize("loop, verdict, explanations, term", [
    ("correct", "pass", (), ("mtp", "pass", ())),
    ("main_count", "fail", ("term mtp: main_count",), ("mtp", "fail", ("main_count",))),
    ("local_count", "fail", ("term mtp: local_mean",), ("mtp", "fail", ("local_mean",))),
    ("microbatch_count", "fail", ("term mtp: microbatch_mean",), ("mtp", "fail", ("microbatch_mean",))),
    # The main loss fails, the term passes: the update fails on the main loss's explanation alone.
    ("overwritten", "fail", ("count_of(mtp)",), ("mtp", "pass", ())),
])
def test_each_loss_is_judged_on_its_own(loop, verdict, explanations, term):
    first = ranks("pair")[0][loop]
    assert (first["verdict"], first["explanations"]) == (verdict, explanations), first["message"]
    assert first["terms"] == [term], first["message"]
    if loop == "main_count":
        assert "term mtp: the term's loss sum was divided by the main loss's count" in first["message"]


@pytest.mark.parametrize("loop", MESH_LOOPS)
def test_on_a_dp_cp_mesh_the_probed_step_is_bitwise_the_unprobed_one(loop):
    pytest.importorskip("torch.distributed.device_mesh")
    for values in ranks("mesh"):
        assert values[loop]["differences"] == [], values[loop]["differences"]


@pytest.mark.parametrize("loop, verdict, explanations", [
    ("correct", "pass", ()),
    ("without_cp_compensation", "fail", ("term mtp: count_before_sequence_sharding",)),
    ("main_count", "fail", ("term mtp: main_count",)),
])
def test_on_a_dp_cp_mesh_the_term_is_named_in_the_mesh_s_terms(loop, verdict, explanations):
    pytest.importorskip("torch.distributed.device_mesh")
    first = ranks("mesh")[0][loop]
    assert (first["verdict"], first["explanations"]) == (verdict, explanations), first["message"]
    if loop == "without_cp_compensation":
        assert "averaged over cp once too often" in first["message"]


def test_a_term_is_declared_with_a_name_a_weight_and_an_objective():
    from normcheck.probe import Probe, ProbeError

    probe = Probe(WithMTP(), world_size=1, rank=0)
    for name in ("main", "MTP", "", 3):
        with pytest.raises(ProbeError, match="identifier"):
            probe.term(name)
    with pytest.raises(ProbeError, match="other than 0"):
        probe.term("mtp", weight=0)
    with pytest.raises(ProbeError, match="no weights"):
        probe.term("mtp", objective="weighted_token_mean")
    with pytest.raises(ProbeError, match="normalizer"):
        probe.term("mtp", objective="constant")
    probe.term("mtp", weight=Fraction(3, 10))
    assert probe._term_declarations["mtp"].weight == "3/10"
    loss = torch.zeros(2, 3, requires_grad=True)
    with probe.step(wrap=False):
        with pytest.raises(ProbeError, match="before any main loss"):
            probe.add(loss, term="mtp")
