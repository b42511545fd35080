"""What check_replicas reads from one rank and how two ranks' readings compare, without processes.

Each scenario builds the state of two ranks in this process, reads it as check_replicas does and
compares the readings as every rank does after the gather. A scenario whose ranks differ must be
found at its path; the same state built twice (new objects, equal contents) must agree.
"""

import decimal
import enum
import fractions
import functools
import numbers

import pytest

torch = pytest.importorskip("torch")
import numpy  # noqa: E402
from torch import nn  # noqa: E402

from normcheck import replicas  # noqa: E402

GROUP = "optimizer.param_groups[0]"


def read(model, optimizer=None, scheduler=None):
    """One rank's state as it is sent: (category, path, kind, token, description, bytes)."""
    return [(category, path, e.kind, e.token, e.description, e.nbytes)
            for category, path, e in replicas._state(model, optimizer, scheduler, True, True, False)]


def compare(build):
    """The comparison of two ranks, each built by build(rank) → (model, optimizer, scheduler).

    Both are alive at once, so that no object of one reuses the address of the other's."""
    built = [build(rank) for rank in (0, 1)]
    return replicas._compare([read(*state) for state in built])


def with_setting(value):
    """A model, and an optimizer whose first parameter group carries `value` as the setting `extra`."""
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.param_groups[0]["extra"] = value
    return model, optimizer, None


class Holder:
    """An object carrying its state in attributes."""

    def __init__(self, value):
        self.value = value


class Slotted:
    """An object carrying its state in slots."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def scale(x, factor):
    return x * factor


class Ratio:
    """A rational of another library: registered as numbers.Rational, written by numerator/denominator."""

    def __init__(self, numerator, denominator):
        self.numerator, self.denominator = numerator, denominator

    def __repr__(self):
        return "Ratio(…)"


numbers.Rational.register(Ratio)


# name → (the setting on each rank, the first differing path); each pair is equal today or compared by type.
SETTINGS = {
    "numpy float32": (lambda r: numpy.float32(0.1 * (r + 1)), GROUP + ".extra"),
    "numpy float64 against a float": (lambda r: [numpy.float64(0.5), 0.5][r], GROUP + ".extra"),
    "numpy int64": (lambda r: numpy.int64(r), GROUP + ".extra"),
    "numpy bool": (lambda r: numpy.bool_(r == 0), GROUP + ".extra"),
    "numpy float16 NaN payloads": (lambda r: numpy.frombuffer(bytes([1 + r, 0x7E]), dtype=numpy.float16)[0],
                                   GROUP + ".extra"),
    "numpy array values": (lambda r: numpy.array([1.0, 2.0 + r]), GROUP + ".extra"),
    "numpy array dtype": (lambda r: numpy.zeros(2, dtype=[numpy.float32, numpy.float64][r]), GROUP + ".extra"),
    "numpy array shape": (lambda r: numpy.zeros([(2, 1), (1, 2)][r]), GROUP + ".extra"),
    "numpy array byte order": (lambda r: numpy.zeros(2, dtype=["<f4", ">f4"][r]), GROUP + ".extra"),
    "numpy object array": (lambda r: numpy.array([fractions.Fraction(1, 3 + r)], dtype=object),
                           GROUP + ".extra[0]"),
    "Decimal": (lambda r: decimal.Decimal(["0.1", "0.2"][r]), GROUP + ".extra"),
    "Decimal exponent": (lambda r: decimal.Decimal(["1.0", "1.00"][r]), GROUP + ".extra"),
    "Fraction": (lambda r: fractions.Fraction(1, 3 + r), GROUP + ".extra"),
    "another library's rational": (lambda r: Ratio(1, 3 + r), GROUP + ".extra"),
    "bytes": (lambda r: b"ab"[r:r + 1], GROUP + ".extra"),
    "bytearray": (lambda r: bytearray(b"ab"[r:r + 1]), GROUP + ".extra"),
    "set": (lambda r: {1, 2 + r}, GROUP + ".extra"),
    "frozenset of tuples": (lambda r: frozenset({(1, 2), (3, 4 + r)}), GROUP + ".extra"),
    "a tensor inside an object": (lambda r: Holder(torch.tensor([1.0 + r])), GROUP + ".extra.value"),
    "a Fraction inside an object's slots": (lambda r: Slotted(fractions.Fraction(1, 3 + r)), GROUP + ".extra.value"),
    "a partial's arguments": (lambda r: functools.partial(scale, factor=2 + r), GROUP + ".extra.__state__[2].factor"),
    "an enum member": (lambda r: [Color.RED, Color.BLUE][r], GROUP + ".extra"),
    "a list against a tuple": (lambda r: [[0.1, 0.2], (0.1, 0.2)][r], GROUP + ".extra"),
    "a dict against a list": (lambda r: [{0: torch.ones(1)}, [torch.ones(1)]][r], GROUP + ".extra"),
}


@pytest.mark.parametrize("name", SETTINGS)
def test_a_setting_that_differs_is_found_at_its_path(name):
    make, path = SETTINGS[name]
    comparison = compare(lambda rank: with_setting(make(rank)))
    assert comparison.differing and comparison.differing[0] == path, comparison.differing


@pytest.mark.parametrize("name", SETTINGS)
def test_a_setting_built_twice_alike_agrees(name):
    make, _ = SETTINGS[name]
    comparison = compare(lambda rank: with_setting(make(0)))
    assert comparison.differing == []
    assert any(p.startswith(GROUP + ".extra") for p in comparison.paths)


def test_dict_keys_and_list_indices_are_different_paths():
    paths = {str(rank): [p for p, _ in replicas._walk("x", value)]
             for rank, value in enumerate([{0: torch.ones(1)}, [torch.ones(1)]])}
    assert paths == {"0": ["x", "x{0}"], "1": ["x", "x[0]"]}


def test_numbers_are_written_exactly_and_with_their_type():
    texts = [replicas._exact_text(v) for v in (1, True, 1.0, numpy.int64(1), numpy.float64(1.0),
                                              decimal.Decimal("1"), fractions.Fraction(1), 1 + 0j)]
    assert len(set(texts)) == len(texts), texts
    assert replicas._exact_text(numpy.float32(0.1)) == f"numpy.float32({float(numpy.float32(0.1)).hex()})"
    assert replicas._exact_text(fractions.Fraction(-2, 6)) == "Fraction(-1, 3)"
    assert replicas._exact_text(2 ** 20000) == hex(2 ** 20000)


def test_a_value_holding_itself_is_read_once_and_agrees():
    def looped(rank):
        value = {"lr": 0.5}
        value["again"] = value
        return with_setting(value)

    comparison = compare(looped)
    assert comparison.differing == []
    assert comparison.tables[0][GROUP + ".extra.again"][2] == f"<the value at {GROUP}.extra>"


def test_a_value_nested_too_deep_is_listed_not_compared():
    def nested(rank):
        value = Holder(rank)
        for _ in range(40):
            value = Holder(value)
        return with_setting(value)

    comparison = compare(nested)
    assert comparison.differing == []
    summary = replicas._summary(replicas._state(*nested(0), True, True, False), [0, 1], {})
    assert len(summary.uncompared) == 1
    assert next(iter(summary.uncompared.values())).endswith("Holder>: nested more than 32 deep")


def outside(value=0.0, grad=0.0, moment=0.0):
    """A model and a temperature the optimizer trains outside it (add_param_group), after one step; rank
    1's temperature, its gradient and its first moment are off by the amounts given."""
    def build(rank):
        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        temperature = nn.Parameter(torch.tensor(1.0))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        optimizer.add_param_group({"params": [temperature], "lr": 0.01})
        model(torch.ones(1, 2)).sum().mul(temperature).backward()
        optimizer.step()
        if rank == 1:
            with torch.no_grad():
                temperature.add_(value)
                temperature.grad.add_(grad)
                optimizer.state[temperature]["exp_avg"].add_(moment)
        return model, optimizer, None
    return build


