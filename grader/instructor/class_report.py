"""`OUT/report.html`: the class at a glance, one self-contained page (nothing loaded from a network).

The score histogram and the pass rate per exercise are matplotlib figures embedded as data URIs
when the `plots` extra is installed, and plain tables with bars drawn by CSS otherwise; everything
else (per check pass rates, the most common diagnoses and who made them, run times, submissions that
errored or timed out) is tables either way.

Names and messages come from students: the template autoescapes them, `templating` shows their
control characters escaped, and a message is cut to `MESSAGE_SHOWN` characters.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.catalog import Catalog
from grader.instructor import report_plots
from grader.instructor.class_stats import ClassSummary, summarize
from grader.instructor.display import clock
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.templating import render
from grader.report.inert import one_line

FILENAME = "report.html"
SIMILARITY_PAGE, SIMILARITY_FOLDER = "similarity.html", "similarity"  # what `grader similarity` writes beside it
START_MARK, END_MARK = "<!-- similarity -->", "<!-- /similarity -->"  # where its link goes (report.html.j2)
LINKED = re.compile(re.escape(START_MARK) + r"(?:.*?" + re.escape(END_MARK) + ")?", re.DOTALL)
DIAGNOSES_SHOWN = 25
NAMES_SHOWN = 12
MESSAGE_SHOWN = 500  # characters of a diagnosis or an error's message


Links = Sequence[tuple[str, str]]  # (submission, href) of each feedback page to send its student


def render_report(summary: ClassSummary, title: str, plots: bool | None = None, feedback: Links = ()) -> str:
    """The page; `plots` None draws figures when matplotlib is installed, False never does."""
    figures = {}
    if plots is not False and report_plots.available():
        figures = {"histogram": report_plots.histogram(summary), "pass_rates": report_plots.pass_rates(summary)}
    colors = {"histogram": report_plots.HISTOGRAM_COLOR, "rate": report_plots.RATE_COLOR}
    return render(
        "report.html.j2",
        s=summary,
        title=title,
        figures=figures,
        colors=colors,
        diagnoses=summary.diagnoses[:DIAGNOSES_SHOWN],
        names_shown=NAMES_SHOWN,
        message_shown=MESSAGE_SHOWN,
        clock=clock,
        written=time.strftime("%Y-%m-%d %H:%M"),
        feedback=feedback,
    )


def write_report(
    path: Path,
    catalog: Catalog,
    grades: Sequence[SubmissionGrade],
    title: str,
    wall_seconds: float | None = None,
    plots: bool | None = None,
    feedback: Links = (),
    keep_link: bool = False,
) -> Path:
    """`keep_link`: a page rewritten in place keeps the similarity link `grader similarity` put there (its pages
    lie beside it, and a regrade changes no code); a batch graded anew drops it, its code may have changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    page = render_report(summarize(catalog, grades, wall_seconds), title, plots, feedback)
    if keep_link and path.is_file():
        earlier = LINKED.search(path.read_text(encoding="utf-8", errors="replace"))
        if earlier is not None and earlier[0] != START_MARK:
            page = LINKED.sub(lambda _: earlier[0], page, count=1)
    path.write_text(page, encoding="utf-8")
    return path


class ClassReport:
    """`grader grade`'s sink of the class report: written once every submission is graded, from the grades in
    the order they were given (a batch stopped half-way leaves none: a part would pass for the class's)."""

    def __init__(
        self,
        path: Path,
        catalog: Catalog,
        title: str,
        names: Sequence[str],
        started: float,
        feedback: Callable[[Sequence[str]], Links] | None = None,
    ) -> None:
        self.path = path
        self._catalog = catalog
        self._title = title
        self._order = {name: i for i, name in enumerate(names)}
        self._started = started  # time.monotonic() when the batch began
        self._feedback = feedback  # the links to the submissions' feedback pages, once written
        self._grades: list[SubmissionGrade] = []
        self.seconds = 0.0  # the batch's wall time, once closed
        self.written: Path | None = None

    def on_start(self, name: str) -> None:
        pass

    def on_result(self, grade: SubmissionGrade) -> None:
        self._grades.append(grade)

    def close(self) -> None:
        self.seconds = time.monotonic() - self._started
        if len(self._grades) < len(self._order):
            return
        grades = sorted(self._grades, key=lambda g: self._order[g.name])
        try:  # every row is written by now: a report that fails loses the report alone
            links = self._feedback([g.name for g in grades]) if self._feedback else ()
            self.written = write_report(self.path, self._catalog, grades, self._title, self.seconds, feedback=links)
        except Exception as exc:
            print(
                f"grader: the class report could not be written: {type(exc).__name__}: {one_line(str(exc), 500)}",
                file=sys.stderr,
            )
