"""`grader slurm`: a Slurm job array that grades a folder of submissions, and its merge step.

Slurm schedules; the grader only cuts the class into N deterministic shards (`--shard I/N`) and
joins their gradebooks. Array task I runs `srun grader grade SUBS/* --shard I/N` into its own
folder (`RESULTS/shard-I`); task 1 also submits the merge (`grader gradebook merge`) as a job that
waits for the whole array (`--dependency=afterany`: it runs even if a shard failed, and then names
what is missing). One file, one `sbatch` to submit it.

The submissions' own names never enter the script: the tasks find them with a quoted glob when they
run (dotglob: a name starting with a dot is a submission too; `grader grade` leaves out tools' leftovers,
naming each). The paths that do are quoted (`sh`), and one holding a control character or a line break is
refused (`templating.UnsafeValue`): in a comment or an #SBATCH line it would start a command of its own.
"""

from __future__ import annotations

import math
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.instructor.templating import render

SUBMISSIONS_PER_SHARD = 25  # the default split: about this many per array task
SLACK_S = 600  # added to a task's time limit for start-up and the engine's warm-up
MAX_TIME_S = 24 * 3600


@dataclass(frozen=True)
class SlurmJob:
    submissions_dir: Path  # absolute
    results_dir: Path  # absolute; shard I writes RESULTS/shard-I
    course: Path  # absolute: the course the tasks grade with (GRADER_COURSE)
    shards: int
    gpus_per_task: int
    cpus_per_task: int
    time_limit_s: int
    grade_options: tuple[str, ...] = ()  # passed on to every `grader grade` (backend, -j, timeouts, ...)
    partition: str | None = None
    account: str | None = None
    job_name: str = "grade"
    grader_bin: Path | None = field(default=None)  # a folder put first on PATH so `grader` is this grader


def default_shards(submissions: int) -> int:
    return max(1, math.ceil(submissions / SUBMISSIONS_PER_SHARD))


def time_limit(submissions: int, shards: int, timeout_s: float, jobs: int) -> int:
    """Enough for a shard of half again the mean size (hash shards vary) with every submission using
    its whole time limit, plus start-up; capped at one day."""
    per_shard = math.ceil(1.5 * submissions / shards)
    return min(MAX_TIME_S, int(math.ceil(per_shard / max(1, jobs)) * timeout_s) + SLACK_S)


def hms(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def grader_bin() -> Path | None:
    """The folder of this Python's `grader` script (a virtual environment's bin), else of the one on PATH."""
    here = Path(sys.executable).parent
    if (here / "grader").is_file():
        return here
    found = shutil.which("grader")
    return Path(found).parent if found else None


def merge_command(results_dir: Path) -> str:
    """The merge step: every shard's folder (a glob the shell expands when the step runs)."""
    results = shlex.quote(str(results_dir))
    return f"grader gradebook merge {results}/shard-* --out {shlex.quote(str(results_dir / 'gradebook.csv'))}"


def render_job(job: SlurmJob, script: Path) -> str:
    return render(
        "grade.sbatch.j2",
        job=job,
        script=script,
        time=hms(job.time_limit_s),
        merge_command=merge_command(job.results_dir),
        grade_options=" ".join(shlex.quote(o) for o in job.grade_options),
    )
