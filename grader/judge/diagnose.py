"""Turns the raw outcome of a failed run into a verdict a student can act on.

Which rank failed first, how (an exception, a signal, an early exit, a hang), and the student's
own line it was on: from the report's traceback, or from the stack the rank dumped when the
grader stopped it or when it crashed.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.engine import RankOutcome, RunResult
from grader.engine.collectives import MISMATCH
from grader.engine.rank_runtime import IMPORT_CALLS
from grader.judge.explain import error_chain, explain
from grader.judge.phases import phase
from grader.judge.verdict import Verdict
from grader.judge.wording import ELLIPSIS, shorten

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)', re.M)
_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+.*$", re.M)
_GRADER_PARTS = ("/grader/engine/", "/grader/checks/", "<frozen ", "/runpy.py")
_WATCH_SOURCE = str(Path("grader", "engine", "collectives.py"))

_SIGNAL_MEANING = {  # by name: Windows has neither SIGKILL nor SIGBUS
    "SIGABRT": "aborted (SIGABRT); inside gloo this is most likely a collective called with "
    "mismatched tensor shapes or dtypes on different ranks",
    "SIGSEGV": "crashed with a segmentation fault (SIGSEGV)",
    "SIGKILL": "was killed (SIGKILL), possibly for running out of memory",
    "SIGBUS": "crashed with a bus error (SIGBUS)",
    "SIGFPE": "crashed with a floating point exception (SIGFPE)",
}


NOT_IMPLEMENTED = "not implemented yet"  # how a check of an untouched stub opens (the class report counts it)


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


def _is_collective_watch(frames: list[dict[str, str]]) -> bool:
    """The grader's own thread that watches a rank's collectives (collectives.py), never where a rank is."""
    return any(f["function"] == "_watching" and f["file"].endswith(_WATCH_SOURCE) for f in frames)


def stuck_frame(stack_dump: str, student_file: Path | None) -> str:
    """Where a rank was, from its last faulthandler dump: the student's innermost line if any."""
    if not stack_dump:
        return ""
    blocks = [[m.groupdict() for m in _FRAME.finditer(block)] for block in reversed(_THREAD_HEADER.split(stack_dump))]
    blocks = [frames for frames in blocks if frames and not _is_collective_watch(frames)]
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


_TRACEBACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+')
GRADER_FRAMES_HIDDEN = "(frames of the grader and of libraries are hidden: -v shows them)"


def is_grader_frame(filename: str) -> bool:
    return any(part in filename for part in _GRADER_PARTS)


def _is_library_frame(filename: str) -> bool:
    return "/site-packages/" in filename or "/lib/python3" in filename


def student_traceback(text: str) -> str:
    """A traceback without the grader's frames (workers, runtime, import machinery), and with the
    library frames between the student's call and the one that raised said in one line: where the
    student must look. Chained exceptions stay; -v shows everything."""
    blocks: list[tuple[str, list[str]]] = []  # (the frame's file, or "" for any other line; its lines)
    for line in text.rstrip().splitlines():
        frame = _TRACEBACK_FRAME.match(line)
        if frame:
            blocks.append((frame["file"], [line]))
        elif line.startswith("    ") and blocks and blocks[-1][0]:
            blocks[-1][1].append(line)  # the frame's code and caret lines
        else:
            blocks.append(("", [line]))
    kept: list[str] = []
    hidden, shown_frame = 0, False  # frames left out since the last one shown, of this traceback
    for index, (filename, lines) in enumerate(blocks):
        last_frame = index + 1 == len(blocks) or not blocks[index + 1][0]
        if filename and (is_grader_frame(filename) or (_is_library_frame(filename) and not last_frame)):
            hidden += 1
            continue
        if hidden and filename and shown_frame:
            kept.append(f"  ... {hidden} frame(s) of libraries")
        hidden, shown_frame = 0, bool(filename)
        kept += lines
    return "\n".join(kept + ([GRADER_FRAMES_HIDDEN] if len(kept) < len(text.rstrip().splitlines()) else []))


