"""A check that cannot run because this torch lacks an API its exercise needs is skipped, with the reason.

The catalog names the torch APIs each exercise needs beyond torch.distributed's core (`apis`). When a
rank's error says one of them is missing (no such module, or a module without the name), the student's
code is not at fault: the check is skipped and says which API and how to get it. A name the catalog does
not list (a misspelt import, say) fails as any other error.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable

from grader.catalog import Exercise
from grader.engine import RunResult
from grader.judge.explain import error_chain
from grader.judge.verdict import Verdict

_ABSENT = (  # what Python says of a missing module or name, and the dotted name it gives
    (re.compile(r"No module named '([\w.]+)'"), "{0}"),
    (re.compile(r"cannot import name '(\w+)' from '([\w.]+)'"), "{1}.{0}"),
    (re.compile(r"module '([\w.]+)' has no attribute '(\w+)'"), "{0}.{1}"),
)


def absent_names(message: str) -> list[str]:
    """The dotted names an ImportError's or AttributeError's message says do not exist."""
    return [form.format(*match.groups()) for pattern, form in _ABSENT for match in pattern.finditer(message)]


def missing_api(results: Iterable[RunResult], apis: Iterable[str]) -> tuple[str, str] | None:
    """(the API, the name the error gave) for the first rank error that says an API in `apis` is missing."""
    wanted = tuple(apis)
    for result in results:
        for rank in result.ranks:
            for link in error_chain(rank.error):
                if link["type"] not in {"ModuleNotFoundError", "ImportError", "AttributeError"}:
                    continue
                for name in absent_names(link["message"]):
                    api = next((a for a in wanted if a == name or a.startswith(f"{name}.")), None)
                    if api is not None:
                        return api, name
    return None


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def skipped_if_api_missing(verdict: Verdict, used: Iterable[RunResult], exercise: Exercise) -> Verdict:
    """`verdict`, or a skip where it failed because this torch lacks one of the exercise's APIs."""
    if verdict.status not in {"failed", "error"} or not exercise.apis:
        return verdict
    found = missing_api(used, exercise.apis)
    if found is None:
        return verdict
    api, name = found
    return Verdict(
        "skipped",
        f"this torch ({_torch_version()}) has no {name}, and {exercise.id} needs {api}; install the "
        "torch the course is tested on (pip install torch==2.13.0). `grader doctor` lists every API the "
        "exercises need",
        verdict.details,
    )
