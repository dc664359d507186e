"""What one grading needs (`GradingPlan`), built once from the command line by `grader check`, `watch` and
`grade` alike; the judge's `GradeOptions` are derived from it here and nowhere else.

Where the grading runs (which engine, warm or not, in which sandbox) is grader/grading_engines.py's.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from grader.judge.api import DEFAULT_DEADLINE_S
from grader.judge.runner import ALL_CHECKS, PUBLIC_CHECKS, GradeOptions


class PlanError(Exception):
    """A grading option out of range on the command line: reported in one line, exit code 2."""


@dataclass(frozen=True)
class GradingPlan:
    backend: str = "gloo"
    world_sizes: tuple[int, ...] | None = None  # None: each check's own (catalog)
    deadline: float = DEFAULT_DEADLINE_S  # seconds for one run of the ranks
    hidden: bool = False  # the hidden checks too: instructors, and the reference solutions
    seed: int | None = None  # the grading's random inputs; None: drawn per exercise (a check) or per batch
    launcher: str | None = None  # "fork", "portable" or "torchrun"; None: the platform's (or $GRADER_LAUNCHER)
    jobs: int = 1  # submissions graded at once (a batch)
    timeout: float = 120.0  # seconds one submission may take in all (a batch)

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, hidden: bool) -> GradingPlan:
        """The plan of a `check`, `watch` or `grade` command line (options a command lacks keep their default)."""
        check_counts(args)
        launcher = getattr(args, "launcher", None)
        return cls(
            backend=args.backend,
            world_sizes=(args.world_size,) if args.world_size else None,
            deadline=args.deadline,
            hidden=hidden,
            launcher=None if launcher == "grader" else launcher,  # `check`'s name for the platform's own
            jobs=getattr(args, "jobs", cls.jobs),
            timeout=getattr(args, "timeout", cls.timeout),
        )

    def grade_options(self) -> GradeOptions:
        """What the judge grades each exercise with."""
        return GradeOptions(
            world_sizes=self.world_sizes,
            backend=self.backend,
            deadline=self.deadline,
            visibilities=ALL_CHECKS if self.hidden else PUBLIC_CHECKS,
            seed=self.seed,
        )


def check_counts(args: argparse.Namespace) -> None:
    """-j and --world-size, where the command has them (`grader slurm` passes them on to its tasks)."""
    if getattr(args, "jobs", 1) < 1:
        raise PlanError("-j must be at least 1")
    if args.world_size is not None and args.world_size < 1:
        raise PlanError("--world-size must be at least 1")
