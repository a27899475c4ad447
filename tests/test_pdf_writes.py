"""`python -m minirlhf.course.pdf` writes only through the package's write guard: the print page
and the PDF replace a link planted where they go and never write through it; a folder, a named
pipe, an empty name or a path under a regular file is refused in one line, before the print.
No Chromium here: the browser is a stand-in that returns a PDF's bytes."""

from __future__ import annotations

import contextlib
import os
import sys
import types

import pytest

from minirlhf.course import pdf

PDF_BYTES = b"%PDF-1.4 a stand-in\n"


class _Page:
    def emulate_media(self, **kwargs):
        pass

    def goto(self, url, **kwargs):
        pass

    def evaluate(self, script, arg=None):
        return {"chapters": [], "math": 0, "images": 0, "dropdowns": 0, "sliders": 0, "raw": 0}

    def pdf(self, **kwargs):
        assert "path" not in kwargs  # the bytes come back; the package writes them
        return PDF_BYTES


class _Context:
    def set_default_timeout(self, ms):
        pass

    def new_page(self):
        return _Page()

    def close(self):
        pass


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A singlehtml build of one page, and a Chromium that needs no browser."""
    root = tmp_path / "site"
    (root / "book").mkdir(parents=True)
    (root / "book" / "index.html").write_text("<html><body><main>the book</main></body></html>")
    chromium = types.SimpleNamespace(launch_persistent_context=lambda *a, **k: _Context())
    fake = types.ModuleType("playwright.sync_api")
    fake.sync_playwright = lambda: contextlib.nullcontext(types.SimpleNamespace(chromium=chromium))
    monkeypatch.setitem(sys.modules, "playwright.sync_api", fake)
    monkeypatch.setattr(pdf, "_book_title", lambda root=None: ("minirlhf", "its authors"))
    return root


def test_a_link_planted_at_the_print_page_or_the_pdf_is_replaced_never_written_through(site, tmp_path):
    victims = [tmp_path / "victim-page.txt", tmp_path / "victim-pdf.txt"]
    for victim in victims:
        victim.write_text("a user's file")
    (site / "_print.html").symlink_to(victims[0])
    out = tmp_path / "out" / "book.pdf"
    out.parent.mkdir()
    out.symlink_to(victims[1])
    facts = pdf.make_pdf(site, out, chromium=sys.executable)
    assert [v.read_text() for v in victims] == ["a user's file"] * 2
    assert not (site / "_print.html").is_symlink() and "the book" in (site / "_print.html").read_text()
    assert not out.is_symlink() and out.read_bytes() == PDF_BYTES and facts["bytes"] == len(PDF_BYTES)
    assert sorted(p.name for p in out.parent.iterdir()) == ["book.pdf"]  # no .part left beside it


@pytest.mark.parametrize(
    "make_out, says",
    [
        (lambda d: str(d), "is a folder, not a file that can be replaced"),
        (lambda d: "", "the file name is empty"),
        (lambda d: (d / "fifo.pdf", os.mkfifo(d / "fifo.pdf"))[0], "is a named pipe"),
        (lambda d: (d / "plain", (d / "plain").write_text("x"))[0] / "book.pdf", "is a regular file, not a folder"),
    ],
)
def test_an_out_that_cannot_take_the_pdf_is_refused_in_one_line_before_the_print(
    site, tmp_path, capsys, monkeypatch, make_out, says
):
    printed = []
    monkeypatch.setattr(pdf, "make_pdf", lambda *a, **k: printed.append(1))
    rc = pdf.main([str(site), str(make_out(tmp_path)), "--chromium", sys.executable])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not printed and err.startswith("ERROR out:") and says in err and "\n" not in err


@pytest.mark.parametrize("plant", [os.mkfifo, os.mkdir])
def test_a_print_page_that_is_a_pipe_or_a_folder_is_refused_in_one_line(site, capsys, tmp_path, plant):
    plant(site / "_print.html")
    rc = pdf.main([str(site), str(tmp_path / "book.pdf"), "--chromium", sys.executable])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("ERROR the print page:") and "\n" not in err
    assert not (tmp_path / "book.pdf").exists()
