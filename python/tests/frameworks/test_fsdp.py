"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on gloo, W = 2: a correct and a wrong loop judged.

``fully_shard`` turns every parameter of a sharded module into a DTensor shard, the probe's included:
each rank holds half of p, and the reduce-scatter after the window's last backward (with
``set_requires_gradient_sync(False)`` on the others) leaves each rank half of p.grad, averaged over
the ranks. The probe is gathered from its shards before it is judged. FSDP2 wants one dtype per
parameter group, so the probe takes the model's (float32) instead of a bucket dtype of its own.
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from tiny import LENGTHS, Rows, TinyLM, collate, shifted, valid_count

EXPECTED = {"token_count": ("pass", None), "mean": ("fail", "microbatch_mean")}
ACCUMULATION = (1, 2)


def fsdp_step(rank: int, world_size: int, probe: Any) -> Dict[str, Any]:
    """Each variant, each its own sharded model; the verdicts."""
    from torch.distributed.fsdp import fully_shard

    results: Dict[str, Any] = {}
    rows = Rows(LENGTHS)
    for g in ACCUMULATION:
        window = [collate([rows[2 * (world_size * m + rank) + k] for k in range(2)]) for m in range(g)]
        count = torch.tensor(sum(valid_count(b["labels"]) for b in window))
        dist.all_reduce(count)
        for kind in EXPECTED:
            key = f"{kind}-G{g}"
            try:
                model = TinyLM()
                p = probe(model, dtype=torch.float32)
                for child in (model.embed, model.hidden, model.head):
                    fully_shard(child)
                fully_shard(model)
                sharded = type(dict(model.named_parameters())[p.name]).__name__
                optimizer = torch.optim.AdamW(p.model_parameters(model), lr=1e-2)
                with p.step():
                    for m, batch in enumerate(window):
                        model.set_requires_gradient_sync(m == g - 1)
                        logits, labels = shifted(model(batch["input_ids"]), batch["labels"])
                        if kind == "token_count":
                            loss = F.cross_entropy(logits, labels, reduction="sum") * world_size / count
                        else:
                            loss = F.cross_entropy(logits, labels) / g
                        loss.backward()
                verdict = p.judge(model, optimizer=optimizer)
                torch.nn.utils.clip_grad_norm_(list(p.model_parameters(model)), 1.0)
                optimizer.step()
                results[key] = {"verdict": verdict.verdict, "diagnosis": list(verdict.diagnosis),
                                "message": verdict.message, "sharded": sharded}
            except Exception as e:  # reported per variant; both ranks raise alike
                results[key] = {"error": f"{type(e).__name__}: {e}"}
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """Both ranks' results of every variant (one launch)."""
    from normcheck.launch import launch

    folder = tmp_path_factory.mktemp("fsdp")
    return launch(fsdp_step, 2, timeout=300, directory=str(folder))


# The probe keeps its own reference to p and reads p.grad from it; fully_shard replaces p in the module
# by a DTensor shard, so the loss term reaches a tensor that no reduction combines and the probe says
# "nothing combined the ranks' gradients of p". Following p needs the probe to take p from the module
# in its forward hook (module.<name> is the unsharded parameter there; a copy p·1 keeps the autograd
# edge to it), and to read module.<name>.grad.full_tensor() after the backward. Strict: once the probe
# does, these pass and the marker must go.
NOT_FOLLOWED = pytest.mark.xfail(strict=True, raises=AssertionError,
                                 reason="the probe does not follow p into fully_shard's DTensor shards")


@NOT_FOLLOWED
@pytest.mark.parametrize("g", ACCUMULATION, ids=lambda g: f"G{g}")
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_fsdp2_loop_verdict(ranks: List[Dict[str, Any]], kind: str, g: int) -> None:
    results = [rank[f"{kind}-G{g}"] for rank in ranks]
    for result in results:
        assert "error" not in result, result["error"]
    first = results[0]
    assert first["sharded"] == "DTensor", "fully_shard made p a DTensor shard"
    assert [r["verdict"] for r in results] == [first["verdict"]] * 2
    verdict, name = EXPECTED[kind]
    if g == 1 and kind == "mean":
        verdict, name = "fail", "local_mean"  # one microbatch: the per-batch mean is the rank's mean
    assert first["verdict"] == verdict, first["message"]
    if name is not None:
        assert name in first["diagnosis"], first["message"]


def test_fsdp2_today_the_probe_says_nothing_combined_its_gradient(ranks: List[Dict[str, Any]]) -> None:
    # The limitation above, as the probe reports it: never a verdict on a gradient no reduction combined.
    for rank in ranks:
        for key, result in rank.items():
            assert "nothing combined the ranks' gradients of p" in result.get("error", ""), (key, result)
