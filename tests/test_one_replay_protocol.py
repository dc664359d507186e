"""One diagnosis protocol: every exercise names a cause from its numbers through hypotheses.toml and
grader.judge.replay.prove, and no exercise keeps a hypothesis table, a cause sentence or a replay of its own.

ex13, ex14 and ex18 once kept Python dicts of hypotheses, their own simulators' knobs and their own loops
that compared replays; this keeps every exercise on the one format and the one interface.
"""

from __future__ import annotations

import ast
import importlib
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

from grader.checks.manifest import load_manifest
from grader.judge import replay

PACKAGES = sorted(path for path in (REPO / "grader" / "checks").glob("ex*") if path.is_dir())


def _judge_modules() -> list[Path]:
    return [package / name for package in PACKAGES for name in load_manifest(package).judge if name.endswith(".py")]


def _is_cause(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Cause"


def own_tables(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each hypothesis table in a module: a dict with a "says" or "knobs" key, or one that maps
    causes to sentences."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
        if "says" in keys or "knobs" in keys:
            found.append((node.lineno, "a hypothesis written as a dict"))
        elif (
            node.keys
            and all(_is_cause(k) for k in node.keys)
            and all(
                isinstance(v, (ast.Constant, ast.JoinedStr)) and not isinstance(getattr(v, "value", ""), bool)
                for v in node.values
            )
        ):
            if all(isinstance(v, ast.JoinedStr) or isinstance(getattr(v, "value", None), str) for v in node.values):
                found.append((node.lineno, "cause sentences written as a dict"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("prove", "_proven", "_matching"):
            found.append((node.lineno, f"a proof loop of its own ({node.name})"))
    return sorted(found)


def test_no_exercise_keeps_its_own_hypotheses() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in _judge_modules()
        for line, what in own_tables(ast.parse(path.read_text()))
    ]
    assert found == [], "keep hypotheses in hypotheses.toml and prove them with grader.judge.replay:\n" + "\n".join(
        found
    )


def test_the_rule_sees_the_old_ways() -> None:
    tree = ast.parse(
        'H = {Cause("a"): {"knobs": {}, "says": "x"}}\n'
        'S = {Cause("a"): "a sentence", Cause("b"): f"another {1}"}\n'
        'HINTS = {Cause("a"): HintName("h")}\n'
        "def _proven(ctx):\n    pass\n"
    )
    assert own_tables(tree) == [
        (1, "a hypothesis written as a dict"),
        (2, "cause sentences written as a dict"),
        (4, "a proof loop of its own (_proven)"),
    ]


def _replay_workers(package: Path) -> list[ast.FunctionDef]:
    """The workers that take the judge's hypotheses."""
    tree = ast.parse((package / "workers.py").read_text())
    return [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(a.arg == "hypotheses" for a in node.args.args)
    ]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_every_replay_worker_takes_requests_and_has_hypotheses(package: Path) -> None:
    """A worker that replays hypotheses takes them as ReplayRequests, from its exercise's hypotheses.toml, which
    the checks load (and no exercise with a hypotheses.toml lacks the worker)."""
    workers = _replay_workers(package)
    has_file = (package / "hypotheses.toml").is_file()
    assert bool(workers) == has_file, f"{package.name}: replay workers {[w.name for w in workers]}, toml {has_file}"
    for worker in workers:
        annotation = next(a.annotation for a in worker.args.args if a.arg == "hypotheses")
        assert annotation is not None and ast.unparse(annotation) == "dict[str, ReplayRequest]", worker.name
    if has_file:
        assert 'replay.load(__package__ or "")' in (package / "checks.py").read_text()


@pytest.mark.parametrize(
    "package",
    [
        p
        for p in PACKAGES
        if (p / "hypotheses.toml").is_file() and "replay" in tomllib.loads((p / "hypotheses.toml").read_text())
    ],
    ids=lambda p: p.name,
)
def test_an_exercise_replay_declares_its_workers_knobs(package: Path) -> None:
    """The [replay] table the lint reads names exactly the knobs of the exercise's trusted replay worker, and each
    word knob's list holds the correct run's value."""
    knobs, _ = replay.declared(tomllib.loads((package / "hypotheses.toml").read_text()))
    workers = importlib.import_module(f"grader.checks.{package.name}.workers")
    assert set(knobs) == set(workers.REPLAY_KNOBS)
    for knob, kind in knobs.items():
        default = workers.REPLAY_KNOBS[knob]
        if isinstance(kind, list):
            assert default in kind, knob
        elif kind == "flag":
            assert isinstance(default, bool), knob
        else:
            assert isinstance(default, (int, float)) and not isinstance(default, bool), knob


def test_every_exercise_that_replays_uses_the_one_format() -> None:
    """ex13, ex14 and ex18 (once Python dicts) and the seven of the shared loop: one loader reads them all."""
    with_file = [p.name for p in PACKAGES if (p / "hypotheses.toml").is_file()]
    assert {"ex13_zero1", "ex14_tensor_parallel", "ex18_fsdp_tp_2d"} <= set(with_file)
    for name in with_file:
        hypotheses = replay.load(f"grader.checks.{name}")
        assert hypotheses and all(h.cause and h.says for h in hypotheses)