def test_a_parameter_outside_the_model_is_compared_by_its_place_in_the_groups():
    assert compare(outside(value=1.0)).differing[0] == "optimizer.param_groups[1].params[0]"


def test_the_gradient_of_a_parameter_outside_the_model_is_compared():
    assert compare(outside(grad=1.0)).differing[0] == "grad optimizer.param_groups[1].params[0]"


def test_the_optimizer_state_of_a_parameter_outside_the_model_is_named_by_its_place():
    assert compare(outside(moment=1.0)).differing[0] == "optimizer.state[optimizer.param_groups[1].params[0]].exp_avg"


def test_a_parameter_outside_the_model_agrees_when_alike_and_is_counted():
    comparison = compare(outside())
    assert comparison.differing == []
    summary = replicas._summary(replicas._state(*outside()(0), True, True, False), [0, 1], {})
    assert summary.categories["parameters"].tensors == 3 and summary.categories["gradients"].tensors == 3
    assert summary.categories["optimizer_state"].tensors == 3 * 3


def meta_buffer(ranks_on_meta):
    def build(rank):
        torch.manual_seed(0)
        model = nn.Linear(2, 1)
        model.register_buffer("extra", torch.zeros(3, device="meta" if rank in ranks_on_meta else "cpu"))
        return model, None, None
    return build


def test_a_meta_buffer_on_one_rank_is_a_difference():
    assert compare(meta_buffer({1})).differing == ["buffer extra"]


def test_what_cannot_be_compared_is_listed_in_the_summary():
    def build(rank):
        model, optimizer, _ = with_setting(lambda step: 0.5 ** step)
        model.register_buffer("extra", torch.zeros(3, device="meta"))
        return model, optimizer, None

    assert compare(build).differing == []
    summary = replicas._summary(replicas._state(*build(0), True, True, False), [0, 1], {})
    assert set(summary.uncompared) == {GROUP + ".extra", "buffer extra"}
    assert "meta" in summary.uncompared["buffer extra"]
    assert f"2 states held alike but not compared: {GROUP}.extra" in str(summary)


def test_a_named_function_is_compared_by_its_name_and_a_lambda_is_listed():
    named = compare(lambda rank: with_setting([scale, max][rank]))
    assert named.differing[0] == GROUP + ".extra"
    lambdas = compare(lambda rank: with_setting([lambda: 0, lambda: 1][rank]))
    assert lambdas.differing == [] and lambdas.tables[0][GROUP + ".extra"][1] == "uncompared"


def test_a_scheduler_without_state_dict_cannot_be_read():
    model, optimizer, _ = with_setting(0)
    with pytest.raises(TypeError, match="the scheduler object has no state_dict"):
        replicas._state(model, optimizer, object(), True, True, False)


def test_a_read_error_names_each_rank_and_survives_pickling():
    import pickle

    error = replicas.ReplicaReadError({1: "TypeError: the scheduler object has no state_dict()"}, [0, 1, 2])
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.failures == error.failures
    assert str(error).splitlines() == ["check_replicas could not read the state of rank 1 (ranks 0, 2 read theirs)",
                                       "  rank 1: TypeError: the scheduler object has no state_dict()"]
