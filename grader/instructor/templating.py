"""One jinja2 environment for the instructor's generated files: shell scripts, the sbatch job and
the class report. Templates live in `templates/` as files; HTML ones autoescape, scripts do not and
quote what they insert with the `sh` filter instead. Whatever a template inserts goes through
`_inert` too: a page shows control characters escaped, and a script refuses them, since a newline
would end the comment or the command it stands in. Jinja comments are `{## ... ##}`, because bash
uses `{#` itself (`${#array[@]}`)."""

from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path

import jinja2
from jinja2.nodes import EvalContext
from markupsafe import Markup

from grader.report.inert import is_one_line, printable

TEMPLATES = Path(__file__).with_name("templates")


class UnsafeValue(ValueError):
    """A value a script template cannot hold safely (a control character, a line break)."""


@jinja2.pass_eval_context
def _inert(context: EvalContext, value: object) -> object:
    if context.autoescape:
        if isinstance(value, Markup):
            return Markup(printable(value))
        return printable(value) if isinstance(value, str) else value
    if not is_one_line(str(value)):
        raise UnsafeValue(
            f"{str(value)!r} holds a control character or a line break, which a script cannot hold safely"
        )
    return value


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html.j2"]),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        comment_start_string="{##",
        comment_end_string="##}",
        finalize=_inert,
    )
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    return env


def render(template: str, **values: object) -> str:
    return environment().get_template(template).render(**values)