def rank_phrase(ranks: Sequence[int], world_size: int) -> str:
    """ "rank 2", "ranks 1-3", "every rank": the same words whatever W, where that is true."""
    ranks = sorted(ranks)
    if world_size > 1 and len(ranks) == world_size:
        return "every rank"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _with_subject(subject: str, predicate: str) -> str:
    plural = subject.startswith("ranks ")
    return f"{subject} {'were' + predicate[3:] if plural and predicate.startswith('was ') else predicate}"


MEANING_PREFIX = "what this error means here: "  # before a known torch error's meaning (torch_errors.toml)


def meaning_line(error: dict[str, Any] | None) -> str:
    """The line that says what a known torch error means here (torch_errors.toml), or ""."""
    known = explain(error)
    return f"\n  {MEANING_PREFIX}{known.meaning}" if known else ""


# Characters of a rank's error message a verdict quotes: the engine caps a report's message without regard to
# words (grader/engine/supervisor.py), so the judge cuts first, at a word boundary; the traceback keeps it whole.
QUOTED_ERROR_CHARS = 4000

PHASE_PREFIX = "phase: "  # before what the rank was doing when it raised (grader/judge/phases.py)
QUOTED_ERROR_LINES = 4  # of a rank's error message a verdict quotes: the rest is in the traceback, said once


def phase_line(error: dict[str, Any] | None) -> str:
    """The line that says the phase a rank raised in ("the backward pass, after 2 optimizer steps"), or ""."""
    said = phase(error)
    return f"\n  {PHASE_PREFIX}{said}" if said else ""


def quoted_error(message: str) -> str:
    """A rank's error message as a verdict quotes it: torch's own first error, that is its first paragraph (DTensor
    adds "Sharding propagation failed for ..." after a blank line) and at most its first lines, cut at a word;
    ELLIPSIS where cut. The whole message ends the traceback, in the details."""
    text = message.strip()
    lines = text.split("\n\n", 1)[0].splitlines()[:QUOTED_ERROR_LINES]
    quoted = shorten("\n".join(lines).rstrip(), QUOTED_ERROR_CHARS)
    if quoted != text and not quoted.endswith(ELLIPSIS):
        quoted = quoted.rstrip(" ,;:.") + ELLIPSIS
    return quoted


MEMORY_LIMIT = (
    "was killed for going over the memory limit of the sandbox it ran in (all of the submission's processes together)"
)


def _describe(
    outcome: RankOutcome, student_file: Path | None, deadline: float, memory_exceeded: bool = False
) -> tuple[str, str]:
    """(what happened to a rank that did not report cleanly, without naming it; its traceback or stack)."""
    error = outcome.error
    if error is not None:
        where = student_line(error)
        summary = f"raised {error['type']}: {quoted_error(str(error['message']))}".rstrip(": ")
        at = f"\n  at {where}" if where else ""
        return summary + at + phase_line(error) + meaning_line(error), error.get("traceback", "")
    where = stuck_frame(outcome.stack_dump, student_file)
    at = f"\n  it was at {where}" if where else ""
    if outcome.stopped == "deadline":
        return f"did not finish within the {deadline:g} s deadline (a hang?){at}", outcome.stack_dump
    if outcome.stopped == "peer failure":
        return f"was stopped because another rank had failed{at}", outcome.stack_dump
    if outcome.status is not None and outcome.status < 0:
        name = _signal_name(-outcome.status)
        if name == "SIGKILL" and memory_exceeded:
            return f"{MEMORY_LIMIT}{at}", outcome.stack_dump
        return f"{_SIGNAL_MEANING.get(name, f'died from {name}')}{at}", outcome.stack_dump
    if outcome.report_problem and outcome.report_problem != "no report":
        return f"sent a damaged report ({outcome.report_problem})", ""
    code = outcome.status
    why = " (does the code call sys.exit() or os._exit()?)" if code == 0 else ""
    return f"exited with code {code} before reporting{why}{at}", ""


