"""A probed step under torchrun with two processes: env:// initialisation, no launcher of ours."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from normcheck.launch import free_port  # noqa: E402


def test_a_step_under_torchrun_is_judged(tmp_path, executable):
    import normcheck

    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.dirname(os.path.dirname(os.path.abspath(normcheck.__file__)))
    environment = dict(os.environ, NORMCHECK=executable, NORMCHECK_PROBE_DIR=str(tmp_path / "dumps"),
                       PYTHONPATH=os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")])),
                       GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME", "lo"), OMP_NUM_THREADS="1")
    out = tmp_path / "results.json"
    for attempt in range(3):
        # --redirects/--tee 2: torch 1.13 under Python 3.11 cannot parse its own default "0" (IntFlag
        # iteration no longer yields the zero member) and fails with "'NoneType' object has no attribute 'get'".
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                   "--redirects", "2", "--tee", "2", "--log_dir", str(tmp_path / "logs"),
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                   os.path.join(here, "torchrun_step.py"), str(out)]
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=180)
        if done.returncode == 0 or "address already in use" not in (done.stdout + done.stderr).lower():
            break
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    assert results["world_size"] == 2
    assert results["global_count"]["verdict"] == "pass", results
    assert results["local_mean"]["verdict"] == "fail", results
    assert "local_mean" in results["local_mean"]["diagnosis"], results
    assert len(os.listdir(tmp_path / "dumps")) == 2  # rank 0 wrote every dump where $NORMCHECK_PROBE_DIR says
