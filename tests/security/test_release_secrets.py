"""A student copy ships no answer: no hidden check, no closed form, and no expected value of a public check.
A copy's public checks of exercise 10 judge the laws the formulas obey (properties.py); a table of the right
values, which a student could only build from the course, passes the course's public checks and fails the
hidden one."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import cast

import pytest
from conftest import REPO
from instructor import support

from grader.checks.ex10_scaling import properties
from grader.checks.ex10_scaling.answers import CLOSED_FORMS
from grader.checks.ex10_scaling.probes import BAD_ZERO_STAGES, PROBES
from grader.judge.api import CheckContext, CheckFailed
from grader.judge.names import HintName

SIGNATURES = {
    "scaled_lr": "base_lr, base_batch, batch, step, warmup_steps",
    "effective_batch": "per_gpu_batch, world_size, accumulation_steps=1",
    "amdahl_speedup": "parallel_fraction, n",
    "parallel_efficiency": "parallel_fraction, n",
    "ring_allreduce_bytes": "message_bytes, world_size",
    "allreduce_seconds": "message_bytes, world_size, bandwidth",
    "zero_memory_per_gpu": "num_params, world_size, stage, optimizer_bytes=12",
}


def _table() -> dict[str, list[tuple[tuple, float]]]:
    """The right value of every public probe, from the course's closed forms."""
    return {name: [(args, float(CLOSED_FORMS[name](*args))) for args in PROBES[name]] for name in PROBES}


