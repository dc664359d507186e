"""Gradescope's results.json, as its autograder specification documents it, and a validator.

Written from https://gradescope-autograders.readthedocs.io/en/latest/specs/ ("Output format"): the
top-level and per-test fields it lists, the visibility values, the test status values, the output
formats. Undocumented fields are refused, so anything the grader writes is something Gradescope
reads. On top of the schema: the scores the grader writes add up, and never exceed the maximum.
"""

from __future__ import annotations

from typing import Any

import jsonschema

VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
FORMAT = {"enum": ["text", "html", "simple_format", "md", "ansi"]}
NUMBER = {"type": "number"}

TEST = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "score": NUMBER,
        "max_score": NUMBER,
        "status": {"enum": ["passed", "failed"]},
        "name": {"type": "string"},
        "name_format": FORMAT,
        "number": {"type": "string"},
        "output": {"type": "string"},
        "output_format": FORMAT,
        "tags": {"type": "array", "items": {"type": "string"}},
        "visibility": VISIBILITY,
        "extra_data": {"type": "object"},
    },
}

RESULTS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "score": NUMBER,
        "execution_time": NUMBER,
        "output": {"type": "string"},
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "tests": {"type": "array", "items": TEST},
        "leaderboard": {"type": "array", "items": {"type": "object", "required": ["name", "value"]}},
    },
    # "score: optional, but required if not on each test case"
    "anyOf": [
        {"required": ["score"]},
        {"required": ["tests"], "properties": {"tests": {"items": {"required": ["score"]}}}},
    ],
}


def validate_results(data: dict[str, Any]) -> None:
    jsonschema.validate(data, RESULTS)
    tests = data.get("tests", [])
    for test in tests:
        assert test["name"] and test["status"] in ("passed", "failed") and "visibility" in test
        assert 0 <= test["score"] <= test["max_score"], test
    if tests:
        assert abs(sum(t["score"] for t in tests) - data["score"]) < 1e-6
        assert abs(sum(t["max_score"] for t in tests) - data["extra_data"]["max_score"]) < 1e-6


def max_score(data: dict[str, Any]) -> float:
    return float(data["extra_data"]["max_score"])
