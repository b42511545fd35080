"""The normcheck_gate fixture as a user meets it: a test that fails shows normcheck's diagnosis.

Runs pytest in a subprocess on small test files (pytester), with the plugin loaded as a checkout
user loads it (``-p normcheck.pytest_plugin``; an installed package registers it by entry point, see
test_install.py).
"""

import os
import textwrap

import pytest

pytest.importorskip("torch")

STEP = textwrap.dedent('''
    import os
    import torch, torch.distributed as dist, torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    def step(rank, world_size, probe, divide_by_own_count):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 4)
        p = probe(model)
        ddp = DDP(model)
        labels = torch.tensor([1, 2, 3, -100]) if rank == 0 else torch.tensor([0, -100, -100, -100])
        count = (labels != -100).sum().float()
        total = count.clone()
        dist.all_reduce(total)
        with p.step():
            loss = F.cross_entropy(ddp(torch.ones(4, 3)), labels, reduction="sum")
            (loss / count if divide_by_own_count else loss * world_size / total).backward()
        p.check(ddp)
        return rank
''')


def write_tests(pytester, body):
    pytester.makepyfile(test_gate=STEP + textwrap.dedent(body))


def run(pytester, *arguments):
    import normcheck

    package = os.path.dirname(os.path.dirname(os.path.abspath(normcheck.__file__)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")])))
        return pytester.runpytest_subprocess("-p", "normcheck.pytest_plugin", "-p", "no:cacheprovider",
                                             *arguments, timeout=240)


def test_a_correct_step_passes_and_a_wrong_one_fails_with_the_diagnosis(pytester, executable):
    write_tests(pytester, '''
        def test_correct(normcheck_gate):
            assert normcheck_gate(step, 2, args=(False,)) == [0, 1]

        def test_divided_by_its_own_count(normcheck_gate):
            normcheck_gate(step, 2, args=(True,))

        def test_without_an_executable(normcheck_gate):
            normcheck_gate.executable = "/no/such/normcheck"
            normcheck_gate(step, 2, args=(False,))
    ''')
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*/no/such/normcheck, does not exist or is not executable*"])
    result.stdout.fnmatch_lines(["*NormcheckFailure: normcheck: the gate FAILED on *",
                                 "*local_mean = *", "*what was computed: each rank backpropagated its local mean*",
                                 "*why it is wrong:*", "*instead: backpropagate W·Sᵣ/N*"])


def test_the_options_reach_the_fixture(pytester, executable):
    write_tests(pytester, '''
        def test_options(normcheck_gate):
            assert normcheck_gate.timeout == 7.5
            assert normcheck_gate.executable == "/no/such/normcheck"
            assert os.path.isdir(normcheck_gate.directory)
    ''')
    result = run(pytester, "--normcheck", "/no/such/normcheck", "--normcheck-timeout", "7.5")
    result.assert_outcomes(passed=1)


def test_a_failure_names_its_dump_and_picture_in_the_junit_report(pytester, executable):
    import xml.etree.ElementTree as ET

    write_tests(pytester, '''
        def test_divided_by_its_own_count(normcheck_gate):
            normcheck_gate(step, 2, args=(True,))
    ''')
    junit = pytester.path / "junit.xml"
    result = run(pytester, f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    case = ET.parse(junit).getroot().find(".//testcase")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    picture, dump = properties["normcheck_picture"], properties["normcheck_dump"]
    assert picture.endswith(".svg") and os.path.isfile(picture) and picture[:-4] == dump[:-5]
    assert ET.parse(picture).getroot().tag == "{http://www.w3.org/2000/svg}svg"
    assert f"picture of the weight table: {picture}" in case.find("failure").get("message") + \
        case.find("failure").text
