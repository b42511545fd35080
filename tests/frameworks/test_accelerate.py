"""An accelerate loop (``Accelerator(gradient_accumulation_steps=G)``, ``accelerator.accumulate``) on two CPU
processes, started by ``accelerate launch`` and by ``accelerate.debug_launcher``, judged by the probe.

The documented token-count pattern (the window's valid tokens counted on each process and gathered, the
summed loss scaled by G·W/N to undo ``accelerator.backward``'s ÷G and DDP's ÷W) passes; the per-batch
mean loss, which ``accelerator.backward`` divides by G, is the microbatch mean.
"""

from __future__ import annotations

import socket
from typing import Any, Dict, List

import pytest

from scripts import run_ranks

EXPECTED = {"token_count": ("pass", None), "mean": ("fail", "microbatch_mean")}


def require_localhost() -> None:
    """``accelerate launch`` looks up the name "localhost" before it starts anything
    (``accelerate.utils.other.is_port_in_use``); where it does not resolve, say so instead of failing later
    with a bare ``socket.gaierror``."""
    try:
        socket.getaddrinfo("localhost", None)
    except socket.gaierror as e:
        raise AssertionError("accelerate launch looks up 'localhost', which this machine does not resolve "
                             f"({e}); add '127.0.0.1 localhost' to /etc/hosts (.ci/setup --tests does)") from None


@pytest.fixture(scope="module", params=["accelerate_launch", "debug_launcher"])
def ranks(request: Any, tmp_path_factory: Any) -> List[Dict[str, Any]]:
    """Both processes' results of every variant (one launch per launcher)."""
    launcher = request.param
    if launcher == "accelerate_launch":
        require_localhost()
    return run_ranks("accelerate_loop.py", str(tmp_path_factory.mktemp(launcher)), 2, timeout=400,
                     arguments=[launcher])


@pytest.mark.parametrize("g", [2, 4], ids=lambda g: f"G{g}")
@pytest.mark.parametrize("kind", list(EXPECTED))
def test_accelerate_loop_verdict(ranks: List[Dict[str, Any]], kind: str, g: int) -> None:
    results = [rank[f"{kind}-G{g}"] for rank in ranks]
    for result in results:
        assert "error" not in result, result["error"]
    first = results[0]
    assert first["distributed_type"] == "DistributedType.MULTI_CPU" and first["num_processes"] == 2
    assert first["backend"] == "gloo"
    assert [r["verdict"] for r in results] == [first["verdict"]] * 2
    verdict, name = EXPECTED[kind]
    assert first["verdict"] == verdict, first["message"]
    if name is not None:
        assert name in first["diagnosis"], first["message"]
