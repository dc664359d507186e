"""Answer keys: the machine-readable JSON written next to each version, read back by `grade`.

The key carries everything grading needs (answers, tolerances, points, explanations), so grading
works from the rendered keys alone, even after the bank has been edited.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.quiz.versions import Item, Version

KEY_FORMAT = "grader-quiz-key/1"


class KeyFileError(Exception):
    """A key file that is missing, unreadable or not a quiz key."""


def answer_text(item: Item) -> str:
    """The answer as a person reads it: letters joined by ';', or the value with its unit."""
    if item.value is not None:
        unit = f" {item.question.unit}" if item.question.unit else ""
        return f"{item.value:.6g}{unit} (± {item.tolerance:.3g})"
    return ";".join(item.correct_letters)


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
            entry.update(value=item.value, tolerance=item.tolerance, unit=item.question.unit,
                         parameters=dict(item.params))
        else:
            entry.update(answer=item.correct_letters,
                         options=[{"letter": c.letter, "text": c.text, "correct": c.correct,
                                   "explanation": c.explanation.strip()} for c in item.choices])
        questions.append(entry)
    return {"format": KEY_FORMAT, "title": version.title, "seed": version.seed, "version": version.number,
            "questions": questions}


def load_keys(path: Path) -> dict[int, dict[str, Any]]:
    """Keys by version number, from one key file or from every `*.key.json` in a directory."""
    if path.is_dir():
        files = sorted(path.glob("*.key.json"))
        if not files:
            raise KeyFileError(f"no *.key.json answer key in {path}; pass the --out directory of `grader quiz render`")
    elif path.is_file():
        files = [path]
    else:
        raise KeyFileError(f"answer key {path} does not exist")
    keys: dict[int, dict[str, Any]] = {}
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KeyFileError(f"{file}: not a readable JSON answer key ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != KEY_FORMAT:
            raise KeyFileError(f"{file}: not a quiz answer key (expected \"format\": \"{KEY_FORMAT}\")")
        keys[int(data["version"])] = data
    return keys
