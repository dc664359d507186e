"""The mutation sweep (tools/mutation_sweep.py): its generator on a tiny function, without grading, and one
end-to-end sweep of two ex10 mutants (pure arithmetic: no process group, fast), so the tool does not rot while
it is not part of the default run."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("mutation_sweep", REPO / "tools" / "mutation_sweep.py")
assert SPEC is not None and SPEC.loader is not None
sweep = importlib.util.module_from_spec(SPEC)
sys.modules["mutation_sweep"] = sweep  # its dataclasses look their module up
SPEC.loader.exec_module(sweep)

SAMPLE = '''
import contextlib


def helper(a, b):
    return a - b


class Twice:
    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def graded(values, n):
    """A docstring the sweep leaves in place."""
    total = 0
    for i in range(1, n):
        total += values[0] * 2
    with contextlib.suppress(ValueError):
        helper(total, n)
    if total == n:
        print(total, n)
    return total < n
'''


def _mutants() -> list:
    return sweep.generate("ex_sample", SAMPLE, ("graded",))


def test_every_operator_makes_a_compiling_mutant_that_differs() -> None:
    mutants = _mutants()
    original = ast.unparse(ast.parse(SAMPLE))
    assert {m.operator for m in mutants} == set(sweep.OPERATORS)
    for mutant in mutants:
        compile(mutant.source, mutant.id, "exec")
        assert ast.unparse(ast.parse(mutant.source)) != original, mutant.diff
        assert mutant.location.split(":")[0] in {"graded", "helper", "Twice.backward"}, mutant.location
        assert mutant.diff.startswith("--- original")


def test_generation_is_deterministic_and_deduplicated() -> None:
    first, second = _mutants(), _mutants()
    assert [m.source for m in first] == [m.source for m in second]
    assert len({m.source for m in first}) == len(first)
    assert len({m.id for m in first}) == len(first)
    picked = sweep.sample(first, 5, seed=3)
    assert [m.id for m in picked] == [m.id for m in sweep.sample(first, 5, seed=3)]
    assert len({m.operator for m in picked}) == 5, "a small sample is spread over the operators"


def test_signatures_are_left_alone() -> None:
    for mutant in _mutants():
        tree = ast.parse(mutant.source)
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert ast.unparse(functions["helper"].args) == "a, b"
        assert ast.unparse(functions["graded"].args) == "values, n"


def test_the_code_the_graded_functions_run_is_mutated_too() -> None:
    """An autograd Function's backward and a helper are the student's code as much as the graded function: the
    graded function's mutants come first, then the helper's, then the methods'."""
    locations = [m.location.split(":")[0] for m in _mutants()]
    assert {"graded", "helper", "Twice.backward"} <= set(locations)
    firsts = [locations.index(name) for name in ("graded", "helper", "Twice.backward")]
    assert firsts == sorted(firsts)


def test_sweep_of_two_ex10_mutants_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = sweep.main(["--exercises", "ex10", "--limit", "2", "--out", str(tmp_path), "--summary"])
    records = [json.loads(line) for line in (tmp_path / sweep.RECORDS).read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["exercise"] == "ex10_scaling"
        assert record["operator"] in sweep.OPERATORS
        assert record["location"] and record["diff"].startswith("--- original")
        assert record["seconds"] > 0 and isinstance(record["caught"], bool)
        assert record["checks"], "every check of ex10 reported"
        for check in record["checks"]:
            assert {"check", "world_size", "status", "message", "cause"} <= set(check)
            assert not check["message"].startswith(sweep.CRASH)
    out = capsys.readouterr().out
    assert "ex10_scaling" in out and "unproven_causes" in out
    assert status == 0
    # resumed: what is recorded is not graded again
    assert sweep.main(["--exercises", "ex10", "--limit", "2", "--out", str(tmp_path), "--no-baseline"]) == 0
    assert len((tmp_path / sweep.RECORDS).read_text().splitlines()) == 2


class _FlippingPool:
    """Grades without an engine: the check names cause "lr_scaled" with the first seed and another after."""

    def __init__(self) -> None:
        self.seeds: list[int | None] = []

    def grade(self, exercise: object, path: Path, options: object) -> list:
        self.seeds.append(getattr(options, "seed", None))
        cause = "lr_scaled" if len(self.seeds) == 1 else "loss_summed"
        return [
            sweep.CheckResult(
                "failed",
                "measured",
                cause=cause,
                exercise="ex03_train_ddp",
                check="c",
                world_size=2,
                seconds=0.1,
                points=0.0,
                max_points=1.0,
                visibility="public",
            ),
            sweep.CheckResult(
                "failed",
                "measured",
                exercise="ex03_train_ddp",
                check="d",
                world_size=2,
                seconds=0.1,
                points=0.0,
                max_points=1.0,
                visibility="public",
            ),
        ]


def test_a_cause_that_flips_with_the_seed_is_unproven(tmp_path: Path) -> None:
    pool = _FlippingPool()
    exercise = sweep.load_catalog(REPO).get("ex03")
    mutant = _mutants()[0]
    outcome = sweep.grade_mutant(pool, exercise, mutant, seed=1, deadline=5.0, folder=tmp_path)
    assert len(pool.seeds) == 2 and pool.seeds[0] != pool.seeds[1], "graded again, with another seed"
    assert outcome.causes == 1 and outcome.unproven == 1 and outcome.caught
    assert sweep.tally([outcome])["unproven_causes"] == 1
    assert "UNPROVEN" in sweep.summary([outcome])


class _RaisingPool:
    def grade(self, exercise: object, path: Path, options: object) -> list:
        raise KeyError("facts of an unexpected shape")


def test_a_grading_that_raises_is_a_crash_not_the_end_of_the_sweep(tmp_path: Path) -> None:
    exercise = sweep.load_catalog(REPO).get("ex03")
    outcome = sweep.grade_mutant(_RaisingPool(), exercise, _mutants()[0], seed=1, deadline=5.0, folder=tmp_path)
    assert outcome.crashes == 1 and sweep.tally([outcome])["crashes"] == 1
