"""The small Markdown subset question texts use, turned into HTML for the HTML sheet.

Banks need paragraphs, fenced code blocks, bullet lists, `code`, **bold** and *italic*; nothing
more. A few dozen lines cover that without adding a Markdown library to the dependencies. All
text is HTML-escaped before any markup is added, so a bank cannot inject HTML into a sheet.
"""

from __future__ import annotations

import re
from functools import lru_cache

from markupsafe import Markup, escape

_INLINE = [
    (re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"<em>\1</em>"),
]
_CODE_SPAN = re.compile(r"`([^`]+)`")


def inline(text: str) -> str:
    """Escape a line and apply code spans, bold and italic (never inside code spans)."""
    parts = _CODE_SPAN.split(text)
    out: list[str] = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append(f"<code>{escape(part)}</code>")
            continue
        html = str(escape(part))
        for pattern, replacement in _INLINE:
            html = pattern.sub(replacement, html)
        out.append(html)
    return "".join(out)


@lru_cache(maxsize=4096)
def to_html(text: str) -> Markup:
    """Render block structure: fenced code, bullet lists and paragraphs separated by blank lines."""
    html: list[str] = []
    lines = text.strip("\n").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith("```"):
            language = line.strip()[3:].strip()
            end = index + 1
            while end < len(lines) and not lines[end].lstrip().startswith("```"):
                end += 1
            css = f' class="language-{escape(language)}"' if language else ""
            code = escape("\n".join(lines[index + 1 : end]))
            html.append(f"<pre><code{css}>{code}</code></pre>")
            index = end + 1
        elif re.match(r"\s*[-*] ", line):
            items = []
            while index < len(lines) and re.match(r"\s*[-*] ", lines[index]):
                items.append(f"<li>{inline(lines[index].strip()[2:])}</li>")
                index += 1
            html.append("<ul>" + "".join(items) + "</ul>")
        elif not line.strip():
            index += 1
        else:
            paragraph = []
            while index < len(lines) and lines[index].strip() and not re.match(r"\s*([-*] |```)", lines[index]):
                paragraph.append(inline(lines[index].strip()))
                index += 1
            html.append("<p>" + "\n".join(paragraph) + "</p>")
    return Markup("\n".join(html))
