"""The probe on a dp × tp DeviceMesh: dp 2 × tp 2 on four gloo ranks and dp 3 × tp 2 on six, a
vocabulary-parallel head written
the way Megatron-style tensor parallelism writes it, measured with
``Probe(model, mesh=mesh, replica_dims=("tp",))``.

Each tp rank holds half of the output head's rows (its shard of the vocabulary); the cross-entropy
combines the shards' maxima, exponential sums and target logits with all-reduces over tp, and its
backward is local (softmax minus one-hot on the rank's own shard); the hidden state enters the head
through an identity whose backward sums the shards' partial gradients over tp. Both ranks of a tp
group therefore compute the same per-token losses on the same tokens: they are replicas. DDP averages
over the dp group only, so W = 2, and N counts each data group's tokens once. Each loop divides the
rank's loss sum by a count:

- ``correct``: the valid tokens all-reduced over dp, times W: the gate passes;
- ``count_with_tp``: the count all-reduced over every rank, tp included, so every token is counted
  twice: named ``count_with_replicas``;
- ``scaled_by_tp``: the correct loss multiplied by the tp size (a sum over tp ranks where each already
  held the whole loss): named ``objective×tp``;
- ``smoothing``: label smoothing, its mean over the whole vocabulary (the shards' sums all-reduced):
  the gate passes;
- ``smoothing_over_shard``: label smoothing averaged over the rank's own vocabulary shard (Megatron-LM
  #7452 finding 1): every token still weighs what the objective gives it, but the tp replicas compute
  different per-token losses, so the probe's comparison of the replicas' losses fails the step
  (``replica_losses``), naming the first token that differs.

On dp 2 × tp 2 the tp size equals W, so ``count_with_replicas`` weighs every token exactly as
``global_share`` (÷ W) does, and ``objective×tp`` as ``objective×W``: the gate names both of each pair
and says that another dp size tells them apart; dp 3 × tp 2 is that run, where each is named alone.

Every probed step's loss, gradients and SGD update are bitwise the unprobed step's. Needs DeviceMesh
(torch 2.x): registered on the virtual environment's torch only.
"""

import pytest

torch = pytest.importorskip("torch")
init_device_mesh = pytest.importorskip("torch.distributed.device_mesh").init_device_mesh

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mesh_step  # noqa: E402
from normcheck.launch import launch  # noqa: E402

VOCAB, WIDTH, LENGTH, ROWS, TP = 12, 6, 7, 2, 2
LOOPS = ("correct", "count_with_tp", "scaled_by_tp", "smoothing", "smoothing_over_shard")
SMOOTHING = 0.1


def batch(dp):
    """Data group dp's tokens and labels (-100 where a position is padding): 11, 13 and 13 valid tokens."""
    generator = torch.Generator().manual_seed(300 + dp)
    tokens = torch.randint(0, VOCAB, (ROWS, LENGTH), generator=generator)
    labels = torch.randint(0, VOCAB, (ROWS, LENGTH), generator=generator)
    labels[1, LENGTH - (3, 1, 1)[dp]:] = -100
    return tokens, labels


