"""The batch's progress: a bar with done/total, elapsed and time left on a terminal; plain lines in a pipe."""

from __future__ import annotations

import io
import re

import pytest

from grader.instructor import display
from grader.instructor.display import BatchProgress, clock
from grader.instructor.submission_grade import SubmissionGrade


class Clock:
    """time.monotonic, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> Clock:
    now = Clock()
    monkeypatch.setattr(display.time, "monotonic", now)
    return now


def _grade(name: str, problem: str = "") -> SubmissionGrade:
    return SubmissionGrade(name, [], 2.5, problem)


@pytest.mark.parametrize("seconds, text", [(0, "0:00"), (7.4, "0:07"), (65, "1:05"), (3725, "1:02:05")])
def test_clock(seconds: float, text: str) -> None:
    assert clock(seconds) == text


def test_piped_progress_is_one_plain_line_per_submission_with_the_time_left(fake_time: Clock) -> None:
    out = io.StringIO()
    with BatchProgress(4, out, live=False) as progress:
        progress.on_start("ada")
        fake_time.now += 10
        progress.on_result(_grade("ada"))
        progress.on_start("bo")
        fake_time.now += 10
        progress.on_result(_grade("bo", "bo.zip is not a readable zip archive\nmore"))
    lines = out.getvalue().splitlines()
    assert lines == [
        "[1/4] ada: 0/0 in 2.5s  (elapsed 0:10, about 0:30 left)",
        "[2/4] bo: 0/0 in 2.5s  bo.zip is not a readable zip archive  (elapsed 0:20, about 0:20 left)",
    ]
    assert "\033" not in out.getvalue() and "\r" not in out.getvalue()


def test_a_terminal_gets_a_bar_redrawn_in_place(fake_time: Clock) -> None:
    out = io.StringIO()
    with BatchProgress(4, out, live=True) as progress:
        progress.on_start("ada")
        progress.on_start("bo")
        assert out.getvalue().endswith("[" + "." * display.BAR_WIDTH + "] 0/4   0%  elapsed 0:00  grading ada, bo")
        fake_time.now += 30
        progress.on_result(_grade("ada"))
        screen = out.getvalue()
        assert "\r\033[K[1/4] ada: 0/0 in 2.5s\n" in screen
        bar = screen.rsplit("\r\033[K", 1)[1]
        assert re.fullmatch(r"\[#{6}\.{18}\] 1/4  25%  elapsed 0:30, about 1:30 left  grading bo", bar), bar
    assert out.getvalue().endswith("\r\033[K")  # the bar is wiped at the end


def test_the_ticker_keeps_the_clock_moving_while_a_submission_grades(
    fake_time: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(display, "TICK_S", 0.01)
    out = io.StringIO()
    with BatchProgress(2, out, live=True) as progress:
        progress.on_start("slow")
        fake_time.now += 75
        for _ in range(500):
            if "elapsed 1:15" in out.getvalue():
                break
            progress._stop.wait(0.01)
    assert "elapsed 1:15  grading slow" in out.getvalue()
