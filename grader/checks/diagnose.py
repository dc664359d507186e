"""Turns the raw outcome of a failed run into a verdict a student can act on.

Which rank failed first, how (an exception, a signal, an early exit, a hang), and the student's
own line it was on: from the report's traceback, or from the stack the rank dumped when the
grader stopped it or when it crashed.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

from grader.engine import RankOutcome, RunResult

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)', re.M)
_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+.*$", re.M)
_GRADER_PARTS = ("/grader/engine/", "/grader/checks/", "<frozen ", "/runpy.py")

_SIGNAL_MEANING = {  # by name: Windows has neither SIGKILL nor SIGBUS
    "SIGABRT": "aborted (SIGABRT); inside gloo this is most likely a collective called with "
    "mismatched tensor shapes or dtypes on different ranks",
    "SIGSEGV": "crashed with a segmentation fault (SIGSEGV)",
    "SIGKILL": "was killed (SIGKILL), possibly for running out of memory",
    "SIGBUS": "crashed with a bus error (SIGBUS)",
    "SIGFPE": "crashed with a floating point exception (SIGFPE)",
}


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _source_line(path: str, line: int) -> str:
    try:
        return Path(path).read_text(errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def stuck_frame(stack_dump: str, student_file: Path | None) -> str:
    """Where a rank was, from its last faulthandler dump: the student's innermost line if any."""
    if not stack_dump:
        return ""
    blocks = [
        [m.groupdict() for m in _FRAME.finditer(block)]
        for block in reversed(_THREAD_HEADER.split(stack_dump))
    ]
    blocks = [frames for frames in blocks if frames]
    student = str(student_file.resolve()) if student_file else None
    chosen = next((f for frames in blocks for f in frames if f["file"] == student), None)
    if chosen is None and blocks:
        chosen = next((f for f in blocks[0] if not any(p in f["file"] for p in _GRADER_PARTS)), None)
    if chosen is None:
        return ""
    code = _source_line(chosen["file"], int(chosen["line"]))
    name = Path(chosen["file"]).name
    return f"{name}:{chosen['line']} in {chosen['function']}()" + (f": `{code}`" if code else "")


def student_line(error: dict[str, Any]) -> str:
    frames = error.get("student_frames") or []
    if not frames:
        return ""
    frame = frames[-1]
    return f"{Path(frame['file']).name}:{frame['line']} in {frame['function']}(): `{frame['code']}`"


def where(outcome: RankOutcome, student_file: Path | None) -> str:
    """The student's line a rank was on when it failed, or when it was stopped or crashed."""
    return student_line(outcome.error or {}) or stuck_frame(outcome.stack_dump, student_file)


def _traceback(error: dict[str, Any]) -> str:
    """The student's frames first (where to look), then the full traceback."""
    frames = error.get("student_frames") or []
    lines = [f"  your code: {Path(f['file']).name}:{f['line']} in {f['function']}(): {f['code']}" for f in frames]
    return "\n".join([*lines, error.get("traceback", "").rstrip()])


MEMORY_LIMIT = "was killed for going over the memory limit of the sandbox it ran in (all of the submission's processes together)"


def _describe(outcome: RankOutcome, student_file: Path | None, deadline: float,
              memory_exceeded: bool = False) -> tuple[str, str]:
    """(one-line summary, details) for a rank that did not report cleanly."""
    rank = f"rank {outcome.rank}"
    error = outcome.error
    if error is not None:
        where = student_line(error)
        summary = f"{rank} raised {error['type']}: {error['message']}".rstrip(": ")
        return summary + (f"\n  at {where}" if where else ""), _traceback(error)
    where = stuck_frame(outcome.stack_dump, student_file)
    at = f"\n  it was at {where}" if where else ""
    if outcome.stopped == "deadline":
        return f"{rank} did not finish within the {deadline:g} s deadline (a hang?){at}", outcome.stack_dump
    if outcome.stopped == "peer failure":
        return f"{rank} was stopped because another rank had failed{at}", outcome.stack_dump
    if outcome.status is not None and outcome.status < 0:
        name = _signal_name(-outcome.status)
        if name == "SIGKILL" and memory_exceeded:
            return f"{rank} {MEMORY_LIMIT}{at}", outcome.stack_dump
        return f"{rank} {_SIGNAL_MEANING.get(name, f'died from {name}')}{at}", outcome.stack_dump
    if outcome.report_problem and outcome.report_problem != "no report":
        return f"{rank} sent a damaged report ({outcome.report_problem})", ""
    code = outcome.status
    why = " (does the code call sys.exit() or os._exit()?)" if code == 0 else ""
    return f"{rank} exited with code {code} before reporting{why}{at}", ""


def failure_verdict(result: RunResult, student_file: Path | None, stage: str = "") -> dict[str, Any] | None:
    """None if every rank reported without error; else the fields of a failing Verdict."""
    failing = [r for r in result.ranks if not r.ok]
    if not failing:
        return None
    errors = [r.error for r in failing if r.error]
    stub = next((e for e in errors if e.get("not_implemented")), None)
    if stub is not None:
        function = (stub.get("student_frames") or [{}])[-1].get("function", "a function")
        return {"status": "failed", "message": f"not implemented yet: {function}() still raises NotImplementedError"}
    load = next((e for e in errors if e.get("student_load_error")), None)
    if load is not None:
        message = load.get("grader_message") or "your file could not be loaded"
        first = f"{load['type']}: {load['message']}" if load.get("grader_message") else load["message"]
        return {"status": "error", "message": f"{message}: {first}".rstrip(": "), "details": _traceback(load)}
    # The root cause is a rank that failed by itself, not one stopped because of another.
    causes = [r for r in failing if r.stopped != "peer failure"] or failing
    first = causes[0]
    summary, details = _describe(first, student_file, result.job.deadline, result.memory_exceeded)
    sections = []
    for outcome in result.ranks:
        if outcome is not first and not outcome.ok:
            sections.append(_describe(outcome, student_file, result.job.deadline)[0])
    for outcome in failing:
        if outcome.output.strip():
            sections.append(f"--- output of rank {outcome.rank} ---\n{outcome.output.rstrip()}")
    prefix = f"{stage}: " if stage else ""
    return {
        "status": "failed",
        "message": prefix + summary,
        "details": "\n".join(filter(None, [details, *sections])),
    }
