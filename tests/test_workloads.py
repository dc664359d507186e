"""Each exercise's run sizes are one typed object (a `Workload` in its facts.py), passed whole to its workers.

The same arguments were spelled out two or three times per exercise, and a run two checks share was shared only
because both spellings agreed, in the same order. Now the sizes are declared once, and a run's arguments are
kept in name order, so the same run asked for twice is one run."""

from __future__ import annotations

import ast
import importlib
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path

import pytest
from conftest import REPO
from prepared import prepared_context

from grader.engine.facts import Workload

RUNS = {"facts", "run", "reference", "replayer", "inspect", "job"}  # the check API's calls that start a run
PACKAGES = sorted(path.name for path in (REPO / "grader" / "checks").glob("ex*") if path.is_dir())
WITH_WORKLOAD = [
    name
    for name in PACKAGES
    if isinstance(getattr(importlib.import_module(f"grader.checks.{name}.facts"), "WORKLOAD", None), Workload)
]


def test_the_training_exercises_declare_their_workload() -> None:
    declared = {"ex03_train_ddp", "ex05_no_sync", "ex06_fsdp", "ex09_checkpoint", "ex11_syncbn_unused"}
    declared |= {"ex12_overlap_ddp", "ex13_zero1", "ex16_mixed_precision", "ex18_fsdp_tp_2d"}
    assert declared <= set(WITH_WORKLOAD)


@pytest.mark.parametrize("name", WITH_WORKLOAD)
def test_a_worker_that_takes_part_of_the_workload_takes_all_of_it(name: str) -> None:
    """So the checks pass it whole (WORKLOAD.arguments()) and never a hand-picked part."""
    fields = set(importlib.import_module(f"grader.checks.{name}.facts").WORKLOAD.arguments())
    tree = ast.parse(Path(REPO / "grader" / "checks" / name / "workers.py").read_text())
    takers = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.args.args and node.args.args[0].arg == "ctx":
            parameters = {a.arg for a in node.args.args}
            if parameters & fields:
                assert fields <= parameters, (
                    f"{name}.{node.name} takes {sorted(parameters & fields)} of {sorted(fields)}"
                )
                takers += 1
    assert takers, f"no worker of {name} runs its workload"


@pytest.mark.parametrize("name", WITH_WORKLOAD)
def test_no_check_spells_a_workload_argument_out(name: str) -> None:
    """A run asked for with `size=SIZE` beside the workload would be a second spelling of it."""
    fields = set(importlib.import_module(f"grader.checks.{name}.facts").WORKLOAD.arguments())
    tree = ast.parse(Path(REPO / "grader" / "checks" / name / "checks.py").read_text())
    spelled = [
        f"line {node.lineno}: {kw.arg}="
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNS
        for kw in node.keywords
        if kw.arg in fields
    ]
    assert spelled == []


def test_arguments_are_the_fields_and_a_workload_cannot_change() -> None:
    @dataclass(frozen=True)
    class Run(Workload):
        steps: int = 3
        lr: float = 0.1

    run = Run()
    assert run.arguments() == {"steps": 3, "lr": 0.1}
    with pytest.raises(FrozenInstanceError):
        run.steps = 4  # type: ignore[misc]


def test_the_same_run_asked_for_in_another_order_is_one_run() -> None:
    ctx = prepared_context("ex01", "train", [{}])
    first = ctx.job("train", steps=3, lr=0.1, data_seed=7)
    again = ctx.job("train", data_seed=7, lr=0.1, steps=3)
    assert repr(first) == repr(again)
