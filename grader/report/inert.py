"""Text a student controls, made inert for where it is shown: a terminal, an LMS page, a spreadsheet, a file name.

A submission's output, exception messages and file names reach instructors' terminals, Gradescope,
gradebooks and the results folder. Control characters there are commands, not text (ESC starts a
terminal sequence, OSC 52 writes the clipboard, CR rewrites a line, bidi overrides reorder what is
read), and a spreadsheet cell that starts with = + - @ is a formula. So every such character is
shown as its Python escape (ESC becomes the four characters \\x1b), long text is cut with a note,
CSV cells get OWASP's leading quote, and names get a slug before they become paths.
"""

from __future__ import annotations

import hashlib
import re

# C1 controls and DEL, lone surrogates (undecodable bytes, which no UTF-8 file can hold), line and
# paragraph separators, and the bidi marks, embeddings, overrides and isolates ("Trojan Source")
_OTHERS = r"\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_MULTI_LINE = re.compile(rf"[\x00-\x08\x0b-\x1f{_OTHERS}]")  # every C0 control but tab and newline
_ONE_LINE = re.compile(rf"[\x00-\x1f{_OTHERS}]")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP's list of what makes a CSV cell a formula
NAME_LIMIT = 120  # characters of a file name made from a submission's name (filesystems allow 255 bytes)
_MARKDOWN_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")  # CommonMark: any ASCII punctuation may be escaped
_NAME_UNSAFE = re.compile(r"[^\w .,+=@()\[\]{}~-]+")  # anything but letters, digits and plain punctuation


def _escaped(match: re.Match[str]) -> str:
    return repr(match[0])[1:-1]


def _capped(text: str, limit: int | None) -> str:
    """At most `limit` characters, the note saying how many were cut included."""
    if limit is None or len(text) <= limit:
        return text
    longest = f"\n[... {len(text)} characters cut]"
    kept = max(0, limit - len(longest))
    return f"{text[:kept]}\n[... {len(text) - kept} characters cut]"


def printable(text: str, limit: int | None = None) -> str:
    """`text` with every control character but newline and tab escaped, cut to `limit` characters. A
    CRLF is a newline (what a program prints on Windows), a CR alone is escaped (it rewrites the line)."""
    return _capped(_MULTI_LINE.sub(_escaped, text.replace("\r\n", "\n")), limit)


def one_line(text: str, limit: int | None = None) -> str:
    """`text` as one line: newlines and tabs escaped too (a name, a message on a progress line)."""
    return _capped(_ONE_LINE.sub(_escaped, text), limit)


def is_one_line(text: str) -> bool:
    """Whether `text` holds no control character at all, newline and tab included."""
    return _ONE_LINE.search(text) is None


def csv_cell(value: str, limit: int | None = None) -> str:
    """A spreadsheet cell that shows `value` and computes nothing: control characters escaped, and a
    leading quote where it would start a formula. Idempotent, so a merge may apply it again."""
    text = printable(value)
    return _capped(f"'{text}" if text.startswith(FORMULA_STARTS) else text, limit)


def markdown_text(text: str, limit: int | None = None) -> str:
    """`text` as inert Markdown on one line (a table cell): cut to about `limit` characters, control characters
    escaped, and every ASCII punctuation character backslash-escaped, so no `<tag>`, `[link](...)`, `|`, `*`
    or `&entity;` of it is markup: a renderer shows it as typed."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\g<0>", one_line(_capped(text, limit)))


def file_name(name: str, reserved: frozenset[str] = frozenset()) -> str:
    """`name` as one path component: itself when it is a plain name, else a slug of it and a hash of the
    whole (two names never share a slug): no separator, no control character, no leading dot or dash.
    A name in `reserved` (casefolded: the folder's own files, on any filesystem) gets the slug too."""
    if (
        name
        and name.casefold() not in reserved
        and len(name) <= NAME_LIMIT
        and _NAME_UNSAFE.search(name) is None
        and not name.startswith((".", "-", " "))
        and not name.endswith((".", " "))
    ):
        return name
    slug = _NAME_UNSAFE.sub("_", name).strip("._- ")[: NAME_LIMIT - 13].strip("._- ") or "submission"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{slug}-{digest}"
