"""Read a responses file as LMSs and spreadsheets write it, and read the answers in its cells.

Exports differ in small ways that must not cost a student marks or an instructor an afternoon: a
byte-order mark, a header in another case, `;` instead of `,` between cells (spreadsheets in
locales with a decimal comma), a legacy encoding, extra columns such as a timestamp or an e-mail
address. Answers differ too: `4,0` for 4.0, `112 MB` with the unit asked, `(B)` for B. What cannot
be read with confidence (`8_6`, `1,250`, `12 GB` where MB is asked) is never guessed: it scores 0
and the reason says why.
"""

from __future__ import annotations

import codecs
import csv
import html
import io
import itertools
import re
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO, TextIO

from grader.report.inert import one_line

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


MAX_ROWS = 20_000  # rows of a responses file that are graded (a class is a few thousand at most); the rest is reported
CELL_LIMIT = 1_000  # characters of a cell that is read: a longer answer scores 0, a longer name or version is its row's
LINE_LIMIT = 4 * 1024 * 1024  # characters of a line handed to the CSV reader: a longer line is its row's problem
MAX_COLUMNS = 2_000  # columns of the header
_CHUNK = 1 << 20  # bytes read at a time: a responses file is never held whole
_BOMS = (  # longest first: UTF-32 LE's mark starts like UTF-16 LE's
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_LABELS = {"utf-8": "UTF-8", "cp1252": "Windows-1252", "latin-1": "Latin-1"}


class ResponsesError(Exception):
    """The responses file cannot be graded at all (missing, unreadable, no student or version column)."""


@dataclass(frozen=True)
class Row:
    line: int  # the file's line where the row starts, header = 1
    cells: dict[str, str]
    oversized: dict[str, int] = field(default_factory=dict)  # column -> length of its cell, over CELL_LIMIT (not read)


@dataclass
class Table:
    path: Path
    columns: list[str]  # header names, stripped and lower-cased
    rows: list[Row]
    notes: list[str] = field(default_factory=list)
    misaligned: list[tuple[int, str]] = field(default_factory=list)  # (line, reason) of rows that cannot be read


def _label(encoding: str) -> str:
    return _LABELS.get(encoding, encoding.upper().replace("-LE", " (little-endian)").replace("-BE", " (big-endian)"))


def _first_bad_line(handle: BinaryIO, skip: int, encoding: str) -> int | None:
    """The line holding the first bytes that `encoding` cannot decode; None when the whole file decodes."""
    handle.seek(skip)
    decoder = codecs.getincrementaldecoder(encoding)()
    line = 1
    while True:
        chunk = handle.read(_CHUNK)
        try:
            line += decoder.decode(chunk, final=not chunk).count("\n")
        except UnicodeDecodeError as exc:
            return line + codecs.decode(exc.object[: exc.start], encoding, "replace").count("\n")
        if not chunk:
            return None


def _utf16_without_bom(head: bytes) -> str | None:
    """UTF-16 that a tool wrote without a byte-order mark: text whose every other byte is NUL."""
    pairs = len(head) // 2
    if pairs < 2:
        return None
    for encoding, high, low in (("utf-16-le", head[1::2], head[0::2]), ("utf-16-be", head[0::2], head[1::2])):
        if high.count(0) >= 0.9 * pairs and low.count(0) < 0.1 * pairs:
            return encoding
    return None


def _encoding(path: Path, handle: BinaryIO) -> tuple[str, int, list[str]]:
    """The file's encoding, the length of its byte-order mark and notes on what was not plain UTF-8: a
    byte-order mark decides; else UTF-8, then Windows-1252, then Latin-1 (which decodes anything)."""
    head = handle.read(4096)
    bom = next(((mark, encoding) for mark, encoding in _BOMS if head.startswith(mark)), None)
    guessed = None if bom else _utf16_without_bom(head)
    if bom or guessed:
        encoding, skip = (bom[1], len(bom[0])) if bom else (guessed or "", 0)
        notes = [] if bom else [f"{path.name} has no byte-order mark but is {_label(encoding)}; read it as such"]
        bad = _first_bad_line(handle, skip, encoding)
        if bad is not None:
            notes.append(f"{path.name}, line {bad}: bytes that are not {_label(encoding)}, shown as \ufffd")
        return encoding, skip, notes
    bad = _first_bad_line(handle, 0, "utf-8")
    if bad is None:
        return "utf-8", 0, []
    fallback = "cp1252" if _first_bad_line(handle, 0, "cp1252") is None else "latin-1"
    note = f"{path.name} is not UTF-8 (line {bad} is the first that is not); read it as {_label(fallback)}"
    return fallback, 0, [note]


def _lines(text: TextIO, too_long: set[int]) -> Iterator[str]:
    """The file's lines, each at most LINE_LIMIT characters: a longer one is read through and stands as a blank
    line whose number goes into `too_long`, so no line is ever held whole."""
    number = 0
    while line := text.readline(LINE_LIMIT):
        number += 1
        if len(line) == LINE_LIMIT and not line.endswith(("\n", "\r")):
            while (rest := text.readline(LINE_LIMIT)) and not rest.endswith(("\n", "\r")):
                pass
            too_long.add(number)
            line = "\n"
        yield line


def _delimiter(header: str) -> str:
    """The delimiter of the header line: the one that splits it most (outside quotes)."""
    counts = {d: len(next(csv.reader([header], delimiter=d), [])) for d in DELIMITERS}
    return max(DELIMITERS, key=lambda d: (counts[d], d == ","))


@contextmanager
def _field_limit(limit: int) -> Iterator[None]:
    """csv's limit on a field is process-wide: raised for this file's reading only."""
    before = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(before)


def read_header(path: Path) -> list[str]:
    """The header's names as the file spells them, lower-cased and stripped, repeats and blanks kept in
    place (a Canvas export repeats its points columns): what tells which export the file is."""
    try:
        with open(path, "rb") as handle:
            encoding, skip, _ = _encoding(path, handle)
            handle.seek(skip)
            text = io.TextIOWrapper(handle, encoding=encoding, errors="replace", newline="")
            lines = _lines(text, set())
            first = next((line for line in lines if line.strip()), None)
            if first is None:
                raise ResponsesError(f"{path} is empty; it needs a header student,version,<question id>...")
            with _field_limit(LINE_LIMIT):
                cells = next(csv.reader(itertools.chain([first], lines), delimiter=_delimiter(first)), [])
    except FileNotFoundError:
        raise ResponsesError(f"responses file {path} does not exist") from None
    except (OSError, csv.Error) as exc:
        raise ResponsesError(f"{path}: cannot read the header of the responses file ({exc})") from None
    return [cell.replace("\ufeff", "").strip().lower() for cell in cells[: MAX_COLUMNS + 1]]


def read_table(path: Path, keep: Collection[str] | None = None) -> Table:
    """The responses file, read as it streams (never whole): the header, and of each row the cells of the
    columns in `keep` (every named column when None), each at most CELL_LIMIT characters."""
    try:
        with open(path, "rb") as handle:
            encoding, skip, notes = _encoding(path, handle)
            handle.seek(skip)
            text = io.TextIOWrapper(handle, encoding=encoding, errors="replace", newline="")
            too_long: set[int] = set()
            lines = _lines(text, too_long)
            blanks: list[str] = []
            for first in lines:
                if first.strip():
                    break
                blanks.append(first)
            else:
                raise ResponsesError(f"{path} is empty; it needs a header student,version,<question id>...")
            with _field_limit(LINE_LIMIT):
                table = _rows(path, itertools.chain(blanks, [first], lines), _delimiter(first), keep, too_long)
    except FileNotFoundError:
        raise ResponsesError(f"responses file {path} does not exist") from None
    except OSError as exc:
        raise ResponsesError(f"{path}: cannot read the responses file ({exc.strerror or exc})") from None
    table.notes[:0] = notes
    return table


def shown_column(name: str) -> str:
    """A column's name for a message: a header may hold a name of a million characters."""
    return one_line(name[:60]) + ("..." if len(name) > 60 else "")


def _header(path: Path, line: int, cells: list[str], keep: Collection[str] | None) -> tuple[list[str], list[str]]:
    """The header's names (stripped, lower-cased) and notes on it; a ResponsesError names what makes it unusable."""
    if len(cells) > MAX_COLUMNS:
        raise ResponsesError(f"{path}, line {line}: the header has {len(cells)} columns; at most {MAX_COLUMNS}")
    header = [cell.replace("\ufeff", "").strip().lower() for cell in cells]
    if not any(header):
        raise ResponsesError(
            f"{path}, line {line}: the header's cells are all blank; it needs student,version,<question id>..."
        )
    notes = [
        f"column {index} has no name in the header (line {line}): its cells are ignored"
        for index, name in enumerate(header, 1)
        if not name and index < len(header)
    ]
    repeated = sorted({name for name in header if name and header.count(name) > 1 and (keep is None or name in keep)})
    if repeated:
        shown = ", ".join(map(shown_column, repeated))
        raise ResponsesError(f"{path}, line {line}: column(s) {shown} appear more than once")
    return header, notes


def _rows(path: Path, lines: Iterable[str], delimiter: str, keep: Collection[str] | None, too_long: set[int]) -> Table:
    """The header and the rows, each row with the line it starts on; blank rows are skipped, and rows that
    cannot be read (more non-empty cells than the header, a line too long, past MAX_ROWS) are set aside."""
    reader = csv.reader(lines, delimiter=delimiter)
    header: list[str] | None = None
    rows: list[Row] = []
    notes: list[str] = []
    misaligned: list[tuple[int, str]] = []
    while True:
        line = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            misaligned.append((line, f"the row cannot be read as CSV ({exc})"))
            continue
        if line in too_long:
            misaligned.append((line, f"the line is over {LINE_LIMIT:,} characters, the most a row may hold"))
            continue
        if header is None:
            if cells:
                header, notes = _header(path, line, cells, keep)
            continue
        if not any(cell.strip() for cell in cells):
            continue
        if len(rows) == MAX_ROWS:
            misaligned.append(
                (line, f"not read: a responses file holds at most {MAX_ROWS:,} rows; grade the rest in another file")
            )
            break
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
        kept: dict[str, str] = {}
        oversized: dict[str, int] = {}
        for index, name in enumerate(header):
            if name and (keep is None or name in keep) and name not in kept:
                cell = cells[index] if index < len(cells) else ""
                if len(cell) > CELL_LIMIT:
                    oversized[name], cell = len(cell), ""
                kept[name] = cell
        rows.append(Row(line, kept, oversized))
    if header is None:
        raise ResponsesError(f"{path} holds no header; it needs student,version,<question id>...")
    return Table(path, list(dict.fromkeys(name for name in header if name)), rows, notes, misaligned)


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


SEARCH_LIMIT = 10_000  # steps spent matching one answer to options before it is called unreadable


_NOT_ALPHANUMERIC = re.compile(r"[\W_]+")


@lru_cache(maxsize=4096)
def plain(text: str) -> str:
    """Only the letters and digits of `text`, case folded: an option as the bank writes it (Markdown) and as an
    LMS writes it back (HTML made text: entities decoded, bold in capitals, marks gone) compare equal."""
    return _NOT_ALPHANUMERIC.sub("", unicodedata.normalize("NFKC", html.unescape(text)).casefold())


def parse_choice_text(text: str, options: Sequence[tuple[str, str]], several: bool) -> tuple[list[str] | None, str]:
    """The letters of the options whose texts make up `text`, an answer as an LMS writes it (one option's text,
    or several joined in any order by `; ` or `,`); None and why when no choice of options, or more than one,
    reads as `text`."""
    plains = [(letter, plain(option)) for letter, option in options]
    alike = [(a, b) for i, (a, pa) in enumerate(plains) for b, pb in plains[i + 1 :] if pa == pb]
    if alike:
        first, second = alike[0]
        return None, f"options {first} and {second} read alike without their punctuation; grade this answer by hand"
    shown = one_line(text.strip()[:80])
    found = _choices(plain(text), plains, several)
    if found is None:
        return None, f"{shown!r} could not be matched to the options in {SEARCH_LIMIT:,} steps"
    if len(found) == 1:
        return sorted(found.pop()), ""
    if not found:
        return None, f"{shown!r} is not the text of {'options' if several else 'an option'} of this question"
    readings = " or ".join(";".join(sorted(choice)) for choice in sorted(found, key=sorted)[:2])
    return None, f"{shown!r} reads as more than one choice ({readings})"


def _choices(target: str, plains: list[tuple[str, str]], several: bool) -> set[frozenset[str]] | None:
    """Every set of options (one when not `several`) whose plain texts, in some order, spell `target`; None when
    the search ran out of steps. Stops at two sets: one is an answer, two are ambiguous."""
    found: set[frozenset[str]] = set()
    steps = 0

    def walk(position: int, used: frozenset[str]) -> bool:
        nonlocal steps
        for letter, text in plains:
            steps += 1
            if steps > SEARCH_LIMIT:
                return False
            if letter in used or not text or not target.startswith(text, position):
                continue
            end, chosen = position + len(text), used | {letter}
            if end == len(target):
                found.add(chosen)
            elif several and not walk(end, chosen):
                return False
            if len(found) > 1:
                return True
        return True

    if target and not walk(0, frozenset()):
        return None
    return found
