"""Reports held to their schema before a check reads them: a malformed fact fails, never passes.

A rank runs student code, so its report is untrusted even after the wire has decoded it safely: a key
may be missing, of another type, or one the worker never writes. `problems` compares a decoded value
with the TypedDict a worker declares (grader/engine/facts.py) and says, in one line each, what does not
fit. A check never sees facts that do not conform, so a default for a missing key or a loop over an
absent list cannot turn into a pass.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin, get_type_hints

import numpy as np

from grader.judge.wording import article

MAX_PROBLEMS = 5  # said per report: one malformed report is enough to fail, and a flood says nothing more


def problems(facts: object, schema: type, complete: bool = True) -> list[str]:
    """What in `facts` does not fit the TypedDict `schema`. `complete`: the worker ran to its end, so
    every required key must be there (a rank that raised reports only what it had recorded)."""
    found: list[str] = []
    _check(facts, schema, "the facts", found, complete)
    return found[:MAX_PROBLEMS]


def _check(value: object, expected: Any, where: str, found: list[str], complete: bool = True) -> None:
    if len(found) >= MAX_PROBLEMS:
        return
    origin, args = get_origin(expected), get_args(expected)
    if expected is Any or expected is object:
        return
    if origin in (Required, NotRequired):
        _check(value, args[0], where, found, complete)
    elif origin in (Union, types.UnionType):
        if not any(_fits(value, option) for option in args):
            found.append(f"{where} is {_describe(value)}, not {_name(expected)}")
    elif origin is Literal:
        if value not in args:
            found.append(f"{where} is {value!r}, not one of {', '.join(map(repr, args))}")
    elif typing.is_typeddict(expected):
        _check_typeddict(value, expected, where, found, complete)
    elif origin is list or origin is tuple:
        _check_sequence(value, expected, where, found)
    elif origin is dict:
        if not isinstance(value, dict):
            found.append(f"{where} is {_describe(value)}, not {_name(expected)}")
            return
        for key, item in value.items():
            _check(key, args[0], f"a key of {where}", found)
            _check(item, args[1], f"{where}[{key!r}]", found)
    elif not _fits_plain(value, expected):
        found.append(f"{where} is {_describe(value)}, not {_name(expected)}")


def _check_typeddict(value: object, schema: Any, where: str, found: list[str], complete: bool) -> None:
    if not isinstance(value, dict):
        found.append(f"{where} is {_describe(value)}, not a table of {schema.__name__}")
        return
    hints = get_type_hints(schema, include_extras=True)
    required = {key for key, hint in hints.items() if _required(hint, schema)} if complete else set()
    for key in sorted(required - value.keys()):
        found.append(f"{where} lack {key!r}" if where == "the facts" else f"{where} lacks {key!r}")
    for key in sorted(value.keys() - hints.keys(), key=str):
        found.append(f"{where} hold {key!r}, which {schema.__name__} does not have")
    for key in value.keys() & hints.keys():
        label = f"fact {key!r}" if where == "the facts" else f"{where}[{key!r}]"
        _check(value[key], hints[key], label, found, complete)


def _required(hint: Any, schema: Any) -> bool:
    """Whether a TypedDict key must be there. Read from the hints, not `__required_keys__`, which cannot see
    NotRequired in a module that postpones its annotations (`from __future__ import annotations`)."""
    if get_origin(hint) is NotRequired:
        return False
    return get_origin(hint) is Required or getattr(schema, "__total__", True)


def _check_sequence(value: object, expected: Any, where: str, found: list[str]) -> None:
    if not isinstance(value, list):  # the wire carries tuples as lists
        found.append(f"{where} is {_describe(value)}, not {_name(expected)}")
        return
    args = get_args(expected)
    if get_origin(expected) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            found.append(f"{where} has {len(value)} items, not {len(args)}")
            return
        for number, (item, item_type) in enumerate(zip(value, args)):
            _check(item, item_type, f"{where}[{number}]", found)
        return
    for number, item in enumerate(value):
        _check(item, args[0], f"{where}[{number}]", found)


def _fits(value: object, expected: Any) -> bool:
    trial: list[str] = []
    _check(value, expected, "", trial)
    return not trial


def _fits_plain(value: object, expected: Any) -> bool:
    if expected is None or expected is type(None):
        return value is None
    if expected is float:  # JSON writes 2.0 as 2
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if expected is np.ndarray:
        return isinstance(value, np.ndarray)
    return isinstance(expected, type) and isinstance(value, expected)


def _describe(value: object) -> str:
    if value is None:
        return "missing (None)"
    if isinstance(value, np.ndarray):
        return f"an array of shape {list(value.shape)}"
    return article(type(value).__name__)


def _name(expected: Any) -> str:
    """A type as a sentence shows it: short names, `an array` for np.ndarray, unions and generics spelled out."""
    origin, args = get_origin(expected), get_args(expected)
    if expected is type(None):
        return "None"
    if expected is np.ndarray:
        return "an array"
    if origin in (Union, types.UnionType):
        return " | ".join(_name(option) for option in args)
    if origin is Literal:
        return " | ".join(map(repr, args))
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_name(arg) for arg in args)}]"
    return getattr(expected, "__name__", str(expected))