class CopyToTensorParallel(torch.autograd.Function):
    """Identity forward; the backward sums the tp shards' partial gradients of the input."""

    @staticmethod
    def forward(ctx, hidden, group):
        ctx.group = group
        return hidden.view_as(hidden)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class VocabParallelCrossEntropy(torch.autograd.Function):
    """Per-token cross-entropy over logits sharded by vocabulary across the tp group."""

    @staticmethod
    def forward(ctx, logits, labels, first, group, smoothing=None):
        """``smoothing``: None, "vocab" (ε times the mean of −log p over the whole vocabulary) or "shard"
        (the same mean taken over this rank's shard only)."""
        local = logits.detach().to(torch.float64)
        top = local.max(dim=-1).values
        dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
        shifted = local - top.unsqueeze(-1)
        exp = shifted.exp()
        total = exp.sum(dim=-1)
        dist.all_reduce(total, group=group)
        width = local.shape[-1]
        valid = labels != -100
        mine = valid & (labels >= first) & (labels < first + width)
        index = (labels - first).clamp(0, width - 1)
        target = torch.where(mine, shifted.gather(-1, index.unsqueeze(-1)).squeeze(-1), torch.zeros_like(top))
        dist.all_reduce(target, group=group)
        loss = torch.where(valid, total.log() - target, torch.zeros_like(top))
        softmax = exp / total.unsqueeze(-1)
        onehot = torch.zeros_like(softmax).scatter_(-1, index.unsqueeze(-1), mine.unsqueeze(-1).to(softmax.dtype))
        local_grad = softmax - onehot
        if smoothing is not None:
            # −mean log p = log Σ exp − mean of the shifted logits, over the vocabulary or the shard alone.
            summed = shifted.sum(dim=-1)
            over = width
            if smoothing == "vocab":
                dist.all_reduce(summed, group=group)
                over = VOCAB
            uniform = total.log() - summed / over
            loss = (1 - SMOOTHING) * loss + SMOOTHING * torch.where(valid, uniform, torch.zeros_like(top))
            local_grad = (1 - SMOOTHING) * local_grad + SMOOTHING * (softmax - 1 / over)
        ctx.save_for_backward(local_grad * valid.unsqueeze(-1))
        ctx.dtype = logits.dtype
        return loss.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad):
        (local_grad,) = ctx.saved_tensors
        return (local_grad * grad.to(torch.float64).unsqueeze(-1)).to(ctx.dtype), None, None, None, None