# What a rank's collective raises when a peer's process is gone or never comes: the peer's failure seen
# from the other end of a gloo/c10d connection, not a mistake of the rank that raised it.
_ECHOES = tuple(  # most telling first: the phrase a verdict quotes
    re.compile(pattern)
    for pattern in (
        r"Connection (?:reset|closed) by peer",
        r"Broken pipe",
        r"Ranks? [\d, ]+ failed to pass monitoredBarrier",
        r"Timed out waiting",
        r"Socket Timeout",
        r"ECONNRESET|EPIPE",
        r"(?:Read|Write) error",
        r"(?:recv|send)Bytes",
        r"ProcessGroupGloo.*(?:[Rr]ead|[Ww]rite)",
        r"gloo/transport/tcp",
    )
)


def echo_phrase(outcome: RankOutcome) -> str:
    """The words of a rank's error that say it lost a peer ("Connection reset by peer"), or "" when
    the rank failed by itself."""
    return error_echo_phrase(outcome.error)


def error_echo_phrase(error: dict[str, Any] | None) -> str:
    """The same, for a reported error (a rank's, or a process's under torchrun)."""
    texts = [f"{link['type']}: {link['message']}" for link in error_chain(error)]
    for pattern in _ECHOES:
        found = next((m for m in map(pattern.search, texts) if m), None)
        if found:
            return found[0]
    return ""


def _is_echo(outcome: RankOutcome) -> bool:
    return outcome.stopped == "peer failure" or bool(echo_phrase(outcome))


def _their_error(subject: str, phrase: str) -> str:
    """'rank 0's error, "Broken pipe", is' / 'the errors of ranks 0-2, "Broken pipe", are'."""
    if subject.startswith(("ranks", "every")):
        return f'the errors of {subject}, "{phrase}", are'
    return f'{subject}\'s error, "{phrase}", is'


def _echo_sentence(echoes: Sequence[RankOutcome], causes: Sequence[int], world_size: int) -> str:
    """One sentence for the ranks whose connection errors only repeat another rank's failure."""
    by_phrase: dict[str, list[int]] = {}
    for outcome in echoes:
        by_phrase.setdefault(echo_phrase(outcome), []).append(outcome.rank)
    cause = rank_phrase(causes, world_size)
    return "\n".join(
        f"{_their_error(rank_phrase(ranks, world_size), phrase)} the echo of {cause}'s failure above: a "
        "collective loses its connection, or waits in vain, once a peer has failed (the echo in full: -v)"
        for phrase, ranks in by_phrase.items()
    )


def _grouped(outcomes: Sequence[RankOutcome], describe: Any) -> list[tuple[list[int], str, str]]:
    """Ranks that failed the same way, said once: (ranks, what happened, the first one's details)."""
    groups: dict[str, tuple[list[int], str]] = {}
    for outcome in outcomes:
        predicate, details = describe(outcome)
        groups.setdefault(predicate, ([], details))[0].append(outcome.rank)
    return [(ranks, predicate, details) for predicate, (ranks, details) in groups.items()]


def _outputs(outcomes: Sequence[RankOutcome]) -> list[str]:
    """What the failing ranks printed; identical output from several ranks shown once."""
    by_text: dict[str, list[int]] = {}
    for outcome in outcomes:
        if outcome.output.strip():
            by_text.setdefault(outcome.output.rstrip(), []).append(outcome.rank)
    return [f"--- output of {rank_phrase(ranks, 0)} ---\n{text}" for text, ranks in by_text.items()]


def _amount(numel: int, dtype: str) -> str:
    """ "4 floats", "1 float", "3 int64 values" """
    if dtype == "float32":
        return f"{numel} float{'s' if numel != 1 else ''}"
    return f"{numel} {dtype} value{'s' if numel != 1 else ''}"


