"""How messages read (grader/judge/wording.py): the lint's rules on examples, `shorten` cutting at a word
boundary where the judge quotes an error, and ex17's count of whole tensors said against the model's.
tests/test_mistakes.py runs the lint over every message the named mistakes produce."""

from __future__ import annotations

import pytest

from grader.checks.ex17_dcp_reshard.checks import filled_whole
from grader.engine import Job, RankOutcome, RunResult
from grader.judge import wording
from grader.judge.diagnose import QUOTED_ERROR_CHARS, failure_verdict

GLOO = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:9102: Connection reset by peer. "
    "This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote "
    "worker before reporting an error."
)


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("rank 0 raised RuntimeError: Check the logs of the remote w; expected a ValueError", "a word cut short"),
        ("the logs of the remote wo, then", "a word cut short"),
        ("the message ends in the middle of a wo", "a word cut short"),
        ("a 8-stage pipeline", "'a' before 8: say 'an'"),
        ("A 11-rank ring", "'A' before 11: say 'an'"),
        ("a 18 GB model", "'a' before 18: say 'an'"),
        ("an 5-stage pipeline", "'an' before 5: say 'a'"),
        ("a eight-way split", "'a' before eight: say 'an'"),
        ("ranks 0-1 () failed", "a stray empty ()"),
        ("the first (of two ranks failed", "a '(' never closed"),
        ("the first of two) ranks failed", "a ')' that closes nothing open"),
        ('rank 0 said "hello and left', "an unbalanced double quote"),
        ("call `dist.barrier() and wait", "an unbalanced backtick"),
    ],
)
def test_what_reads_wrong(message: str, said: str) -> None:
    assert any(said in problem for problem in wording.problems(message)), wording.problems(message)


@pytest.mark.parametrize(
    "message",
    [
        "an 8-stage pipeline, an 11-rank ring, an 18 GB model, a 180-sample batch, a 1.5 s wait, a 2D mesh",
        "step when (i + 1) % k == 0; b = 8, lr = 0.1, a tp group, the dp size",
        "a batch of 4 micro-batch(es) from os.environ and nn.Linear; SUM is its default op",
        "a call in code keeps its own brackets: `f(x` and `g[0`",
        "every rank raised RuntimeError: Spec(f32[8](S(0)))) on DeviceMesh((2,)))\n  at ex14.py:9 in f(): `y = f(x)`",
        "the quote was cut here...",
    ],
)
def test_what_reads_right(message: str) -> None:
    """Real words, one-letter names, a/an by sound, code and a quoted error's own brackets pass."""
    assert wording.problems(message) == []


def test_shorten_cuts_at_a_word_boundary() -> None:
    short = wording.shorten(GLOO, 150)
    assert len(short) <= 150 and short.endswith(wording.ELLIPSIS)
    assert GLOO.startswith(short.removesuffix(wording.ELLIPSIS)) and GLOO[len(short) - 3] == " "
    assert wording.problems(f"rank 0 raised RuntimeError: {short}; expected a ValueError") == []
    assert wording.shorten("short enough", 150) == "short enough"


def test_shorten_cuts_inside_one_long_token() -> None:
    path = "/a/" + "x" * 300
    assert wording.shorten(path, 100) == path[:97] + wording.ELLIPSIS


def test_brief_keeps_a_values_brackets_closed() -> None:
    """A cut repr leaves brackets open ("[[0, {'rank': 0, ..."); brief elides inside them instead."""
    results = [[rank, {"rank": rank, "token": "token-42", "pid": 30384 + rank, "payload": "x" * 90}] for rank in (0, 1)]
    said = wording.brief(results)
    assert len(said) <= 200 and said.startswith("[[0, {") and said.endswith("}]]") and "..." in said
    assert wording.problems(f"the results are not fn's return values: {said}") == []
    assert wording.brief(list(range(1000))) == "[0, 1, 2, 3, ...]"


def test_a_rank_error_is_quoted_at_a_word_boundary() -> None:
    """The engine caps a reported message without regard to words; the verdict quotes less, cut between words."""
    long = "the tensor was too large to send " * 1000
    error = {"type": "RuntimeError", "message": long, "traceback": ""}
    result = RunResult(Job("w:f", 1), [RankOutcome(0, report={"facts": {}, "error": error}, status=0)], 1.0, False)
    verdict = failure_verdict(result, None)
    assert verdict is not None
    assert len(verdict.message) < QUOTED_ERROR_CHARS + 50 and verdict.message.endswith(wording.ELLIPSIS)
    assert verdict.message.removesuffix(wording.ELLIPSIS).split()[-1] in long.split()
    assert wording.problems(verdict.message) == []


SHAPES = {"inp.weight": (16, 8), "inp.bias": (16,), "out.weight": (1, 16), "out.bias": (1,)}


def test_ex17_counts_whole_tensors_as_the_ranks_do() -> None:
    """The ranks count whole tensors of more than one element: the whole model reads as all of it, with the
    one-element tensor left out named, not as one tensor missing."""
    assert filled_whole(0, 3, 160, SHAPES) == (
        "rank 0 asked dcp.load to fill 3 whole tensors (160 elements): all of the model's 3 tensors of more than "
        "one element (160 elements; out.bias, of one element, is not counted)"
    )
    assert filled_whole(1, 1, 128, SHAPES) == (
        "rank 1 asked dcp.load to fill 1 whole tensor (128 elements) of the model's 3 tensors of more than one "
        "element (160 elements; out.bias, of one element, is not counted)"
    )


@pytest.mark.parametrize(
    ("word", "said"),
    [
        ("8", "an 8"),
        ("2", "a 2"),
        ("11", "an 11"),
        ("180", "a 180"),
        ("int", "an int"),
        ("dict", "a dict"),
        ("OrderedDict", "an OrderedDict"),
        ("uint8", "a uint8"),
        ("unused", "an unused"),
    ],
)
def test_the_article_a_message_writes(word: str, said: str) -> None:
    """What checks write before a drawn number or a type's name ("a stage of an 8-stage pipeline")."""
    assert wording.article(word) == said
    assert wording.problems(f"{said}-stage pipeline") == []
