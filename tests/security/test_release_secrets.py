"""A student copy ships no answer: no hidden check, no closed form; only the values the public
checks test, which a table can match on the public inputs and which the hidden check then catches."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO
from instructor import support

TABLE_STUB = """
import json, pathlib
_table = json.loads((pathlib.Path(__import__("grader").__file__).parent
                     / "checks/ex10_scaling/expected.json").read_text())


def _lookup(name, *args):
    for row in _table[name]:
        if all(abs(a - b) <= 1e-12 * max(1, abs(b)) for a, b in zip(args, row[:-1])):
            return row[-1]
    return 0.0


def scaled_lr(base_lr, base_batch, batch, step, warmup_steps):
    return _lookup("scaled_lr", base_lr, base_batch, batch, step, warmup_steps)


def effective_batch(per_gpu_batch, world_size, accumulation_steps=1):
    return _lookup("effective_batch", per_gpu_batch, world_size, accumulation_steps)


def amdahl_speedup(parallel_fraction, n):
    return _lookup("amdahl_speedup", parallel_fraction, n)


def parallel_efficiency(parallel_fraction, n):
    return _lookup("parallel_efficiency", parallel_fraction, n)


def ring_allreduce_bytes(message_bytes, world_size):
    return _lookup("ring_allreduce_bytes", message_bytes, world_size)


def allreduce_seconds(message_bytes, world_size, bandwidth):
    return _lookup("allreduce_seconds", message_bytes, world_size, bandwidth)


def zero_memory_per_gpu(num_params, world_size, stage, optimizer_bytes=12):
    if stage not in (0, 1, 2, 3):
        raise ValueError(stage)
    return _lookup("zero_memory_per_gpu", num_params, world_size, stage, optimizer_bytes)
"""


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "copy"
    done = support.run_grader(REPO, "release", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_no_secret_module_ships(student_copy):
    shipped = {p.name for p in (student_copy / "grader").rglob("*.py")}
    assert "hidden.py" not in shipped and "answers.py" not in shipped
    text = "\n".join(p.read_text() for p in (student_copy / "grader").rglob("*.py"))
    assert "def warmup_lr" not in text and "1 / ((1 - p) + p / n)" not in text  # the closed forms' source


def test_a_table_of_the_public_answers_passes_public_checks_and_fails_the_hidden_one(student_copy, tmp_path):
    submission = tmp_path / "table"
    submission.mkdir()
    (submission / "ex10_scaling.py").write_text(TABLE_STUB)
    public = support.run_grader(student_copy, "check", "--path", str(submission), "ex10")
    assert "public checks passed" in public.stdout, public.stdout + public.stderr
    course = support.course_copy(tmp_path / "course")
    shutil.copyfile(
        student_copy / "grader/checks/ex10_scaling/expected.json", course / "grader/checks/ex10_scaling/expected.json"
    )
    graded = support.run_grader(course, "check", "--solutions", "ex10")  # the instructor's run includes hidden
    assert graded.returncode == 0, graded.stdout
    hidden = support.run_grader(
        course, "grade", str(submission), "--out", str(tmp_path / "out"), "--no-sandbox", "--world-size", "1"
    )
    assert hidden.returncode == 0, hidden.stderr
    book = (tmp_path / "out" / "gradebook.csv").read_text().splitlines()[1].split(",")
    header = (tmp_path / "out" / "gradebook.csv").read_text().splitlines()[0].split(",")
    assert float(book[header.index("ex10_scaling")]) < 7, book
