"""The text of each page of a PDF that Chromium prints, for tests that read what is on paper.

Chromium (Skia) writes plain objects: each page's fonts (`/Font << /F4 4 0 R >>`), each font's ToUnicode
CMap, and a Flate-compressed content stream that shows glyph ids (`<0027004C> Tj`, `[<...> 12 <...>] TJ`).
This reads that much and no more: no PDF library is a dependency of the course.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

_OBJECT = re.compile(rb"(\d+) 0 obj\s*(<<.*?>>)\s*(?:stream\r?\n(.*?)\r?\nendstream)?\s*endobj", re.S)
_SHOW = re.compile(rb"/(\w+) [\d.]+ Tf|\[(.*?)\]\s*TJ|<([0-9A-Fa-f]*)>\s*Tj", re.S)


def _objects(data: bytes) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """Every object's dictionary and, where it has one, its stream decompressed."""
    dictionaries, streams = {}, {}
    for match in _OBJECT.finditer(data):
        number = int(match[1])
        dictionaries[number] = match[2]
        if match[3] is not None:
            streams[number] = zlib.decompress(match[3]) if b"/FlateDecode" in match[2] else match[3]
    return dictionaries, streams


def _cmap(text: bytes) -> dict[int, str]:
    """A ToUnicode CMap's glyph id -> text (bfchar and bfrange entries)."""
    mapping: dict[int, str] = {}
    for block in re.findall(rb"beginbfchar(.*?)endbfchar", text, re.S):
        for glyph, unicode in re.findall(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>", block):
            mapping[int(glyph, 16)] = bytes.fromhex(unicode.decode()).decode("utf-16-be")
    for block in re.findall(rb"beginbfrange(.*?)endbfrange", text, re.S):
        for low, high, start in re.findall(rb"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>", block):
            first = ord(bytes.fromhex(start.decode()).decode("utf-16-be"))
            for offset, glyph in enumerate(range(int(low, 16), int(high, 16) + 1)):
                mapping[glyph] = chr(first + offset)
    return mapping


def _group(pattern: bytes, data: bytes) -> bytes:
    """The first group of `pattern` in `data`, which this PDF must hold."""
    match = re.search(pattern, data, re.S)
    assert match is not None, f"no {pattern!r} in {data[:200]!r}"
    return match[1]


def _shown(glyphs: bytes, font: dict[int, str]) -> str:
    return "".join(font.get(int.from_bytes(glyphs[i : i + 2], "big"), "?") for i in range(0, len(glyphs), 2))


def pages(path: Path) -> list[str]:
    """The text of each page, in page order; text objects are joined with a space."""
    dictionaries, streams = _objects(path.read_bytes())
    tree = next(d for d in dictionaries.values() if b"/Type /Pages" in d)
    texts = []
    for page in map(int, re.findall(rb"(\d+) 0 R", _group(rb"/Kids \[(.*?)\]", tree))):
        fonts = {}
        for name, font in re.findall(rb"/(\w+) (\d+) 0 R", _group(rb"/Font <<(.*?)>>", dictionaries[page])):
            unicode = re.search(rb"/ToUnicode (\d+) 0 R", dictionaries[int(font)])
            fonts[name] = _cmap(streams[int(unicode[1])]) if unicode else {}
        content = streams[int(_group(rb"/Contents (\d+) 0 R", dictionaries[page]))]
        shown: list[str] = []
        current: dict[int, str] = {}
        for match in _SHOW.finditer(content):
            if match[1]:
                current = fonts.get(match[1], {})
                continue
            hexes = re.findall(rb"<([0-9A-Fa-f]*)>", match[2]) if match[2] is not None else [match[3]]
            shown.append(_shown(b"".join(bytes.fromhex(h.decode()) for h in hexes), current))
        texts.append(" ".join(shown))
    return texts
