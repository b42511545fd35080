"""normcheck.launch: results come back, failures and hangs end the launch within its time limit."""

import os
import socket
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from normcheck import launch as launching  # noqa: E402
from normcheck.check import NormcheckFailure, Verdict  # noqa: E402
from normcheck.launch import LaunchError, launch  # noqa: E402


def rank_and_sum(rank, world_size, probe, offset):
    value = torch.tensor(float(rank))
    dist.all_reduce(value)
    return {"rank": rank, "world_size": world_size, "sum": value.item() + offset, "pid": os.getpid(),
            "factory": (probe.rank, probe.world_size)}


def test_every_rank_runs_the_step_in_one_group(tmp_path):
    results = launch(rank_and_sum, 3, args=(10,), timeout=60, directory=str(tmp_path))
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert {r["sum"] for r in results} == {13.0} and len({r["pid"] for r in results}) == 3
    assert [r["factory"] for r in results] == [(0, 3), (1, 3), (2, 3)]


def skips_its_collective(rank, world_size, probe):
    side = dist.new_group()
    if rank == 1:
        print("rank 1 holds no token and skips its step", flush=True)
        dist.barrier(group=side)  # waits at the end of the step for rank 0, which waits for it
        return "unreachable"
    dist.all_reduce(torch.ones(1))  # waits for rank 1 forever
    return "unreachable"


def test_a_hung_rank_fails_the_launch_at_its_time_limit(tmp_path):
    limit = 4.0
    started = time.monotonic()
    with pytest.raises(LaunchError, match="time limit of 4 s: killed rank") as raised:
        launch(skips_its_collective, 2, timeout=limit, directory=str(tmp_path))
    assert time.monotonic() - started >= limit  # it waited for the limit, then ended the hang
    message = str(raised.value)
    assert "rank(s) 0" in message
    assert raised.value.timed_out and 0 in raised.value.killed and len(raised.value.pids) == 2
    # Each hung rank's stack, dumped just before the kill, shows where it waited: rank 0 in its all_reduce,
    # rank 1 in its barrier, both inside this file's step function.
    for rank in raised.value.killed:
        dumped = message.split(f"rank {rank} was here when it was killed:\n", 1)
        assert len(dumped) == 2, message
        assert "in skips_its_collective" in dumped[1].split("was here when it was killed", 1)[0], message
    assert "in all_reduce" in message and "in barrier" in message, message


def raises_on_rank_one(rank, world_size, probe):
    if rank == 1:
        raise ValueError("a bug on rank 1")
    dist.barrier()  # rank 0 would wait here for ever
    return "unreachable"


def test_an_exception_on_one_rank_ends_the_launch_early_with_its_traceback(tmp_path):
    with pytest.raises(LaunchError) as raised:
        launch(raises_on_rank_one, 2, timeout=60, directory=str(tmp_path))
    assert not raised.value.timed_out  # the other rank is killed when rank 1 fails, not at the time limit
    message = str(raised.value)
    assert "ValueError: a bug on rank 1" in message
    # Rank 0 is killed in its barrier, or has already failed there when rank 1's connection closed.
    assert "killed rank(s) 0" in message or "rank 0:\n" in message


def fails_the_gate(rank, world_size, probe):
    verdict = Verdict(file="f.json", status="fail", verdict="fail", diagnosis=("local_mean",), message="diagnosis")
    raise NormcheckFailure("normcheck: the gate FAILED on f.json", [verdict])


def test_a_failed_gate_comes_back_as_the_assertion_with_its_diagnosis(tmp_path):
    with pytest.raises(NormcheckFailure, match="the gate FAILED") as raised:
        launch(fails_the_gate, 2, timeout=60, directory=str(tmp_path))
    assert raised.value.explanations == ("local_mean",)


def how_the_group_met(rank, world_size, probe):
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):  # a PrefixStore around the store the ranks met in
        store = store.underlying_store
    return {"store": type(store).__name__, "master_port": os.environ.get("MASTER_PORT")}


def test_the_ranks_meet_in_a_file_store_without_choosing_a_port(monkeypatch, tmp_path):
    def no_port():
        raise AssertionError("the launcher chose a TCP port")

    monkeypatch.setattr(launching, "free_port", no_port)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 29500))  # torch's default master port, taken: nothing may need it
    try:
        attempts = []  # one list of process ids per attempt: a group that did not form is tried again
        results = launch(how_the_group_met, 2, timeout=60, directory=str(tmp_path), started=attempts.append)
    finally:
        taken.close()
    assert [r["store"] for r in results] == ["FileStore", "FileStore"]
    assert [r["master_port"] for r in results] == [None, None]
    assert 1 <= len(attempts) <= 3
    assert all(len(pids) == 2 and all(isinstance(p, int) for p in pids) for pids in attempts)


def test_a_group_that_does_not_form_is_tried_again_in_a_fresh_store(monkeypatch, tmp_path):
    joining = dist.init_process_group
    refused = tmp_path / "refused"

    def refused_once(*args, **kwargs):  # rank 1's first connection is closed, as by a peer under load
        if kwargs.get("rank") == 1 and not refused.exists():
            refused.touch()
            raise RuntimeError("Connection closed by peer")
        joining(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", refused_once)
    attempts = []
    results = launch(rank_and_sum, 2, args=(0,), timeout=60, directory=str(tmp_path), started=attempts.append)
    assert len(attempts) == 2 and attempts[0] != attempts[1]
    assert [r["sum"] for r in results] == [1.0, 1.0]
    refused.unlink()
    with pytest.raises(LaunchError, match="Connection closed by peer"):  # and no more often than asked
        launch(rank_and_sum, 2, args=(0,), timeout=60, directory=str(tmp_path), attempts=1)


def one_rank_moves_p(rank, world_size, probe):
    from torch.nn.parallel import DistributedDataParallel

    from normcheck.torch import ProbeError

    model = torch.nn.Linear(2, 3)
    p = probe(model)
    ddp = DistributedDataParallel(model)
    with p.step():
        loss = torch.nn.functional.cross_entropy(ddp(torch.ones(2, 2)), torch.tensor([0, 1]), reduction="sum")
        loss.backward()
    if rank == 1:
        with torch.no_grad():
            p.parameter.add_(1.0)  # as an optimizer holding p would
    try:
        p.check(ddp)
    except ProbeError as e:
        return str(e)
    return "passed"


def test_misuse_on_one_rank_is_reported_on_every_rank_without_a_hang(tmp_path):
    messages = launch(one_rank_moves_p, 2, timeout=60, directory=str(tmp_path))  # a hang would raise LaunchError
    assert messages[0] == messages[1] and messages[0].startswith("p is not 0: an optimizer or an update moved it")
