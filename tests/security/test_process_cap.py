"""A process cap per sandbox: a submission that starts 200 processes is refused past the cap, its results
say so, and only it pays. Bubblewrap here; the unprivileged-user sandbox in test_user_sandbox.py."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from instructor import support

from grader.instructor.gradescope import results_folder
from grader.sandbox.limits import DEFAULT_LIMITS, Cgroup

# exercise 1's solution, whose ranks first start 200 processes each (they sleep, then leave)
FORKER = """
def _fork_many():
    import os, time
    started = 0
    for _ in range(200):
        try:
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            started += 1
        except OSError:
            break
    return started
"""


def forker(folder: Path) -> Path:
    """The solution of exercise 1, whose setup_ddp first starts 200 processes."""
    support.solutions(folder)
    path = folder / "ex01_process_group.py"
    source = path.read_text().replace(
        "    if backend is None:\n", "    print('started', _fork_many(), 'processes')\n    if backend is None:\n", 1
    )
    path.write_text(source + FORKER)
    return folder


def grade_two(tmp_path: Path, sandbox: str, course: Path = support.REPO) -> tuple[dict[str, dict], dict[str, dict]]:
    """The forker and an honest submission graded in one batch: their results.json and gradebook rows."""
    folder = tmp_path / "subs"
    forker(folder / "forker")
    honest = folder / "honest"
    honest.mkdir(parents=True)
    shutil.copyfile(support.SOLUTIONS / "ex01_process_group.py", honest / "ex01_process_group.py")
    out = tmp_path / "out"
    done = support.run_grader(
        course,
        "grade",
        str(folder / "forker"),
        str(honest),
        "--out",
        str(out),
        "--exercises",
        "ex01",
        "--world-size",
        "2",
        "--sandbox",
        sandbox,
        "-j",
        "1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {n: json.loads((out / results_folder(n) / "results.json").read_text()) for n in ("forker", "honest")}
    with open(out / "gradebook.csv", newline="") as handle:
        rows = {row["submission"]: row for row in csv.DictReader(handle)}
    return results, rows


def test_a_submission_starting_200_processes_is_refused_past_the_cap_and_told(
    bwrap_available: None, tmp_path: Path
) -> None:
    probe = Cgroup.create(DEFAULT_LIMITS)
    if probe is None:
        pytest.skip("no cgroup can be made here: the cap is RLIMIT_NPROC, which keeps no count to report")
    probe.remove()
    results, rows = grade_two(tmp_path, "bubblewrap")
    said = f"reached the sandbox's cap of {DEFAULT_LIMITS.max_processes} processes and threads"
    assert said in results["forker"]["output"] and said in rows["forker"]["problem"]
    assert results["honest"]["score"] == results["honest"]["extra_data"]["max_score"] > 0
    assert said not in results["honest"]["output"] and not rows["honest"]["problem"]
