"""How a message must not read: a word cut short, a stray or unbalanced bracket or quote, "a 8-stage".

A message is built from numbers, names and text the code under test produced (an exception's message),
which the judge shortens where it quotes it (`shorten`, always at a word boundary). tests/test_mistakes.py
holds every message the course's named mistakes produce to `problems`.

A cut word is recognised by what such a cut leaves: one or two letters that are no word (nor one of the
course's one-letter names: b, k, m, p...) right before punctuation or the end ("the remote w;"). A longer
fragment reads as a word here; that is why the code that shortens a quote never cuts inside a word.
"""

from __future__ import annotations

import re
import reprlib

ELLIPSIS = "..."  # where `shorten` cut: what follows it is left out on purpose
SHORT_WORDS = frozenset(
    "a i an as at be by do go he if in is it me my no of on or so to up us we ok vs id fn op lr dp tp pp ms ns".split()
)
NAMES = frozenset("b d e f g h i k m n p r s t x y".split())  # one-letter names the messages use (b = the batch)
_FRAGMENT = re.compile(r"(?<![\w'.\-/(])([a-z]{1,2})(?=[;,:)!?]|\.(?=\s|$)|$)")  # "nn." or "(es)": no cut
_ARTICLE = re.compile(r"\b(an?)\s+(\d[\d,]*|eight\w*|eleven\w*)", re.I)
_PAIRS = {")": "(", "]": "[", "}": "{"}
_CODE = re.compile(r"`[^`]*`")  # a quoted expression: its brackets are code's, never prose's
# an error a rank raised, quoted up to the judge's next line ("  at ...", "  what this error means..."): its
# brackets and quotes are torch's or the student's, quoted as they are (torch's own can be unbalanced)
_QUOTED_ERROR = re.compile(r"(raised \w+: ).*?(?=\n  \S|\Z)", re.S)


def shorten(text: str, limit: int) -> str:
    """`text`, or at most `limit` characters of it cut at a word boundary and marked with ELLIPSIS."""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(ELLIPSIS) + 1]
    boundary = max(cut.rfind(" "), cut.rfind("\n"))
    cut = cut[:boundary] if boundary > limit // 2 else cut[:-1]  # one long token (a path): cut inside it
    return cut.rstrip(" ,;:.\n") + ELLIPSIS


def brief(value: object, limit: int = 200) -> str:
    """A value's repr in a few words with its brackets closed: what is deep or long is elided as `...`
    (reprlib), shallower until it fits, where a cut of the whole repr would leave brackets open."""
    short = reprlib.Repr()
    short.maxlist, short.maxtuple, short.maxdict, short.maxstring, short.maxother = 4, 4, 3, 40, 40
    for level in (3, 2, 1):
        short.maxlevel = level
        said = short.repr(value)
        if len(said) <= limit:
            return said
    return shorten(said, limit)


def _wants_an(number: str) -> bool:
    """Whether a number is said with a vowel first: eight..., eleven..., eighteen..."""
    if not number[0].isdigit():
        return True  # eight, eleven, eighteen, eighty
    digits = number.replace(",", "")
    return digits.startswith("8") or digits[:2] in ("11", "18") and len(digits) % 3 == 2


def article(word: str) -> str:
    """`word` after "a" or "an", as it is said: "an 8-stage", "a 2D", "an int", "a dict", "a uint8"."""
    number = re.match(r"\d[\d,]*", word)
    if number:
        return f"{'an' if _wants_an(number[0]) else 'a'} {word}"
    vowel = word[:1].lower() in "aeio" or word[:1].lower() == "u" and not word.lower().startswith(("uni", "uint", "us"))
    return f"{'an' if vowel else 'a'} {word}"


def problems(message: str) -> list[str]:
    """What reads wrong in a message, each said with the words it is about; [] for none."""
    found = []
    for match in _FRAGMENT.finditer(message):
        word = match[1]
        if word not in SHORT_WORDS and word not in NAMES:
            found.append(f"a word cut short: {message[max(0, match.start() - 20) : match.end() + 1]!r}")
    for match in _ARTICLE.finditer(message):
        article, number = match[1], match[2]
        wanted = "an" if _wants_an(number) else "a"
        if article.lower() != wanted:
            found.append(f"{article!r} before {number}: say {wanted!r} ({match[0]!r})")
    prose = _CODE.sub("``", _QUOTED_ERROR.sub(r"\1(...)", message))
    empty = re.search(r"\s\(\s*\)", prose)
    if empty:
        found.append(f"a stray empty (): {prose[max(0, empty.start() - 20) : empty.end()]!r}")
    found += _unbalanced(prose)
    if prose.count('"') % 2:
        found.append('an unbalanced double quote (")')
    if _QUOTED_ERROR.sub("", message).count("`") % 2:
        found.append("an unbalanced backtick (`)")
    return found


def _unbalanced(text: str) -> list[str]:
    open_: list[str] = []
    for char in text:
        if char in "([{":
            open_.append(char)
        elif char in _PAIRS:
            if not open_ or open_[-1] != _PAIRS[char]:
                return [f"a {char!r} that closes nothing open"]
            open_.pop()
    return [f"a {open_[-1]!r} never closed"] if open_ else []
