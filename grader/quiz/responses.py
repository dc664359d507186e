"""Read a responses file as LMSs and spreadsheets write it, and read the answers in its cells.

Exports differ in small ways that must not cost a student marks or an instructor an afternoon: a
byte-order mark, a header in another case, `;` instead of `,` between cells (spreadsheets in
locales with a decimal comma), a legacy encoding, extra columns such as a timestamp or an e-mail
address. Answers differ too: `4,0` for 4.0, `112 MB` with the unit asked, `(B)` for B. What cannot
be read with confidence (`8_6`, `1,250`, `12 GB` where MB is asked) is never guessed: it scores 0
and the reason says why.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

DELIMITERS = (",", ";", "\t")
TRUE_WORDS = {"true": "A", "t": "A", "yes": "A", "false": "B", "f": "B", "no": "B"}
UNIT_ALIASES = {"×": ("×", "x", "times"), "%": ("%", "percent")}
_GROUPED = {
    # thousands separated by commas, with an optional decimal point: 17,155,072 or 1,250.5
    "comma": re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?"),
    # thousands separated by points, with a decimal comma: 1.250,5 or 17.155.072
    "point": re.compile(r"\d{1,3}(?:\.\d{3})+,\d+|\d{1,3}(?:\.\d{3}){2,}"),
    # thousands separated by spaces or apostrophes: 17 155 072, 1'250.5
    "space": re.compile(r"\d{1,3}(?:[ '’]\d{3})+(?:[.,]\d+)?"),
}
_PLAIN = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DECIMAL_COMMA = re.compile(r"\d+,\d+(?:[eE][+-]?\d+)?")
_AMBIGUOUS = re.compile(r"[1-9]\d{0,2},\d{3}")  # 1,250: one and a quarter, or twelve hundred and fifty?
_TIMES_TEN = re.compile(r"\s*[x×*·]\s*10\s*\^\s*\(?\s*([+-]?\d+)\s*\)?")


class ResponsesError(Exception):
    """The responses file cannot be graded at all (missing, unreadable, no student or version column)."""


@dataclass(frozen=True)
class Row:
    line: int  # the file's line where the row starts, header = 1
    cells: dict[str, str]


@dataclass
class Table:
    path: Path
    columns: list[str]  # header names, stripped and lower-cased
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    misaligned: list[tuple[int, str]] = field(default_factory=list)  # (line, reason) of rows that cannot be read


def _decode(path: Path, data: bytes) -> tuple[str, str | None]:
    """The text, and a note when it was not UTF-8."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16"), None
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), f"{path.name} is not UTF-8; read it as Windows-1252"
    except UnicodeDecodeError:
        return data.decode("latin-1"), f"{path.name} is not UTF-8; read it as Latin-1"


def _delimiter(header: str) -> str:
    """The delimiter of the header line: the one that splits it most (outside quotes)."""
    counts = {d: len(next(csv.reader([header], delimiter=d))) for d in DELIMITERS}
    return max(DELIMITERS, key=lambda d: (counts[d], d == ","))


def read_table(path: Path) -> Table:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ResponsesError(f"responses file {path} does not exist") from None
    except OSError as exc:
        raise ResponsesError(f"{path}: cannot read the responses file ({exc})") from None
    text, note = _decode(path, data)
    lines = text.splitlines()
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise ResponsesError(f"{path} is empty; it needs a header student,version,<question id>...")
    try:
        table = _rows(path, text, _delimiter(lines[first]))
    except csv.Error as exc:
        raise ResponsesError(f"{path}: not a readable CSV file ({exc})") from None
    if note:
        table.notes.append(note)
    return table


