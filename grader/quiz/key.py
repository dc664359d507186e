"""Answer keys: the machine-readable JSON written next to each version, read back by `grade`.

The key carries everything grading needs (answers, tolerances, points, explanations), so grading
works from the rendered keys alone, even after the bank has been edited. It also carries the seed
and a fingerprint of the render (seed, pool, title, questions), so that keys of two different
renders left in one folder are refused instead of graded together.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from grader.quiz.versions import Item, Version, exact_number

KEY_FORMAT = "grader-quiz-key/2"
OLD_FORMATS = ("grader-quiz-key/1",)  # no fingerprint; graded all the same


class KeyFileError(Exception):
    """A key file that is missing, unreadable or not a quiz key, or keys that do not belong together."""


def answer_text(item: Item) -> str:
    """The answer as a person reads it: letters joined by ';', or the exact value with its unit, the
    precision asked for, the value written at that precision and the accepted margin."""
    if item.value is None:
        return ";".join(item.correct_letters)
    precision = item.question.precision
    assert precision is not None
    unit = f" {item.question.unit}" if item.question.unit else ""
    if item.tolerance == 0:
        return f"{exact_number(item.value)}{unit} (exact)"
    return (
        f"{exact_number(item.value)}{unit} ({precision.label}: {precision.rounded(item.value)}; "
        f"right within ± {exact_number(item.tolerance)})"
    )


def fingerprint(version: Version) -> str:
    """What makes keys belong to one render: the seed, the pool, the title and the question ids."""
    ids = ",".join(sorted(item.question.id for item in version.items))
    text = f"{version.seed}|{version.pool}|{version.title}|{ids}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def key_data(version: Version) -> dict[str, Any]:
    """The JSON-ready key of one version."""
    questions = []
    for item in version.items:
        entry: dict[str, Any] = {
            "number": item.number,
            "id": item.question.id,
            "type": item.question.type,
            "points": item.question.points,
            "explanation": item.explanation.strip(),
        }
        if item.value is not None:
            assert item.question.precision is not None
            entry.update(
                value=item.value,
                tolerance=item.tolerance,
                unit=item.question.unit,
                precision=item.question.precision.label,
                written=item.question.precision.rounded(item.value),
                parameters=dict(item.params),
            )
        else:
            entry.update(
                answer=item.correct_letters,
                options=[
                    {
                        "letter": c.letter,
                        "source": c.source,
                        "text": c.text,
                        "correct": c.correct,
                        "explanation": c.explanation.strip(),
                    }
                    for c in item.choices
                ],
            )
        questions.append(entry)
    return {
        "format": KEY_FORMAT,
        "title": version.title,
        "seed": version.seed,
        "pool": version.pool,
        "render": fingerprint(version),
        "version": version.number,
        "questions": questions,
    }


def load_keys(path: Path) -> dict[int, dict[str, Any]]:
    """Keys by version number, from one key file or from every `*.key.json` in a directory.

    Keys from different renders (another seed, pool or question set) are refused: grading a student
    of version 4 against a stale key of an older render would be silently wrong.
    """
    if path.is_dir():
        files = sorted(path.glob("*.key.json"))
        if not files:
            raise KeyFileError(f"no *.key.json answer key in {path}; pass the --out directory of `grader quiz render`")
    elif path.is_file():
        files = [path]
    else:
        raise KeyFileError(f"answer key {path} does not exist")
    keys: dict[int, dict[str, Any]] = {}
    origin: dict[int, Path] = {}
    for file in files:
        data = _read(file)
        version = data["version"]
        if version in keys:
            raise KeyFileError(
                f"{file} and {origin[version]} are both keys of version {version}; "
                "keep the keys of one render in a folder"
            )
        keys[version], origin[version] = data, file
    renders: dict[tuple[Any, Any], list[int]] = {}
    for version, data in sorted(keys.items()):
        renders.setdefault((data.get("seed"), data.get("render")), []).append(version)
    if len(renders) > 1:
        described = "; ".join(
            f"seed {seed} for version(s) {', '.join(map(str, versions))}" for (seed, _), versions in renders.items()
        )
        raise KeyFileError(
            f"the keys in {path} come from different renders ({described}); grade with the keys of one "
            "render only: render again into an empty folder (or with --force)"
        )
    return keys


def _read(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KeyFileError(f"{file}: not a readable JSON answer key ({exc})") from None
    if not isinstance(data, dict) or data.get("format") not in (KEY_FORMAT, *OLD_FORMATS):
        raise KeyFileError(f'{file}: not a quiz answer key (expected "format": "{KEY_FORMAT}")')
    if not isinstance(data.get("version"), int) or not isinstance(data.get("questions"), list):
        raise KeyFileError(f"{file}: the key has no version number or no questions; render it again")
    return data
