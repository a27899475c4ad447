"""Every entry of the bibliography gives a reader a way to the paper: a DOI, an arXiv number or a
web address. The browser test checks the rendered page; this catches a new entry without one
before the book is built."""

import re
from pathlib import Path

BIB = Path(__file__).resolve().parent.parent / "references.bib"


def entries(text):
    """Return (key, body) for each @type{key, ...} entry of a BibTeX file."""
    starts = [m for m in re.finditer(r"^@\w+\{([^,]+),", text, flags=re.M)]
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [(m.group(1).strip(), text[m.end() : end]) for m, end in zip(starts, ends)]


def test_every_entry_has_a_doi_an_arxiv_number_or_an_address():
    found = entries(BIB.read_text())
    assert len(found) > 10
    unlinked = [key for key, body in found if not re.search(r"^\s*(doi|eprint|url)\s*=\s*\{\S", body, flags=re.M)]
    assert not unlinked, f"references.bib entries with no doi, eprint or url: {unlinked}"


def test_the_check_finds_an_entry_without_a_link():
    text = "@article{a,\n  title = {A},\n  doi = {10.1/x}\n}\n@misc{b,\n  title = {B}\n}\n"
    assert [k for k, body in entries(text) if "doi" not in body] == ["b"]
