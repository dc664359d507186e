"""`OUT/report.html`: the class at a glance, one self-contained page (nothing loaded from a network).

The score histogram and the pass rate per exercise are matplotlib figures embedded as data URIs
when the `plots` extra is installed, and plain tables with bars drawn by CSS otherwise; everything
else (per check pass rates, the most common diagnoses and who made them, run times, submissions that
errored or timed out) is tables either way.

Names and messages come from students: the template autoescapes them, `templating` shows their
control characters escaped, and a message is cut to `MESSAGE_SHOWN` characters.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from grader.catalog import Catalog
from grader.instructor import report_plots
from grader.instructor.batch import SubmissionGrade
from grader.instructor.class_stats import ClassSummary, summarize
from grader.instructor.display import clock
from grader.instructor.templating import render

FILENAME = "report.html"
DIAGNOSES_SHOWN = 25
NAMES_SHOWN = 12
MESSAGE_SHOWN = 500  # characters of a diagnosis or an error's message


def render_report(summary: ClassSummary, title: str, plots: bool | None = None) -> str:
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
    )


def write_report(
    path: Path,
    catalog: Catalog,
    grades: Sequence[SubmissionGrade],
    title: str,
    wall_seconds: float | None = None,
    plots: bool | None = None,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(summarize(catalog, grades, wall_seconds), title, plots), encoding="utf-8")
    return path
