"""Facts are typed at the boundary: a report that does not fit its worker's schema fails the check, never passes."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np
import pytest
from prepared import prepared_context

from grader.checks.ex01_process_group.facts import Joined
from grader.engine import Job
from grader.engine.facts import RankFacts, Worker
from grader.judge.api import CheckContext, CheckFailed
from grader.judge.facts import MAX_PROBLEMS, problems

ROOT = Path(__file__).resolve().parents[1]
JOB = Job("grader.checks.ex01_process_group.workers:join_and_leave", 1)  # never started: the runs are prepared
WORKER = "join_and_leave"


class Inner(TypedDict):
    name: str
    sizes: list[int]


class OneOf(RankFacts):
    x: Inner | list[str] | None


class Report(RankFacts):
    losses: list[float]
    weights: dict[str, np.ndarray]
    inner: Inner
    pair: tuple[int, str]
    maybe: int | None
    later: NotRequired[bool]


def good() -> dict[str, Any]:
    return {
        "losses": [1.0, 2],  # JSON writes 2.0 as 2
        "weights": {"w": np.zeros(2)},
        "inner": {"name": "a", "sizes": [1, 2]},
        "pair": [1, "x"],  # the wire carries tuples as lists
        "maybe": None,
        "rendezvous_ranks": [0, 1],  # the runtime's own fact
    }


def test_a_conforming_report_has_no_problem() -> None:
    assert problems(good(), Report) == []
    assert problems({**good(), "later": True}, Report) == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"losses": None}, "fact 'losses' is missing (None), not list[float]"),
        ({"losses": [1.0, "2"]}, "fact 'losses'[1] is a str, not float"),
        ({"losses": [True]}, "fact 'losses'[0] is a bool, not float"),
        ({"weights": {"w": [0.0]}}, "fact 'weights'['w'] is a list, not an array"),
        ({"inner": {"name": "a"}}, "fact 'inner' lacks 'sizes'"),
        ({"inner": {"name": "a", "sizes": [1], "extra": 1}}, "fact 'inner' hold 'extra', which Inner does not have"),
        ({"pair": [1]}, "fact 'pair' has 1 items, not 2"),
        ({"maybe": "1"}, "fact 'maybe' is a str, not int | None"),
        ({"later": 1}, "fact 'later' is an int, not bool"),
        ({"forged_reference": [1.0]}, "the facts hold 'forged_reference', which Report does not have"),
    ],
)
def test_each_malformed_fact_is_said(change: dict[str, Any], said: str) -> None:
    assert problems({**good(), **change}, Report) == [said]


def test_the_runtimes_own_facts_fit_every_schema() -> None:
    """What the rank runtime adds beside a worker's facts (grader/engine/rank_runtime.py) is never "unknown"."""
    from grader.engine import collectives
    from grader.engine.rank_runtime import IMPORT_CALLS, RENDEZVOUS_RANKS

    runtime = {IMPORT_CALLS: {"f": 3}, RENDEZVOUS_RANKS: [0, 1], collectives.MISMATCH: {"calls": []}}
    assert problems({**good(), **runtime}, Report) == []
    assert problems(runtime, Report, complete=False) == []


def test_a_missing_fact_is_said_only_of_a_complete_report() -> None:
    facts = good()
    del facts["losses"]
    assert problems(facts, Report) == ["the facts lack 'losses'"]
    assert problems(facts, Report, complete=False) == []
    assert problems({}, Report, complete=False) == []


def test_a_type_is_said_by_its_short_name() -> None:
    facts = {**good(), "inner": "x", "weights": {"w": None}, "pair": [1, 2]}
    assert sorted(problems(facts, Report)) == [  # the facts are a table: in no particular order
        "fact 'inner' is a str, not a table of Inner",
        "fact 'pair'[1] is an int, not str",
        "fact 'weights'['w'] is missing (None), not an array",
    ]
    nested: dict[str, Any] = {**good(), "maybe": [1]}
    assert problems(nested, Report) == ["fact 'maybe' is a list, not int | None"]
    assert problems({"x": [1]}, OneOf) == ["fact 'x' is a list, not Inner | list[str] | None"]


def test_a_flood_of_problems_is_said_in_a_few_lines() -> None:
    assert len(problems({**good(), "losses": ["x"] * 10_000}, Report)) == MAX_PROBLEMS


def _context(facts: list[dict[str, Any]]) -> CheckContext:
    return prepared_context("ex01", WORKER, facts)


def test_a_check_fails_on_a_malformed_report_and_passes_a_good_one() -> None:
    worker = Worker("train", Report)
    assert len(_context([good(), good()]).facts(worker)) == 2
    with pytest.raises(CheckFailed) as failed:
        _context([good(), {**good(), "losses": "all good"}]).facts(worker)
    assert failed.value.verdict.message == (
        "rank 1 reported facts the grader cannot judge: fact 'losses' is a str, not list[float]"
    )
    with pytest.raises(CheckFailed, match="rank 0 reported facts the grader cannot judge: the facts lack 'losses'"):
        _context([{k: v for k, v in good().items() if k != "losses"}]).facts(worker)


def test_an_empty_report_of_exercise_1_fails_its_schema() -> None:
    ctx = _context([{}])
    with pytest.raises(CheckFailed, match="the facts lack 'device_bindings'; the facts lack 'grader_port'"):
        ctx.require(ctx.runs.run(JOB), schema=Joined)


def _facts_modules() -> list[str]:
    return sorted(f"grader.checks.{path.parent.name}.facts" for path in (ROOT / "grader" / "checks").glob("*/facts.py"))


@pytest.mark.parametrize("module_name", _facts_modules())
def test_every_declared_worker_is_a_function_of_its_workers_module(module_name: str) -> None:
    module = importlib.import_module(module_name)
    workers = Path(module.__file__ or "").with_name("workers.py")
    defined = {node.name for node in ast.parse(workers.read_text()).body if isinstance(node, ast.FunctionDef)}
    handles = [value for value in vars(module).values() if isinstance(value, Worker)]
    assert handles, f"{module_name} declares no Worker"
    for handle in handles:
        assert handle.name in defined, f"{module_name}: {handle.name} is not a worker in {workers}"
        assert RankFacts.__annotations__.keys() <= handle.facts.__annotations__.keys(), "extend RankFacts"


def test_a_trusted_report_outside_its_schema_is_the_graders_error_not_a_ranks() -> None:
    ctx = _context([{**good(), "losses": "x"}])
    with pytest.raises(RuntimeError, match="the grader's trusted worker train reported facts outside its schema: "):
        ctx.reference(Worker("train", Report))
    assert _context([good()]).inspect(Worker("train", Report))["losses"] == [1.0, 2]


@pytest.mark.parametrize("module_name", _facts_modules())
def test_every_worker_has_a_schema(module_name: str) -> None:
    module = importlib.import_module(module_name)
    workers = ast.parse(Path(module.__file__ or "").with_name("workers.py").read_text())
    defined = {
        node.name
        for node in workers.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("_")
        and node.args.args[:1]
        and node.args.args[0].arg == "ctx"
    }
    declared = {value.name for value in vars(module).values() if isinstance(value, Worker)}
    assert defined <= declared, f"{module_name}: workers without a Worker handle"


def test_every_exercise_declares_its_facts() -> None:
    packages = sorted(path.name for path in (ROOT / "grader" / "checks").glob("ex*") if path.is_dir())
    assert [name.split(".")[2] for name in _facts_modules()] == packages