class ShardedHead(torch.nn.Module):
    """An embedding (replicated over tp) and this tp rank's rows of the output head."""

    def __init__(self, tp_rank, group):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        whole = torch.nn.Linear(WIDTH, VOCAB)
        rows = slice(tp_rank * VOCAB // TP, (tp_rank + 1) * VOCAB // TP)
        self.head = torch.nn.Linear(WIDTH, VOCAB // TP)
        with torch.no_grad():
            self.head.weight.copy_(whole.weight[rows])
            self.head.bias.copy_(whole.bias[rows])
        self.group = group

    def forward(self, tokens):
        hidden = CopyToTensorParallel.apply(torch.tanh(self.embed(tokens)), self.group)
        return self.head(hidden)


def one_step(loop, mesh, probe_factory):
    """One DDP step of `loop` on this rank; (loss, gradients, parameters after SGD, verdict or None)."""
    dp, tp = mesh.get_coordinate()
    tp_group = mesh.get_group("tp")
    model = ShardedHead(tp, tp_group)
    probe = probe_factory(model, mesh=mesh, replica_dims=("tp",)) if probe_factory else None
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=mesh.get_group("dp"))
    optimizer = torch.optim.SGD(probe.model_parameters() if probe else model.parameters(), lr=0.5)
    tokens, labels = batch(dp)
    dp_size = mesh.size(0)

    def loss_of():
        logits = ddp(tokens)
        smoothing = {"smoothing": "vocab", "smoothing_over_shard": "shard"}.get(loop)
        per_token = VocabParallelCrossEntropy.apply(logits, labels, tp * VOCAB // TP, tp_group, smoothing)
        if probe:
            per_token = probe.add(per_token, labels)
        local_sum = per_token.sum()
        count = (labels != -100).sum().to(torch.float64)
        if loop == "count_with_tp":
            dist.all_reduce(count)
        else:
            dist.all_reduce(count, group=mesh.get_group("dp"))
        loss = local_sum * dp_size / count
        return loss * TP if loop == "scaled_by_tp" else loss

    return mesh_step.step(loss_of, model, probe, ddp, optimizer)


def reference_gradient(rank_tokens, smoothing=0.0):
    """The objective's gradient of the whole (unsharded) model by plain autograd, for the head's check."""
    torch.manual_seed(0)
    embed = torch.nn.Embedding(VOCAB, WIDTH)
    head = torch.nn.Linear(WIDTH, VOCAB)
    total = 0
    count = 0
    for tokens, labels in rank_tokens:
        logits = head(torch.tanh(embed(tokens)))
        total = total + F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="sum",
                                        label_smoothing=smoothing)
        count += int((labels != -100).sum())
    (total / count).backward()
    return embed.weight.grad


def every_loop(rank, world_size, probe):
    mesh = init_device_mesh("cpu", (world_size // TP, TP), mesh_dim_names=("dp", "tp"))
    out = {}
    for loop in LOOPS:
        plain = one_step(loop, mesh, None)
        probed = one_step(loop, mesh, probe)
        verdict = probed[3]
        out[loop] = {"bitwise": mesh_step.unchanged(plain, probed),
                     "verdict": verdict.verdict, "explanations": verdict.explanations,
                     "message": verdict.message if rank == 0 else "", "failed_checks": verdict.failed_checks,
                     "embedding": plain[1][0], "head": plain[1][1]}
    return out


_ranks = {}


def ranks(dp):
    if dp not in _ranks:
        _ranks[dp] = launch(every_loop, dp * TP, timeout=240)
    return _ranks[dp]


@pytest.mark.parametrize("dp", [2, 3])
def test_the_hand_written_tensor_parallel_step_is_the_whole_model_s(dp):
    # The correct loop's replicated embedding gradient is the unsharded model's objective gradient: the
    # test's tensor parallelism is a faithful one, so what the gate says of it is about real TP code.
    for loop, smoothing in (("correct", 0.0), ("smoothing", SMOOTHING)):
        expected = reference_gradient([batch(d) for d in range(dp)], smoothing)
        for values in ranks(dp):
            assert torch.allclose(values[loop]["embedding"], expected, rtol=1e-5, atol=1e-7), loop


@pytest.mark.parametrize("dp", [2, 3])
@pytest.mark.parametrize("loop", LOOPS)
def test_the_probed_step_is_bitwise_the_unprobed_one(loop, dp):
    assert all(values[loop]["bitwise"] for values in ranks(dp))


@pytest.mark.parametrize("dp, loop, verdict, explanations", [
    (3, "correct", "pass", ()),
    (3, "count_with_tp", "fail", ("count_with_replicas",)),
    (3, "scaled_by_tp", "fail", ("objective×tp",)),
    (2, "correct", "pass", ()),
    # tp = W = 2: dividing by tp and by W weigh every token alike, and so do ×tp and ×W.
    (2, "count_with_tp", "fail", ("global_share", "count_with_replicas")),
    (2, "scaled_by_tp", "fail", ("objective×W", "objective×tp")),
    (2, "smoothing", "pass", ()),
    (3, "smoothing", "pass", ()),
])
def test_the_gate_names_the_count_in_the_mesh_s_terms(dp, loop, verdict, explanations):
    first = ranks(dp)[0][loop]
    assert (first["verdict"], first["explanations"]) == (verdict, explanations), first["message"]
    assert first["message"].split("\n")[0].endswith(f", mesh dp {dp} × tp 2 (replica))"), first["message"]
    if verdict == "fail":
        instead = f"on this mesh W = {dp} counts the ranks of dp, and N each token once, not once per tp replica"
        assert instead in first["message"], first["message"]
        tie = "a run with another size of dp (here 2) tells them apart"
        assert (tie in first["message"]) == (dp == 2), first["message"]


@pytest.mark.parametrize("dp", [2, 3])
def test_losses_that_differ_between_replicas_fail_the_step_and_name_the_first_token(dp):
    first = ranks(dp)[0]["smoothing_over_shard"]
    # Every token weighs what the objective gives it: the gate's weights hold, the replica check does not.
    assert first["verdict"] == "fail" and first["explanations"] == () and first["failed_checks"] == ("replica_losses",)
    assert first["message"].startswith("normcheck: the gate FAILED on"), first["message"]
    assert ("check replica_losses failed: rank 1 (dp 0, tp 1) computed" in first["message"]
            and "where its replica rank 0 (dp 0, tp 0) computed" in first["message"]), first["message"]
    for loop in ("correct", "smoothing"):
        assert "replica_losses" not in ranks(dp)[0][loop]["failed_checks"]
