"""Inline math survives Markdown: no line inside an open $...$ starts with a list marker.

A wrapped line of a paragraph that begins with "+ ", "- ", "* " or "1. " starts a list, which
ends the paragraph; a $ opened before the break is then never closed, and the reader (in the
HTML book and the PDF alike) sees the TeX source. Rewrap the line so the marker is not first.
"""

import re

import nbformat
import pytest

from minirlhf.course import nbgen

ROOT = nbgen.sources()[0].parents[1]
_MARKER = re.compile(r"(?:[-+*]|\d+[.)])\s")


def broken_math(markdown: str) -> list[str]:
    """Return the lines that start a list while an inline $ of their paragraph is open."""
    found, open_dollars = [], 0
    for line in markdown.split("\n"):
        if not line.strip():
            open_dollars = 0
            continue
        if open_dollars % 2 and _MARKER.match(line.lstrip()):
            found.append(line)
        open_dollars += line.count("$") - 2 * line.count("$$")
    return found


@pytest.mark.parametrize("chapter", [p.stem for p in nbgen.sources()])
def test_no_wrapped_line_of_inline_math_starts_a_list(chapter):
    nb = nbformat.read(ROOT / "solutions" / f"{chapter}.ipynb", as_version=4)
    bad = [line for c in nb.cells if c.cell_type == "markdown" for line in broken_math(c.source)]
    assert not bad, f"{chapter}: a line inside $...$ starts a list, so the math shows as source: {bad}"


def test_the_check_finds_the_slip_and_passes_the_mended_text():
    slip = "For normals, $a = \\log b\n+ c$. With $q$ and\n- $x$ a list item."
    assert broken_math(slip) == ["+ c$. With $q$ and"]
    assert broken_math("For normals, $a = \\log b +\nc$. With $q$ and\n- $x$ a list item.") == []
