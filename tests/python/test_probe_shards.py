"""Reading a sharded p: where a rank's shard of a DTensor lies (test_probe_document.py puts shards together).

FSDP2 itself runs in tests/frameworks (test_fsdp.py, torch 2.13); here the arithmetic is pinned on
stand-ins with a DTensor's attributes, on both torches, including the shapes two ranks do not reach:
uneven chunks, an empty last shard, HSDP's replicated mesh dimension, placements the probe refuses.
Each rule has a planted wrong reading that the same checks catch.
"""

import pytest

torch = pytest.importorskip("torch")

from normcheck import _probe_capture as capture  # noqa: E402
from normcheck.torch import Probe  # noqa: E402


class Placement:
    def __init__(self, kind, dim=0):
        self.kind, self.dim = kind, dim

    def is_replicate(self):
        return self.kind == "Replicate"

    def __repr__(self):
        return f"{self.kind}({self.dim})"


class Shard(Placement):
    def __init__(self, dim=0):
        super().__init__("Shard", dim)


class Replicate(Placement):
    def __init__(self):
        super().__init__("Replicate")


class Partial(Placement):
    def __init__(self):
        super().__init__("Partial")


class Mesh:
    def __init__(self, sizes, coordinate):
        self.sizes, self.coordinate = sizes, coordinate

    def get_coordinate(self):
        return self.coordinate

    def size(self, dim):
        return self.sizes[dim]


class FakeDTensor:
    """A 1-D tensor of ``length`` components sharded as DTensor shards it (torch.chunk, mesh dimension by dimension)."""

    def __init__(self, full, sizes, coordinate, placements, local=None):
        self.shape = full.shape
        self.device_mesh = Mesh(sizes, coordinate)
        self.placements = tuple(placements)
        if local is None:
            local = full
            for dim, placement in enumerate(placements):
                if isinstance(placement, Shard):
                    pieces = list(torch.chunk(local, sizes[dim]))
                    index = coordinate[dim]
                    local = pieces[index] if index < len(pieces) else local[:0]
        self._local = local

    def to_local(self):
        return self._local


def every_shard(length, sizes, placements):
    """(offset, values) of every coordinate's shard of arange(length)."""
    full = torch.arange(length, dtype=torch.float32)
    spans = []
    for a in range(sizes[0]):
        for b in range(sizes[1] if len(sizes) > 1 else 1):
            coordinate = [a, b][: len(sizes)]
            offset, values = capture.shard_span(FakeDTensor(full, sizes, coordinate, placements))
            spans.append((coordinate, offset, values))
    return full, spans


@pytest.mark.parametrize("length,parts", [(12, 2), (12, 3), (10, 4), (5, 4), (7, 3), (1, 2)])
def test_one_mesh_dimension_shards_are_where_torch_chunk_puts_them(length, parts):
    full, spans = every_shard(length, [parts], [Shard()])
    covered = []
    for _, offset, values in spans:
        assert values.dtype == torch.float64
        assert torch.equal(values, full[offset:offset + values.numel()].double())
        covered += range(offset, offset + values.numel())
    assert covered == list(range(length))  # every component once, in rank order


def test_hsdp_replicas_hold_the_same_span():
    # Mesh (replicate 2, shard 3): coordinates (0, b) and (1, b) hold the same third.
    full, spans = every_shard(12, [2, 3], [Replicate(), Shard()])
    by_shard = {}
    for (a, b), offset, values in spans:
        by_shard.setdefault(b, []).append((offset, values.tolist()))
    for b, copies in by_shard.items():
        assert copies[0] == copies[1] == (4 * b, full[4 * b:4 * b + 4].double().tolist())


def test_a_shard_of_the_wrong_length_is_refused():
    # A planted misreading: the local tensor is not what the placements give (a padded shard, say).
    full = torch.arange(10, dtype=torch.float32)
    wrong = FakeDTensor(full, [4], [3], [Shard()], local=torch.zeros(3))
    with pytest.raises(ValueError, match="has 3 components where its placements"):
        capture.shard_span(wrong)


@pytest.mark.parametrize("placement", [Partial(), Shard(1), Placement("_StridedShard")])
def test_placements_other_than_shards_of_dimension_0_and_replicas_are_refused(placement):
    full = torch.arange(8, dtype=torch.float32)
    with pytest.raises(ValueError, match="the probe reads shards of dimension 0 and replicas only"):
        capture.shard_span(FakeDTensor(full, [2], [0], [placement], local=full))


def test_a_rank_outside_the_mesh_is_refused():
    full = torch.arange(8, dtype=torch.float32)
    with pytest.raises(ValueError, match="not in the mesh"):
        capture.shard_span(FakeDTensor(full, [2], None, [Shard()], local=full))


def test_plain_tensors_are_not_distributed():
    assert not capture.is_distributed_tensor(torch.zeros(3))
    assert capture.is_distributed_tensor(FakeDTensor(torch.zeros(4), [2], [0], [Shard()]))


# -- the forward's copy of p ---------------------------------------------------------------------------

def test_without_fsdp_the_forward_copies_nothing():
    # The probe follows p only where something replaced it in the module: a plain model's losses use p.
    model = torch.nn.Linear(3, 1)
    probe = Probe(model, slots=2, sites=None, world_size=1, rank=0)
    with probe.step():
        out = model(torch.ones(2, 3))
        torch.nn.functional.cross_entropy(torch.cat([out, -out], 1), torch.tensor([0, 1])).backward()
    assert probe._holders[0].live is None
    assert probe.gradients()[""].abs().sum() > 0
