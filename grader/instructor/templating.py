"""One jinja2 environment for the instructor's generated files: shell scripts, the sbatch job and
the class report. Templates live in `templates/` as files; HTML ones autoescape, scripts do not and
quote what they insert with the `sh` filter instead. Jinja comments are `{## ... ##}`, because bash
uses `{#` itself (`${#array[@]}`)."""

from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).with_name("templates")


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
    )
    env.filters["sh"] = lambda value: shlex.quote(str(value))
    return env


def render(template: str, **values: object) -> str:
    return environment().get_template(template).render(**values)
