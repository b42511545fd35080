"""Lightning's own DDP strategy on CPU (two processes, gloo, ``accumulate_grad_batches``), judged through
``normcheck.integrations.lightning.NormcheckCallback``.

A LightningModule that returns each batch's mean loss is the microbatch mean on uneven tokens (Lightning
divides it by G); one that returns the token sum scaled by G·W over the window's tokens passes, also on
an epoch's short last window; the mean loss on that short window, which Lightning still divides by the
nominal G (Lightning #19987), is named short_window.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import pytest

from scripts import run_ranks

EXPECTED: Dict[str, Tuple[str, Optional[str], int]] = {
    # variant: (verdict, a failure name it must give, batches in the judged window)
    "mean-G2": ("fail", "microbatch_mean", 2),
    "token_normalized-G2": ("pass", None, 2),
    "mean-G4": ("fail", "microbatch_mean", 4),
    "token_normalized-G4": ("pass", None, 4),
    "short_window-equal": ("fail", "short_window", 2),
    "short_window-uneven": ("fail", "short_window", 2),
    "short_window-token_normalized": ("pass", None, 2),
}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """Both processes' results of every variant (one launch by Lightning)."""
    return run_ranks("lightning_fit.py", str(tmp_path_factory.mktemp("lightning")), 2, timeout=400)


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_lightning_fit_verdict(ranks: List[Dict[str, Any]], variant: str) -> None:
    results = [rank[variant] for rank in ranks]
    for result in results:
        assert "error" not in result, result["error"]
    first = results[0]
    assert [r["rank"] for r in results] == [0, 1] and first["world_size"] == 2
    assert first["strategy"] == "DDPStrategy"
    assert [r["verdict"] for r in results] == [first["verdict"]] * 2
    verdict, name, window = EXPECTED[variant]
    assert first["window"] == window
    assert first["dropped"] >= 1, "p was in the optimizer configure_optimizers built, and left it"
    assert first["verdict"] == verdict, first["message"]
    if name is not None:
        assert name in first["diagnosis"], first["message"]


def test_a_fit_is_judged_every_k_steps(ranks: List[Dict[str, Any]]) -> None:
    for result in (rank["every-2"] for rank in ranks):
        assert "error" not in result, result["error"]
        assert result["steps"] == [0, 2] and result["verdicts"] == ["pass", "pass"], result["message"]