def _call_words(call: dict[str, Any], student_file: Path | None) -> str:
    """What one rank did at the mismatched call: "called broadcast from rank 1 (4 floats) at x.py:45"."""
    if "returned" in call:
        function = call["returned"]
        return f"had already returned from {function}" if function else "had already finished"
    op = str(call.get("op", "?"))
    root, numel, dtype, line = call.get("root"), call.get("numel"), call.get("dtype"), call.get("line")
    words = f"called {op}()" if op == "barrier" else f"called {op}"
    if isinstance(root, int):
        words += f" {'from' if op in ('broadcast', 'scatter') else 'to'} rank {root}"
    if isinstance(numel, int) and isinstance(dtype, str):
        words += f" ({_amount(numel, dtype)})"
    name = student_file.name if student_file else "your file"
    return words + (f" at {name}:{line}" if isinstance(line, int) and line > 0 else " in the grader's code")


def _is_call(call: Any) -> bool:
    return isinstance(call, dict) and isinstance(call.get("rank"), int)


def collective_mismatch(result: RunResult) -> dict[str, Any] | None:
    """The collective mismatch a rank found (grader/engine/collectives.py), the one that names the most
    ranks; None when no rank found one. Reports come from code under test: a malformed one is ignored."""
    found: list[dict[str, Any]] = []
    for outcome in result.ranks:
        fact = outcome.facts.get(MISMATCH)
        if isinstance(fact, dict) and isinstance(fact.get("calls"), list) and all(map(_is_call, fact["calls"])):
            found.append(fact)
    return max((fact for fact in found if fact["calls"]), key=lambda fact: len(fact["calls"]), default=None)


def mismatch_verdict(fact: dict[str, Any], result: RunResult, student_file: Path | None, prefix: str = "") -> Verdict:
    """ "ranks called different collectives: rank 0 called barrier() at ex03_train_ddp.py:41, rank 1 had
    already returned from train_ddp": each rank's call, or its absence, at the first call that differs."""
    world_size = len(result.ranks)
    by_words: dict[str, list[int]] = {}
    for call in sorted(fact["calls"], key=lambda c: c["rank"]):
        by_words.setdefault(_call_words(call, student_file), []).append(call["rank"])
    said = ", ".join(f"{rank_phrase(ranks, 0)} {words}" for words, ranks in by_words.items())
    size = fact.get("group_size")
    group = f" on a group of {size} ranks" if isinstance(size, int) and size != world_size else ""
    message = (
        f"ranks called different collectives{group}: {said}\n  every rank of a group makes the same collective "
        "calls, in the same order, with the same root, sizes and dtypes; otherwise they wait for each other "
        "until the timeout"
    )
    lines = [
        f"rank {c['rank']}: {student_file.name if student_file else ''}:{c['line']} in {c.get('function', '?')}()"
        + (f": `{c['code']}`" if c.get("code") else "")
        for c in fact["calls"]
        if isinstance(c.get("line"), int) and c["line"] > 0
    ]
    raw = [
        _with_subject(f"rank {o.rank}", _describe(o, student_file, result.job.deadline)[0])
        for o in result.ranks
        if not o.ok
    ]
    return Verdict(
        "failed",
        prefix + message,
        "\n".join(lines),
        verbose_details="\n".join([*lines, "what each rank that failed reported:", *raw, *_outputs(result.ranks)]),
    )


