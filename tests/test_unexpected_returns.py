"""The judge never crashes on what a student's function returns (issue 21, point 4): a value of an
unexpected type, shape, dtype or size is a failure of the submission, said in a sentence, never an
"internal grader error". Each example grades a variant of the reference solution whose function
returns (or leaves in its tensor) such a value: a real multi-process run, so the examples are few.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from variants import materialize

from grader.judge.runner import CheckResult

FEW = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Python expressions of values no correct function returns; `torch` is imported in every solution used.
ODD_VALUES = [
    "None",
    "'a string'",
    "[[0, [1, 2]], 3]",
    "{'rank': 0}",
    "float('nan')",
    "10**30",
    "[None, None]",
    "functools.reduce(lambda inner, _: [inner], range(200), [])",
    "[torch.zeros(2, 3, dtype=torch.float16)]",
    "[[float('nan')] * 4]",
    "[[10**30, -1]]",
    "[{'rank': 'zero', 'pid': [], 'token': None, 'world_size': 'two'}, 7]",
    "[{'rank': 10**30, 'pid': 1, 'token': 'token-42', 'world_size': 2}] * 2",
    "[{'rank': 'zero', 'pid': 1, 'token': 'token-42', 'world_size': 2},"
    " {'rank': 0, 'pid': [], 'token': 't', 'world_size': 2}]",
]
ODD_TENSORS = [
    "torch.zeros(1003)",
    "torch.zeros(3)",
    "torch.zeros(1003, dtype=torch.int64)",
    "torch.full((1003,), float('nan'))",
    "torch.zeros(1003, dtype=torch.float64) + 1e300",
    "torch.zeros(1003, dtype=torch.bfloat16)",
    "torch.zeros(1003, dtype=torch.complex64)",
    "torch.zeros(0)",
    "torch.zeros(1003, dtype=torch.bool)",
    "torch.zeros(2, 2, 2)",
]


RANK_RAISED = re.compile(r"\brank(s [\d-]+)? raised|every rank raised")


def _grade(grade, exercise_id: str, file: str, replace: list[list[str]], checks: set[str] | None) -> list[CheckResult]:
    with tempfile.TemporaryDirectory() as folder:
        path = materialize(file, {"name": "odd", "replace": replace}, Path(folder))
        return grade(exercise_id, path, world_sizes=(2,), checks=checks)


def _said_in_a_sentence(results: list[CheckResult], student_code_raises: bool = False) -> None:
    """No error of the grader's, and, where the student's code itself raises nothing, no rank said to
    have raised (the grader's own worker tripping over the value)."""
    assert results
    for result in results:
        shown = f"{result.check}: {result.message}\n{result.details[:3000]}"
        assert result.status != "error", shown
        assert "internal grader error" not in result.message, shown
        assert student_code_raises or not RANK_RAISED.search(result.message), shown


@FEW
@given(value=st.sampled_from(ODD_VALUES))
@example(value="[None, None]")  # the hidden check indexed an epoch the worker never recorded
def test_ex02_make_loader_returning_anything(grade, value):
    replace = [
        ["    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)", f"    return {value}"],
        [
            "    loader.sampler.set_epoch(epoch)",
            "    getattr(getattr(loader, 'sampler', None), 'set_epoch', id)(epoch)",
        ],
        ["from torch.utils.data import", "import functools\nimport torch\nfrom torch.utils.data import"],
    ]
    _said_in_a_sentence(_grade(grade, "ex02_data_sharding", "ex02_data_sharding.py", replace, None))


@FEW
@given(value=st.sampled_from(ODD_VALUES))
@example(value=ODD_VALUES[-1])  # ranks of two types: sorting them raised in the judge
def test_ex04_launcher_returning_anything(grade, value):
    replace = [
        ["    return [gathered[rank] for rank in range(world_size)]", f"    return {value}"],
        ["import torch.multiprocessing as mp", "import functools\nimport torch\nimport torch.multiprocessing as mp"],
    ]
    _said_in_a_sentence(_grade(grade, "ex04_launch", "ex04_launch.py", replace, {"runs_every_rank"}))


@FEW
@given(value=st.sampled_from([*ODD_TENSORS, "'a string'"]))
@example(value="torch.zeros(1003)")
@example(value="torch.zeros(1003, dtype=torch.complex64)")  # could not even be reported
def test_ex08_ring_leaving_anything_in_its_tensor(grade, value):
    last = "        _exchange(chunks[outgoing], chunks[incoming], right, left)\n"
    replace = [[last, f"{last}    tensor.data = {value}\n"]]
    checks = {"sums_correctly", "ring_traffic"}
    results = _grade(grade, "ex08_ring_allreduce", "ex08_ring_allreduce.py", replace, checks)
    _said_in_a_sentence(results, student_code_raises=value == "'a string'")  # `tensor.data = str` raises
    if value == "torch.zeros(1003)":  # not "averaged", as the zero mixture once was called
        assert "rank 0's tensor of shape [1003] holds zeros" in results[0].message
