"""The two kinds of names a verdict carries: the hint it points to and the cause it proves.

Both are plain strings at run time. As distinct types mypy refuses a bare str where one is expected,
so every name a check writes is spelled `HintName("...")` or `Cause("...")`, which `grader lint-course`
finds by AST wherever it stands (a keyword, a dict, a conditional, a positional argument) and checks:
a hint against the exercise's hints in catalog.toml, a cause against the course's vocabulary,
causes.toml beside this module. Names read from data files (hypotheses.toml, torch_errors.toml) are
converted where they are loaded, and the lint checks those files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, NewType, TypeAlias

HintName = NewType("HintName", str)  # a hint of the exercise, by its name in catalog.toml
Cause = NewType("Cause", str)  # a proven mistake, by its id in causes.toml
MaybeCause: TypeAlias = Cause | Literal[""]  # "" where the message names no proven cause

VOCABULARY = Path(__file__).with_name("causes.toml")
