"""The job `grader slurm` writes, submitted with sbatch to a real one-node Slurm cluster started for
the test (4 fake GPUs, so `--gpus-per-task` is scheduled as on a GPU cluster; the grading itself is
gloo on the CPU). Skipped, with the reason, where Slurm is not installed or the test is not root.
The job grades with --no-sandbox: this is a test of Slurm running the job, not of the sandbox."""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import slurm_cluster, support

pytestmark = pytest.mark.skipif(slurm_cluster.unavailable() is not None, reason=str(slurm_cluster.unavailable()))


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    with slurm_cluster.one_node_cluster() as env:
        yield env


def test_the_job_array_and_its_merge_run_on_slurm(cluster: dict[str, str], tmp_path: Path) -> None:
    subs = tmp_path / "submissions"
    support.solutions(subs / "ada")
    support.stubs(subs / "bo")
    support.with_mistake(subs / "cy", "ex02_data_sharding.py", "forgot_set_epoch")
    (subs / "di.zip").write_text("not a zip")
    results = tmp_path / "graded"
    done = support.run_grader(
        support.REPO,
        "slurm",
        str(subs),
        "--out",
        str(tmp_path / "grade.sbatch"),
        "--results",
        str(results),
        "--shards",
        "2",
        "--gpus-per-task",
        str(slurm_cluster.FAKE_GPUS),
        "--cpus-per-task",
        "1",
        "--backend",
        "gloo",
        "--exercises",
        support.CHEAP_EXERCISES,
        "--world-size",
        "2",
        "--no-sandbox",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    env = {**cluster, "PYTHONPATH": str(support.REPO), "NO_COLOR": "1"}
    env.pop("GRADER_COURSE", None)
    submitted = subprocess.run(
        ["sbatch", "--parsable", str(tmp_path / "grade.sbatch")], env=env, capture_output=True, text=True, timeout=60
    )
    assert submitted.returncode == 0, submitted.stderr
    slurm_cluster.wait_for_jobs(env, timeout=300)

    logs = {p.name: p.read_text() for p in (results / "logs").iterdir()}
    assert sorted(logs) == ["merge.log", "shard-1.log", "shard-2.log"], logs
    assert "merged 4 submission(s) from 2 gradebook(s)" in logs["merge.log"], logs
    rows = {row["submission"]: row for row in csv.DictReader((results / "gradebook.csv").open())}
    assert sorted(rows) == ["ada", "bo", "cy", "di"]
    assert [float(rows[n]["total"]) for n in ("ada", "bo", "di")] == [10, 0, 0]
    assert 0 < float(rows["cy"]["total"]) < 10 and "not a readable zip" in rows["di"]["problem"]
    assert (results / "report.html").is_file()
