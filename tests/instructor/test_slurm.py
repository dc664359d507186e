"""`grader slurm`: the job array script it writes, and the errors it refuses with."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from grader.cli import main

from . import support


def _class_folder(tmp_path: Path, count: int) -> Path:
    folder = tmp_path / "submissions"
    for i in range(count):
        (folder / f"student{i:03d}").mkdir(parents=True)
    return folder


def slurm(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return support.run_grader(support.REPO, "slurm", *args, cwd=tmp_path)


def test_the_script_is_a_job_array_with_one_task_per_shard_and_a_dependent_merge(tmp_path: Path) -> None:
    subs = _class_folder(tmp_path, 60)
    done = slurm(tmp_path, str(subs), "--out", "grade.sbatch", "--gpus-per-task", "4", "--partition", "gpu")
    assert done.returncode == 0, done.stderr
    assert "60 submission(s) in 3 array task(s)" in done.stdout and "sbatch grade.sbatch" in done.stdout
    script = (tmp_path / "grade.sbatch").read_text()
    results = tmp_path / "graded"
    for line in (
        "#SBATCH --array=1-3",
        "#SBATCH --gpus-per-task=4",
        "#SBATCH --ntasks=1",
        "#SBATCH --partition=gpu",
        f"#SBATCH --output={results}/logs/shard-%a.log",
        f"export GRADER_COURSE={support.REPO}",
        f"SUBMISSIONS={subs}",
    ):
        assert f"\n{line}\n" in script, line
    found = re.search(r"\nsrun grader grade (.*\n.*)\n", script)
    assert found is not None, script
    srun = found[1]
    assert '"$SUBMISSIONS"/* --shard "$SLURM_ARRAY_TASK_ID/3" --backend nccl -j 1' in srun
    assert '--out "$RESULTS/shard-$SLURM_ARRAY_TASK_ID"' in srun
    merge = script[script.index('if [ "$SLURM_ARRAY_TASK_ID" = 1 ]') : script.index("\nfi\n")]
    assert '--dependency="afterany:$SLURM_ARRAY_JOB_ID"' in merge and "--partition=gpu" in merge
    assert f"--wrap='grader gradebook merge {results}/shard-* --out {results}/gradebook.csv'" in merge
    assert (results / "logs").is_dir()  # Slurm writes the tasks' logs there and would not make it
    assert subprocess.run(["bash", "-n", str(tmp_path / "grade.sbatch")]).returncode == 0


def test_options_are_passed_on_to_every_grade_and_the_time_limit_covers_the_shard(tmp_path: Path) -> None:
    subs = _class_folder(tmp_path, 10)
    done = slurm(
        tmp_path,
        str(subs),
        "--out",
        "job.sh",
        "--shards",
        "2",
        "--world-size",
        "2",
        "--exercises",
        "1,2",
        "-j",
        "2",
        "--timeout",
        "60",
        "--deadline",
        "5",
    )
    assert done.returncode == 0, done.stderr
    script = (tmp_path / "job.sh").read_text()
    assert "--gpus-per-task" not in script and "#SBATCH --array=1-2" in script
    options = r"--backend gloo -j 2 --timeout 60 --deadline 5 --seed (\d+) --world-size 2 --exercises "
    found = re.search(options + "ex01_process_group,ex02_data_sharding", script)
    assert found is not None, script  # one seed in the one command every task runs: the class on the same inputs
    again = slurm(tmp_path, str(subs), "--out", "again.sh", "--shards", "2")
    assert again.returncode == 0 and f"--seed {found[1]} " not in (tmp_path / "again.sh").read_text()  # drawn anew
    # a shard of 8 (1.5 x 5, rounded up), 2 at a time, 60 s each: 4 minutes, plus 10 of start-up
    assert "#SBATCH --time=00:14:00" in script
    done = slurm(tmp_path, str(subs), "--out", "job.sh", "--time", "01:30:00")
    assert done.returncode == 0 and "#SBATCH --time=01:30:00" in (tmp_path / "job.sh").read_text()


def _srun_line(script: Path) -> str:
    found = re.search(r"\nsrun grader grade (.*\n.*)\n", script.read_text())
    assert found is not None, f"no srun line in {script}"
    return found[1]


def test_the_tasks_grade_in_the_sandbox_asked_for_and_in_grade_s_default_otherwise(tmp_path: Path) -> None:
    """No option: the tasks grade as a plain `grader grade` does (--sandbox auto), so a job written
    without a thought for it still sandboxes the submissions."""
    subs = _class_folder(tmp_path, 3)
    done = slurm(tmp_path, str(subs), "--out", "job.sh")
    assert done.returncode == 0 and "sandbox" not in _srun_line(tmp_path / "job.sh") and not done.stderr
    done = slurm(tmp_path, str(subs), "--out", "job.sh", "--sandbox", "bubblewrap")
    assert done.returncode == 0 and "--sandbox bubblewrap" in _srun_line(tmp_path / "job.sh")
    done = slurm(tmp_path, str(subs), "--out", "job.sh", "--no-sandbox")
    assert done.returncode == 0 and "--no-sandbox" in _srun_line(tmp_path / "job.sh")
    assert "WARNING: grading without a sandbox" in done.stderr  # said when the job is written, not only in its logs


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus-per-task", "2"], "nccl needs one GPU per rank and the checks run up to 4 ranks"),
        (["--backend", "nccl"], "--gpus-per-task 4"),
        (["--time", "90 minutes"], "HH:MM:SS"),
        (["--shards", "0"], "--shards must be at least 1"),
        (["--exercises", "ex99"], "no exercise 'ex99'"),
    ],
)
def test_a_job_that_cannot_grade_right_is_refused(tmp_path: Path, args: list[str], message: str) -> None:
    done = slurm(tmp_path, str(_class_folder(tmp_path, 3)), "--out", "job.sh", *args)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "job.sh").exists()


def test_an_empty_or_missing_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for folder, message in (("empty", "holds no submissions"), ("nowhere", "is not a folder")):
        done = slurm(tmp_path, folder, "--out", "job.sh")
        assert done.returncode == 2 and message in done.stderr


def test_the_roster_is_passed_to_every_task_and_read_before_the_job_is_written(tmp_path: Path) -> None:
    subs = _class_folder(tmp_path, 3)
    (tmp_path / "roster.csv").write_text("Student,SIS Login ID\nAnn Lee,student000\n")
    done = slurm(tmp_path, str(subs), "--out", "job.sh", "--roster", "roster.csv")
    assert done.returncode == 0, done.stderr
    assert f"--roster {tmp_path / 'roster.csv'} " in _srun_line(tmp_path / "job.sh")  # absolute: tasks run anywhere
    (tmp_path / "bad.csv").write_text("Student,Score\nAnn,3\n")
    done = slurm(tmp_path, str(subs), "--out", "again.sh", "--roster", "bad.csv")
    assert done.returncode == 2 and "no column a student is known by" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "again.sh").exists()


def test_it_says_which_course_the_tasks_grade_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run outside any course, the installed one is used: said, with its path, never silently."""
    subs = _class_folder(tmp_path, 2)
    done = slurm(tmp_path, str(subs), "--out", "job.sh")
    assert f"the tasks grade with the course at {support.REPO} (set by GRADER_COURSE)" in done.stdout
    monkeypatch.delenv("GRADER_COURSE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", str(subs), "--out", "job.sh"]) == 0
    said = capsys.readouterr().out
    assert f"the tasks grade with the course at {support.REPO} (the course this grader was installed from, " in said
    assert f"since {tmp_path.resolve()} is in no course" in said
    assert f"export GRADER_COURSE={support.REPO}\n" in (tmp_path / "job.sh").read_text()