def failure_verdict(result: RunResult, student_file: Path | None, stage: str = "") -> Verdict | None:
    """None if every rank reported without error; else the verdict that fails the check.

    `details` holds the student's frames only; `verbose_details` (shown with -v) the full tracebacks.
    """
    failing = [r for r in result.ranks if not r.ok]
    if not failing:
        return None
    errors = [r.error for r in failing if r.error]
    stub = next((e for e in errors if e.get("not_implemented")), None)
    if stub is not None:
        function = (stub.get("student_frames") or [{}])[-1].get("function", "a function")
        return Verdict("failed", f"{NOT_IMPLEMENTED}: {function}() still raises NotImplementedError")
    load = next((e for e in errors if e.get("student_load_error")), None)
    if load is not None:
        message = load.get("grader_message") or "your file could not be loaded"
        first = f"{load['type']}: {load['message']}" if load.get("grader_message") else load["message"]
        full = load.get("traceback", "")
        return Verdict("error", f"{message}: {first}".rstrip(": "), student_traceback(full), verbose_details=full)
    mismatch = collective_mismatch(result)
    if mismatch is not None:
        return mismatch_verdict(mismatch, result, student_file, f"{stage}: " if stage else "")
    world_size = len(result.ranks)
    deadline = result.job.deadline
    # The root cause is a rank that failed by itself, not one stopped because of another, nor one whose
    # collective lost its connection to a failed peer (an echo).
    causes = [r for r in failing if not _is_echo(r)] or failing
    echoes = [r for r in failing if r not in causes and r.error is not None]
    groups = _grouped(causes, lambda o: _describe(o, student_file, deadline, result.memory_exceeded))
    stopped = [r for r in failing if r not in causes and r not in echoes]

    def describe_stopped(outcome: RankOutcome) -> tuple[str, str]:
        return _describe(outcome, student_file, deadline)

    groups += _grouped(stopped, describe_stopped)
    (ranks, predicate, first_details), others = groups[0], groups[1:]
    sentences = [_with_subject(rank_phrase(r, world_size), p) for r, p, _ in others]
    echo = f"\n{_echo_sentence(echoes, [r.rank for r in causes], world_size)}" if echoes else ""
    echoed = [_with_subject(rank_phrase(r, world_size), p) for r, p, _ in _grouped(echoes, describe_stopped)]
    outputs = _outputs(failing)
    prefix = f"{stage}: " if stage else ""
    known = next((k for k in (explain(r.error) for r in causes if r.rank in ranks) if k), None)
    return Verdict(
        "failed",
        prefix + _with_subject(rank_phrase(ranks, world_size), predicate) + echo,
        "\n".join(filter(None, [student_traceback(first_details), *sentences, *outputs])),
        hint=known.hint if known else None,
        verbose_details="\n".join(filter(None, [first_details.rstrip(), *sentences, *echoed, *outputs])),
    )


def import_calls(runs: Sequence[RunResult], student_file: Path, names: Sequence[str]) -> dict[str, int]:
    """The graded functions the student's file itself called while being imported (name -> line of
    the top-level call): reported by the ranks, or seen in the stack of a rank stopped mid-import."""
    found: dict[str, int] = {}
    student = str(student_file)
    for result in runs:
        for outcome in result.ranks:
            reported = outcome.facts.get(IMPORT_CALLS)
            for name, line in reported.items() if isinstance(reported, dict) else ():
                if name in names and isinstance(line, int):
                    found.setdefault(name, line)
            frames = [m.groupdict() for m in _FRAME.finditer(outcome.stack_dump) if m["file"] == student]
            top = next((int(f["line"]) for f in frames if f["function"] == "<module>"), None)
            called = next((f["function"] for f in frames if f["function"] in names), None)
            if top is not None and called is not None:
                found.setdefault(called, top)
    return found


def test_call_message(calls: dict[str, int], student_file: Path) -> str:
    """What a test call left at the top level of the file does, and where it belongs instead."""
    where = "; ".join(f"{student_file.name}:{line} calls {name}()" for name, line in sorted(calls.items()))
    return (
        f"test call at import: {where}, so every rank ran it while the grader imported your code, before "
        "the check called it (what follows may come from that call).\n  Move the call out of the graded "
        'code: to a cell not tagged `exercise` (notebook), or under `if __name__ == "__main__":` (.py).'
    )
