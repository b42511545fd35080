"""Lightning ``Trainer(strategy="ddp", accelerator="cpu", devices=2, accumulate_grad_batches=G)`` fits, judged by
``normcheck.integrations.lightning.NormcheckCallback``: ``python lightning_fit.py OUT``.

Lightning's DDP strategy starts the second process itself, by running this script again with
LOCAL_RANK set; both processes then run every variant in the same process group, one Trainer each.
Each rank writes OUT/rank-R.json and leaves through ``os._exit``.

The data are batches made in advance (each item of the dataset is one padded batch of two rows), dealt
to the ranks by a DistributedSampler in order (item i to rank i mod 2). Each batch carries the valid
tokens of its whole accumulation window over both ranks (``window_tokens``), as a pipeline that counts
ahead would give it, so the token-normalized module needs no communication of its own.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import lightning.pytorch as pl  # noqa: E402

from normcheck.integrations.lightning import NormcheckCallback  # noqa: E402
from normcheck.launch import exit_process  # noqa: E402
from tiny import IGNORE, TinyLM, collate, row, shifted, valid_count  # noqa: E402

WORLD_SIZE = 2

# Per variant: the row lengths of each batch in dataset order (two rows a batch), G, the judged step,
# and what the module returns. The "short" data hold five batches a rank, so with G = 3 the epoch's
# second window holds two batches, and Lightning still divides them by 3 (Lightning #19987): a factor
# 2/3 that no world size explains.
UNEVEN = [(7, 3), (5, 6), (2, 9), (4, 8), (6, 2), (3, 7), (8, 5), (9, 4)]
SHORT_EQUAL = UNEVEN[:6] + [(5, 5), (4, 6), (6, 4), (3, 7)]    # the short window: 8 labels a batch
SHORT_UNEVEN = UNEVEN[:6] + [(8, 5), (9, 2), (5, 2), (3, 8)]   # the short window: 11, 9 and 5, 9
VARIANTS: Dict[str, Tuple[Sequence[Tuple[int, int]], int, int, str]] = {
    "mean-G2": (UNEVEN[:4], 2, 0, "mean"),
    "token_normalized-G2": (UNEVEN[:4], 2, 0, "token_normalized"),
    "mean-G4": (UNEVEN, 4, 0, "mean"),
    "token_normalized-G4": (UNEVEN, 4, 0, "token_normalized"),
    "short_window-equal": (SHORT_EQUAL, 3, 1, "mean"),
    "short_window-uneven": (SHORT_UNEVEN, 3, 1, "mean"),
    "short_window-token_normalized": (SHORT_UNEVEN, 3, 1, "token_normalized"),
    # Four steps of one batch a rank, judged every other step (every=2): steps 0 and 2.
    "every-2": (UNEVEN, 1, 0, "token_normalized"),
}


class Batches(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item i: one padded batch, with the valid tokens of its accumulation window over every rank."""

    def __init__(self, lengths: Sequence[Tuple[int, int]], g: int, world_size: int) -> None:
        self.batches = []
        for i, pair in enumerate(lengths):
            ids = [row(10 * i + k, n) for k, n in enumerate(pair)]
            self.batches.append(collate([{"input_ids": x, "labels": x.clone()} for x in ids]))
        window = [(i // world_size) // g for i in range(len(lengths))]
        totals: Dict[int, int] = {}
        for i, batch in enumerate(self.batches):
            totals[window[i]] = totals.get(window[i], 0) + valid_count(batch["labels"])
        for i, batch in enumerate(self.batches):
            batch["window_tokens"] = torch.tensor(totals[window[i]])

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        return self.batches[index]


class CausalLM(pl.LightningModule):
    """The tiny LM; ``training_step`` returns the batch's mean loss, or its token-normalized sum."""

    def __init__(self, normalization: str) -> None:
        super().__init__()
        self.lm = TinyLM()
        self.normalization = normalization

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids)

    def training_step(self, batch: Dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits, labels = shifted(self(batch["input_ids"]), batch["labels"])
        if self.normalization == "mean":
            return F.cross_entropy(logits, labels, ignore_index=IGNORE)
        total = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")
        # Lightning divides what training_step returns by accumulate_grad_batches, DDP by the world size.
        return total * self.trainer.accumulate_grad_batches * self.trainer.world_size / batch["window_tokens"]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def fit(name: str, folder: str) -> Dict[str, Any]:
    """One variant: a fresh module, Trainer and callback; the judged step's verdict."""
    lengths, g, step, normalization = VARIANTS[name]
    every = 2 if name.startswith("every") else None
    callback = NormcheckCallback(step=step, every=every, raise_on_failure=False, probe_options={"directory": folder})
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=WORLD_SIZE, accumulate_grad_batches=g,
                         max_epochs=1, gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         use_distributed_sampler=False, callbacks=[callback])
    # Item i goes to rank i mod W, in order: the windows Batches counted are the ones each rank accumulates.
    # (Lightning's own distributed sampler would shuffle these batch_size=None items.)
    batches = Batches(lengths, g, WORLD_SIZE)
    rank = int(os.environ.get("LOCAL_RANK", "0"))  # set for rank 1 by Lightning's launcher; rank 0's is 0
    sampler = torch.utils.data.DistributedSampler(batches, num_replicas=WORLD_SIZE, rank=rank, shuffle=False)
    data = torch.utils.data.DataLoader(batches, batch_size=None, sampler=sampler)
    trainer.fit(CausalLM(normalization), train_dataloaders=data)
    verdict = callback.verdict
    assert verdict is not None
    return {"verdict": verdict.verdict, "passed": verdict.passed, "diagnosis": list(verdict.diagnosis),
            "could_hide": list(verdict.could_hide), "message": verdict.message, "window": callback.window,
            "dropped": callback.dropped_from_optimizer, "rank": trainer.global_rank,
            "world_size": trainer.world_size, "strategy": type(trainer.strategy).__name__,
            "steps": [judged for judged, _ in callback.steps.verdicts],
            "verdicts": [v.verdict for v in callback.verdicts]}


def main(argv: List[str]) -> None:
    """Every variant in this process; its results; os._exit."""
    out = argv[1]
    results: Dict[str, Any] = {}
    rank = None
    for name in VARIANTS:
        try:
            results[name] = fit(name, os.path.join(out, "dumps"))
            rank = results[name]["rank"]
        except Exception as e:  # reported per variant; both ranks raise alike
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    if rank is None:
        rank = int(os.environ.get("LOCAL_RANK", "0"))
    path = os.path.join(out, f"rank-{rank}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(results, f)
    os.replace(path + ".tmp", path)
    exit_process(0)


if __name__ == "__main__":
    main(sys.argv)