def _rows(path: Path, text: str, delimiter: str) -> Table:
    """The header and the rows, each row with the line it starts on; blank rows are skipped, and rows
    with more (non-empty) cells than the header are set aside as misaligned."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header: list[str] | None = None
    header_line = 0
    rows: list[Row] = []
    misaligned: list[tuple[int, str]] = []
    start = 1
    for cells in reader:
        line, start = start, reader.line_num + 1
        if not any(cell.strip() for cell in cells):
            continue
        if header is None:
            header = [cell.replace("\ufeff", "").strip().lower() for cell in cells]
            header_line = line
            continue
        extra = [cell for cell in cells[len(header) :] if cell.strip()]
        if extra:
            misaligned.append(
                (
                    line,
                    f"the row has {len(cells)} cells but the header has {len(header)}: a cell "
                    "holding the delimiter must be quoted (or separate letters with ';')",
                )
            )
            continue
        rows.append(Row(line, {name: (cells[i] if i < len(cells) else "") for i, name in enumerate(header) if name}))
    assert header is not None
    repeated = sorted({name for name in header if name and header.count(name) > 1})
    if repeated:
        raise ResponsesError(f"{path}, line {header_line}: column(s) {', '.join(repeated)} appear more than once")
    return Table(path, [name for name in header if name], rows, misaligned=misaligned)


def parse_version(text: str) -> int | None:
    """'2', '02', 'v2', 'Version 2' and '2.0' (a spreadsheet's rendering of 2) are version 2."""
    match = re.fullmatch(r"(?:v(?:ersion)?\s*)?0*(\d+)(?:[.,]0+)?", text.strip(), flags=re.IGNORECASE)
    return int(match.group(1)) if match else None


def parse_letters(text: str, valid: str) -> tuple[list[str] | None, str]:
    """'a; c', 'A,C', 'AC', '(B)', 'B.', 'A and C' -> letters; anything else -> None and why.

    Letters run together ('AC') are read only when all of them are options, so a word such as
    'maybe' is reported as unreadable rather than taken for the letters M, A, Y, B, E."""
    cleaned = re.sub(r"\b(?:AND|OPTIONS?|ANSWERS?|CHOICES?)\b|[()\[\].:&+/|]", " ", text.upper())
    tokens = [token for token in re.split(r"[\s,;]+", cleaned) if token]
    readable = all(
        re.fullmatch(r"[A-Z]", token) or (re.fullmatch(r"[A-Z]+", token) and set(token) <= set(valid))
        for token in tokens
    )
    if not tokens or not readable:
        return None, f"{text.strip()!r} is not a choice of letters"
    return sorted({letter for token in tokens for letter in token}), ""


def _strip_unit(text: str, unit: str) -> tuple[str, str]:
    """The text without the question's unit at its end; an error when some other word is there."""
    names = list(UNIT_ALIASES.get(unit, (unit,) if unit else ()))
    for name in list(names):  # 1 step or 2 steps, 1 micro-batch or 2 micro-batches
        names += [name[:-cut] for cut, ending in ((2, "es"), (1, "s")) if len(name) > 3 and name.endswith(ending)]
    lowered = text.lower()
    for name in sorted(names, key=len, reverse=True):
        if lowered.endswith(name.lower()) and len(text) > len(name):
            rest = text[: -len(name)]
            if rest[-1].isdigit() or rest[-1] in " .":
                return rest.strip(), ""
    trailing = re.search(r"[^\d\s.,'’]+$", text)
    if trailing and not re.fullmatch(r"[eE][+-]?", trailing.group(0)):
        return text, f"{text!r} is not a number" + (f" in {unit}" if unit else "")
    return text, ""


def parse_number(text: str, unit: str = "") -> tuple[float | None, str]:
    """A number as people write it, with the question's unit allowed after it; None and why otherwise."""
    cleaned = text.strip().replace("\u2212", "-").replace("\u00a0", " ").replace("\u202f", " ")
    cleaned = _TIMES_TEN.sub(lambda m: f"e{m.group(1)}", cleaned)
    cleaned, problem = _strip_unit(cleaned, unit)
    if problem:
        return None, problem
    sign = -1.0 if cleaned.startswith("-") else 1.0
    body = cleaned.lstrip("+-").strip()
    if _PLAIN.fullmatch(body):
        return sign * float(body), ""
    if _AMBIGUOUS.fullmatch(body):
        whole = body.replace(",", "")
        return None, f"{text.strip()!r} is ambiguous ({body.replace(',', '.')} or {whole}); write it without the comma"
    if _DECIMAL_COMMA.fullmatch(body):
        return sign * float(body.replace(",", ".")), ""
    if _GROUPED["comma"].fullmatch(body):
        return sign * float(body.replace(",", "")), ""
    if _GROUPED["point"].fullmatch(body):
        return sign * float(body.replace(".", "").replace(",", ".")), ""
    if _GROUPED["space"].fullmatch(body):
        return sign * float(re.sub(r"[ '’]", "", body).replace(",", ".")), ""
    return None, f"{text.strip()!r} is not a number"
