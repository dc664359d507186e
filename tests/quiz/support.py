"""Shared helpers for the quiz tests: the course's banks, tiny banks written to tmp_path, and the
bank and answer helpers of the grading tests."""

from __future__ import annotations

import json
import random
import string
import textwrap
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

from grader.quiz.bank import Bank, Question, load_banks

COURSE_BANK = Path(__file__).resolve().parents[2] / "quizzes"


@lru_cache(maxsize=1)
def course_bank() -> Bank:
    return load_banks(COURSE_BANK)


def course_questions() -> list[Question]:
    return course_bank().questions


def write_bank(directory: Path, body: str, name: str = "bank.toml") -> Path:
    """Write a bank file (dedented) into `directory`, which is created if needed."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def filler(length: int, seed: str) -> str:
    """Text of exactly `length` characters made of words no other option shares."""
    rng = random.Random(seed)
    text = ""
    while len(text) < length:
        text += "".join(rng.choice(string.ascii_lowercase) for _ in range(6)) + " "
    return text[:length].rstrip() + "x" * (length - len(text[:length].rstrip()))


SINGLE = """
[[questions]]
id = "q-single"
type = "single"
pool = "practice"
text = "Which one?"
answer = "B"
tags = { objective = "pick one", exercise = "general" }
[[questions.options]]
text = "first"
explanation = "no"
[[questions.options]]
text = "second"
explanation = "yes"
[[questions.options]]
text = "third"
explanation = "no"
"""

NUMERIC = """
[[questions]]
id = "q-numeric"
type = "numeric"
pool = "exam"
text = "Ring over {W} ranks, {M} MB?"
answer = "2 * (W - 1) / W * M"
precision = { sig = 3 }
tolerance = { rel = 0.01 }
tags = { objective = "ring volume", exercise = "ex08_ring_allreduce" }
[questions.parameters]
W = { values = [2, 4, 8] }
M = { min = 100, max = 300, step = 100 }
"""

# A bank with one question of each type, for the grading tests.
GRADING_BANK = """
[[questions]]
id = "volume"
type = "numeric"
pool = "exam"
unit = "MB"
precision = { sig = 3 }
text = "Ring over {W} ranks, {M} MB: how many MB does each rank send?"
answer = "2 * (W - 1) / W * M"
tags = { objective = "ring volume", exercise = "ex08_ring_allreduce" }
[questions.parameters]
W = { values = [4, 8] }
M = { values = [100, 112] }

[[questions]]
id = "pick"
type = "single"
pool = "exam"
text = "Which backend runs on CPU?"
answer = "B"
tags = { objective = "backend", exercise = "general" }
options = [
  { text = "nccl", explanation = "GPU only" },
  { text = "gloo", explanation = "CPU and GPU" },
  { text = "none", explanation = "a backend is needed" },
]

[[questions]]
id = "both"
type = "multiple"
pool = "exam"
text = "Which are set by torchrun?"
answer = ["A", "C"]
tags = { objective = "env", exercise = "ex07_torchrun" }
options = [
  { text = "RANK", explanation = "set" },
  { text = "CUDA_VISIBLE_DEVICES", explanation = "not set" },
  { text = "LOCAL_RANK", explanation = "set" },
  { text = "NCCL_DEBUG", explanation = "not set" },
]

[[questions]]
id = "fact"
type = "truefalse"
pool = "practice"
text = "Ranks start at 0."
answer = true
explanation = "They do."
tags = { objective = "ranks", exercise = "ex01_process_group" }
"""
IDS = ("volume", "pick", "both", "fact")


def key(rendered: Path, version: int) -> dict[str, dict]:
    data = json.loads((rendered / f"v{version:02d}.key.json").read_text())
    return {q["id"]: q for q in data["questions"]}


def right_answers(rendered: Path, version: int) -> dict[str, str]:
    entries = key(rendered, version)
    return {
        qid: entry["written"] if entry["type"] == "numeric" else ";".join(entry["answer"])
        for qid, entry in entries.items()
    }


def row(*cells: str, delimiter: str = ",") -> str:
    return delimiter.join(cells) + "\n"


def find_child(element: ET.Element, path: str) -> ET.Element:
    """`element.find(path)`, which the export must have written."""
    found = element.find(path)
    assert found is not None, f"no <{path}> in <{element.tag}>"
    return found


def child_text(element: ET.Element, path: str) -> str:
    """`element.findtext(path)`, which the export must have written ("" for an empty element)."""
    found = element.findtext(path)
    assert found is not None, f"no <{path}> in <{element.tag}>"
    return found


def attribute(element: ET.Element, name: str) -> str:
    """`element.get(name)`, which the export must have written."""
    value = element.get(name)
    assert value is not None, f"<{element.tag}> has no {name}="
    return value
