"""The class report's figures as PNG data URIs, drawn with matplotlib when the `plots` extra is there.

Figures are built on matplotlib's object API with the Agg canvas (no pyplot, no global state, no
display needed), and embedded in the page so it opens anywhere without a network.
"""

from __future__ import annotations

import base64
import importlib.util
import io

from grader.instructor.class_stats import ClassSummary

HISTOGRAM_COLOR = "#2a6fb0"  # the score histogram's bars, in the figure and in the plain table alike
RATE_COLOR = "#3a9a5b"  # the pass-rate bars
DPI = 100


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _data_uri(figure) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buffer = io.BytesIO()
    FigureCanvasAgg(figure).print_png(buffer)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def histogram(summary: ClassSummary) -> str:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=(7, 3.2), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    bins = summary.histogram
    axes.bar(
        [b.low for b in bins],
        [b.count for b in bins],
        width=[b.high - b.low for b in bins],
        align="edge",
        color=HISTOGRAM_COLOR,
        edgecolor="white",
        linewidth=1,
    )
    axes.set_xlim(0, bins[-1].high if bins else 1)
    axes.set_xlabel(f"score (out of {summary.max_score:g})")
    axes.set_ylabel("submissions")
    if isinstance(locator := axes.yaxis.get_major_locator(), MaxNLocator):  # the default: an AutoLocator
        locator.set_params(integer=True)
    axes.spines[["top", "right"]].set_visible(False)
    return _data_uri(figure)


def pass_rates(summary: ClassSummary) -> str:
    from matplotlib.figure import Figure

    rows = summary.exercises
    figure = Figure(figsize=(7, 0.35 * len(rows) + 0.9), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    labels = [row.exercise for row in rows][::-1]
    axes.barh(labels, [100 * row.rate for row in rows][::-1], color=RATE_COLOR)
    axes.set_xlim(0, 100)
    axes.set_xlabel("submissions passing every check (%)")
    axes.spines[["top", "right"]].set_visible(False)
    return _data_uri(figure)