def table_stub() -> str:
    """An ex10 file that answers from a table of the public probes' right values (and raises for a bad stage)."""
    lines = ["TABLE = " + repr({name: dict(rows) for name, rows in _table().items()}), ""]
    for name, signature in SIGNATURES.items():
        names = [part.split("=")[0].strip() for part in signature.split(",")]
        guard = "    if stage not in (0, 1, 2, 3):\n        raise ValueError(stage)\n" if "stage" in names else ""
        key = ", ".join(f"float({n})" for n in names)
        lines += [
            f"def {name}({signature}):",
            guard + f"    key = ({key},)",
            f"    return next((v for k, v in TABLE[{name!r}].items() if all(abs(a - b) <= 1e-12 * max(1, abs(b))"
            " for a, b in zip(k, key))), 0.0)",
            "",
        ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def student_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "copy"
    done = support.run_grader(REPO, "release", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_no_secret_module_ships(student_copy: Path) -> None:
    shipped = {p.name for p in (student_copy / "grader").rglob("*.py")}
    assert "hidden.py" not in shipped and "answers.py" not in shipped
    assert not list(student_copy.rglob("*.json")), "a table of values"
    text = "\n".join(p.read_text() for p in (student_copy / "grader").rglob("*.py"))
    assert "def warmup_lr" not in text and "1 / ((1 - p) + p / n)" not in text  # the closed forms' source


def _printed(value: float) -> set[str]:
    """`value` as the judge prints it (6 significant digits; ZeRO's bytes also in GB, 4 digits) and as Python
    writes it."""
    return {f"{value:.6g}", f"{value:g}", repr(value), f"{value / 1e9:.4g}"}


def _distinctive(text: str) -> bool:
    """A number with 4 significant digits or more: one that text holds only by carrying that value (a number
    like 96 or 0.5 is in any text, and is an input of a probe as often as an output)."""
    mantissa = re.split(r"e", text, maxsplit=1)[0]
    return len(mantissa.replace("-", "").replace(".", "").strip("0")) >= 4


def test_no_expected_value_of_a_public_check_ships(student_copy: Path) -> None:
    texts = {p: p.read_text(errors="replace") for p in student_copy.rglob("*") if p.is_file()}
    found = []
    for name, rows in _table().items():
        for args, value in rows:
            for shown in filter(_distinctive, _printed(value)):
                pattern = re.compile(rf"(?<![\w.]){re.escape(shown)}(?![\w])")
                found += [f"{name}{args} = {shown} in {p}" for p, text in texts.items() if pattern.search(text)]
    assert not found, "\n".join(found)


def test_the_scan_finds_a_value_that_ships(tmp_path: Path) -> None:
    """The scan above is no formality: a public value written anywhere is found, however it is printed."""
    (args, value) = _table()["amdahl_speedup"][15]
    assert _distinctive(f"{value:.6g}"), (args, value)
    (tmp_path / "notes.md").write_text(f"at {args}: {value:.6g}\n")
    hits = [s for s in filter(_distinctive, _printed(value)) if s in (tmp_path / "notes.md").read_text()]
    assert hits


class _Judged:
    """A CheckContext's `fail`, all properties.judge uses."""

    def fail(self, message: str, hint: HintName | None = None) -> CheckFailed:
        return CheckContext.fail(cast(CheckContext, self), message, hint)


def _verdict(module: dict) -> str:
    """What the copy's laws say of an ex10 module's functions on the public probes: '' when every law holds."""
    values = {name: {args: float(module[name](*args)) for args in PROBES[name]} for name in PROBES}
    outcomes = {}
    for stage in BAD_ZERO_STAGES:
        try:
            outcomes[(stage,)] = module["zero_memory_per_gpu"](1e9, 8, stage)
        except Exception as exc:
            outcomes[(stage,)] = {"raised": f"{type(exc).__name__}: {exc}"}
    try:
        properties.judge(cast(CheckContext, _Judged()), {**values, "bad_stage": outcomes})
    except CheckFailed as failed:
        return failed.verdict.message
    return ""


def test_the_laws_hold_for_the_reference_solution_and_for_no_public_mistake() -> None:
    solution = (REPO / "solutions" / "ex10_scaling.py").read_text()
    reference: dict = {}
    exec(compile(solution, "ex10_scaling.py", "exec"), reference)
    assert _verdict(reference) == ""
    mistakes = tomllib.loads((REPO / "tests" / "mistakes" / "ex10_scaling.toml").read_text())["mistake"]
    for mistake in [m for m in mistakes if m["check"] != "holds_off_grid"]:  # the hidden check's own: off the grid
        source = solution
        for old, new in mistake["replace"]:
            source = source.replace(old, new, 1)
        module: dict = {}
        exec(compile(source, "ex10_scaling.py", "exec"), module)
        try:
            said = _verdict(module)
        except Exception as exc:  # the mistake raises or returns a non-number: the check's _values fails it
            said = f"{type(exc).__name__}"
        assert said, f"mistake {mistake['name']} breaks no law"


def test_the_copy_passes_the_reference_and_fails_the_stub_on_its_laws(student_copy: Path, tmp_path: Path) -> None:
    solved = tmp_path / "solved"
    solved.mkdir()
    shutil.copyfile(REPO / "solutions" / "ex10_scaling.py", solved / "ex10_scaling.py")
    passed = support.run_grader(student_copy, "check", "--path", str(solved), "ex10", cwd=tmp_path)
    assert passed.returncode == 0 and "public checks passed" in passed.stdout, passed.stdout + passed.stderr
    stub = support.run_grader(student_copy, "check", "ex10", cwd=tmp_path)
    assert stub.returncode == 1 and "not implemented" in stub.stdout, stub.stdout
    wrong = tmp_path / "wrong"
    support.with_mistake(wrong, "ex10_scaling.py", "amdahl_fractions_swapped")
    failed = support.run_grader(student_copy, "check", "--path", str(wrong), "ex10", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout
    assert "FAIL  amdahl" in failed.stdout and "with no parallel work (p = 0) there is no speedup" in failed.stdout


def test_a_table_of_the_public_answers_passes_the_courses_public_checks_and_fails_the_hidden_one(
    tmp_path: Path,
) -> None:
    submission = tmp_path / "table"
    submission.mkdir()
    (submission / "ex10_scaling.py").write_text(table_stub())
    course = support.course_copy(tmp_path / "course")
    public = support.run_grader(course, "check", "--path", str(submission), "ex10", cwd=tmp_path)
    assert "public checks passed" in public.stdout, public.stdout + public.stderr
    hidden = support.run_grader(
        course, "grade", str(submission), "--out", str(tmp_path / "out"), "--no-sandbox", "--world-size", "1"
    )
    assert hidden.returncode == 0, hidden.stderr
    book = (tmp_path / "out" / "gradebook.csv").read_text().splitlines()
    assert float(book[1].split(",")[book[0].split(",").index("ex10_scaling")]) < 7, book
