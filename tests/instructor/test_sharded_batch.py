"""A class of 20 graded as the Slurm job would grade it, two array tasks and the merge, each run here
from the generated script itself (`srun` and `sbatch` stand-ins record and run what it asks), gives
the gradebook one plain `grader grade` run gives. A real one-node Slurm cluster runs the same job in
test_slurm_cluster.py where Slurm is installed.

Every grade here is --no-sandbox (passed on by `grader slurm` to its tasks): slicing and merging do
not depend on the sandbox, and the test must pass on a machine without bubblewrap."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import support

# --deadline 60 (grade's default): three gradings of two submissions each share the CI's two cores with other tests,
# and a run over a 10 s deadline once cost a correct check its point; no submission of the class hangs
GRADE = (
    "--exercises",
    support.CHEAP_EXERCISES,
    "--world-size",
    "2",
    "-j",
    "2",
    "--deadline",
    "60",
    "--timeout",
    "120",
    "--no-sandbox",
)
SRUN = '#!/bin/sh\nexec "$@"\n'  # one task, here
SBATCH = '#!/bin/sh\nprintf "%s\\n" "$@" > "$SBATCH_RECORD"\necho 99\n'  # records the merge job's options


def gradebook(path: Path) -> dict[str, dict[str, str]]:
    """Rows by submission, without the seconds each took (the one column two runs never share)."""
    rows = {row["submission"]: row for row in csv.DictReader(path.open())}
    for row in rows.values():
        del row["seconds"]
    return rows


@pytest.fixture(scope="module")
def submissions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("class") / "submissions"
    support.a_class(folder, 20)
    return folder


def _failed(out: Path, name: str) -> list[str]:
    """What a submission's results.json says of its failed checks, wherever under OUT (a shard's folder) it is."""
    found = sorted(out.glob(f"**/{name}/results.json"))
    tests = json.loads(found[0].read_text())["tests"] if found else []
    return [f"{t['name']}: {t['output'][:300]}" for t in tests if t.get("status") == "failed"]


def _start_array_task(script: Path, index: int, env: dict[str, str]) -> subprocess.Popen[str]:
    task_env = {**env, "SLURM_ARRAY_TASK_ID": str(index), "SLURM_ARRAY_JOB_ID": "41"}
    return subprocess.Popen(
        ["bash", str(script)], env=task_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_two_shards_and_their_merge_give_the_gradebook_of_one_run(submissions: Path, tmp_path: Path) -> None:
    done = support.run_grader(
        support.REPO,
        "slurm",
        str(submissions),
        "--out",
        str(tmp_path / "grade.sbatch"),
        "--results",
        str(tmp_path / "graded"),
        "--shards",
        "2",
        *GRADE,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("sbatch", SBATCH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(support.REPO),
        "SBATCH_RECORD": str(tmp_path / "merge-job"),
        "NO_COLOR": "1",
    }
    env.pop("GRADER_COURSE", None)  # the script says which course
    # the two array tasks at once, as Slurm runs them, and the one plain run beside them
    tasks = {index: _start_array_task(tmp_path / "grade.sbatch", index, env) for index in (2, 1)}
    whole = support.run_grader(
        support.REPO,
        "grade",
        *map(str, sorted(submissions.iterdir())),
        "--out",
        str(tmp_path / "whole"),
        *GRADE,
        timeout=600,
    )
    assert whole.returncode == 0, whole.stderr
    for index, task in tasks.items():
        output, _ = task.communicate(timeout=600)
        assert task.returncode == 0, output
        assert f"shard {index}/2:" in output

    merge_job = (tmp_path / "merge-job").read_text().splitlines()  # submitted by task 1 only
    assert "--dependency=afterany:41" in merge_job
    (wrapped,) = [option.removeprefix("--wrap=") for option in merge_job if option.startswith("--wrap=")]
    merged = subprocess.run(["sh", "-c", wrapped], env=env, capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stdout + merged.stderr

    graded = tmp_path / "graded"
    one, two = (set(gradebook(graded / f"shard-{i}" / "gradebook.csv")) for i in (1, 2))
    assert one and two and not one & two
    merged_rows, whole_rows = gradebook(graded / "gradebook.csv"), gradebook(tmp_path / "whole" / "gradebook.csv")
    differ = sorted(name for name in whole_rows if merged_rows.get(name) != whole_rows[name])
    assert merged_rows.keys() == whole_rows.keys() and not differ, "\n".join(
        f"{name}: {_failed(graded, name)} against {_failed(tmp_path / 'whole', name)}" for name in differ
    )
    expected = gradebook(tmp_path / "whole" / "gradebook.csv")
    totals = {name: float(row["total"]) for name, row in expected.items()}
    assert len(totals) == 20 and totals["student00"] == 10 and totals["student01"] == 0
    assert 0 < totals["student02"] < 10 and 0 < totals["student04"] < 10  # a named mistake; the hidden check
    report = (graded / "report.html").read_text()
    assert "20 submissions" in report and "set_epoch" in report
