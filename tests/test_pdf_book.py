"""The whole book as one PDF (`make pdf-check`, part of `make test`): what a reader finds in it.

Runs only when asked (MINIRLHF_PDF=1, as `make pdf-check` sets), after `make pdf`; it reads the
PDF with poppler's pdftotext and pdftohtml (Debian's poppler-utils). The unit run skips it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PDF = ROOT / "_build" / "pdf" / "minirlhf-book.pdf"

pytestmark = pytest.mark.skipif(os.environ.get("MINIRLHF_PDF") != "1", reason="MINIRLHF_PDF=1 (make pdf-check)")


def _pages() -> list[Path]:
    """The source of every page of _toc.yml, in the book's order."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    names = [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]
    found = []
    for name in names:
        for suffix in (".ipynb", ".md"):
            if (ROOT / (name + suffix)).exists():
                found.append(ROOT / (name + suffix))
                break
    return found


def _markdown(path: Path) -> str:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    text = path.read_text(encoding="utf-8")
    return re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)


def _title(path: Path) -> str:
    return re.search(r"^# (.+)$", _markdown(path), re.M).group(1).strip()


def _sentence(path: Path) -> str | None:
    """The opening words of the page's first paragraph, up to the first markup."""
    body = _markdown(path).split("\n", 1)[1]
    for paragraph in re.split(r"\n\s*\n", body):
        if not paragraph.strip() or paragraph.lstrip().startswith(("#", "```", ":::", "<", "|", "-", "!")):
            continue
        plain = re.split(r"[*_`{$\\\[<]", " ".join(paragraph.split()))[0]
        words = plain.split()[:12]
        if len(words) >= 5:
            return " ".join(words)
    return None


def _norm(text: str) -> str:
    text = text.replace("\u00ad", "").replace("\ufb01", "fi").replace("\ufb02", "fl")
    text = re.sub(r"-\s+", "-", text)  # a word broken at its hyphen at the end of a line
    return " ".join(text.replace("\u2019", "'").split())


@pytest.fixture(scope="module")
def text() -> str:
    if not PDF.is_file():
        pytest.fail(f"no {PDF}: run `make pdf` first")
    if shutil.which("pdftotext") is None:
        pytest.fail("no pdftotext: apt-get install poppler-utils")
    out = subprocess.run(["pdftotext", "-enc", "UTF-8", str(PDF), "-"], capture_output=True, text=True, check=True)
    return out.stdout


@pytest.fixture(scope="module")
def outline() -> list[tuple[int, str]]:
    """(depth, title) of every bookmark, in order (pdftohtml -xml writes the outline)."""
    out = subprocess.run(
        ["pdftohtml", "-xml", "-i", "-q", "-stdout", "-f", "1", "-l", "1", str(PDF)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    root = ET.fromstring(out.encode("utf-8"))
    found: list[tuple[int, str]] = []

    def walk(node, depth):
        for child in node:
            if child.tag == "item":
                found.append((depth, " ".join("".join(child.itertext()).split())))
            elif child.tag == "outline":
                walk(child, depth + 1)

    for top in root.findall("outline"):
        walk(top, 0)
    return found


def test_the_pdf_exists_and_says_its_size():
    assert PDF.is_file() and PDF.stat().st_size > 100_000
    print(f"{PDF.relative_to(ROOT)}: {PDF.stat().st_size / 1e6:.1f} MB")


def test_every_chapter_has_an_outline_entry(outline):
    # Compared without spaces: a bookmark of a heading that wraps loses the space at the break.
    titles = ["".join(_norm(t).split()) for _, t in outline]
    for page in _pages():
        title = "".join(_norm(_title(page)).split())
        assert any(t.startswith(title) for t in titles), f"no bookmark for {_title(page)!r}"

    # Sections sit under their chapter.
    assert any(depth > min(d for d, _ in outline) for depth, _ in outline), "the outline is flat"


def test_every_chapter_title_and_a_sentence_of_it_are_in_the_text(text):
    flat = _norm(text)
    for page in _pages():
        assert _norm(_title(page)) in flat, f"the title of {page.name} is not in the PDF's text"
        sentence = _sentence(page)
        if sentence:
            assert _norm(sentence) in flat, f"{page.name}: {sentence!r} is not in the PDF's text"


def test_no_math_source_leaks_into_the_text(text):
    for source in ("\\frac", "$$", "\\mathrm", "\\begin{"):
        assert source not in text, f"{source!r} in the PDF's text: some math was not typeset"
    # Inline math left between its delimiters (code may hold a lone \[ or \(, as a regex does).
    assert not re.search(r"\\\(.{0,200}?\\\)", text, re.S), "inline math left as \\( ... \\)"


def test_sliders_are_printed_with_their_note(text):
    assert "interactive version of this figure" in _norm(text)
