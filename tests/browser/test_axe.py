"""The accessibility check (axecheck.py) and the book's own fixes for what it finds.

Small pages, each holding one thing the book shows (a printed output that scrolls on a phone, a
check report's badge, the reference list, a figure's caption on dark mode's light panel, the
theme's "Back to top" button), are served with the theme's style sheets. With the book's own
_static/custom.css and minirlhf.js the check passes them; without, it names the rule, the width
and the element that fail.
"""

from __future__ import annotations

from pathlib import Path

import pydata_sphinx_theme
import pytest
import sphinx_book_theme
from axecheck import check_accessibility, summary
from pagecheck import DESKTOP, PHONE, ROOT, PageReport, serve
from PIL import Image

from minirlhf.course.cases import CaseResult
from minirlhf.course.exercises import get
from minirlhf.course.report import Report

# The theme's two style sheets, as the book loads them: pydata-sphinx-theme's and the book theme's.
THEME_CSS = [
    Path(pydata_sphinx_theme.__file__).parent / "theme/pydata_sphinx_theme/static/styles/pydata-sphinx-theme.css",
    Path(sphinx_book_theme.__file__).parent / "theme/sphinx_book_theme/static/styles/sphinx-book-theme.css",
]
BOOK_FILES = '<link rel="stylesheet" href="custom.css"><script src="minirlhf.js"></script>'

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{name}</title>
<link rel="stylesheet" href="theme.css">{book}</head>
<body><main><div class="bd-content"><article class="bd-article"><section id="{name}">
<h1>{name}</h1>
{body}
</section></article></div></main></body></html>
"""

LONG = "a printed line too long for a phone held upright, so that its block scrolls " * 2
# A cell's printed output, as the book's build writes it.
OUTPUT = (
    '<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi'
    f' notranslate"><div class="highlight"><pre><span></span>{LONG}\nshort line\n</pre></div></div></div>'
)
# ... and one whose block already has the theme's tab stop, a role and a name, but whose focus
# ring the theme draws outside the block, where the output's own scrolling box cuts it off.
NAMED_OUTPUT = OUTPUT.replace("<pre>", '<pre tabindex="0" role="region" aria-label="Output 1">')
# A block with the theme's tab stop and nothing more: a keyboard stops on it, a screen reader
# hears no name.
BARE_TAB_STOP = OUTPUT.replace("<pre>", '<pre tabindex="0">')
# The reference list as Sphinx writes it (sphinxcontrib-bibtex).
REFERENCES = """<div class="docutils container" id="id1"><div role="list" class="citation-list">
<div class="citation" id="id21" role="doc-biblioentry">
<span class="label"><span class="fn-bracket">[</span>Ach18<span class="fn-bracket">]</span></span>
<p>Joshua Achiam. Spinning up in deep reinforcement learning. 2018. URL:
<a class="reference external" href="#id1">https://spinningup.openai.com</a>.</p></div>
<div class="citation" id="id16" role="doc-biblioentry">
<span class="label"><span class="fn-bracket">[</span>Sch17<span class="fn-bracket">]</span></span>
<p>John Schulman et al. Proximal policy optimization algorithms. 2017.</p></div>
</div></div>"""
# A figure's caption in a cell's HTML output (the dark mode draws that output on a light panel).
FIGURE = """<div class="cell_output docutils container"><div class="output text_html">
<figure class="mr-figure"><img src="red.png" alt="A red square" width="40" height="40">
<figcaption>A red square; the caption is set in the theme's muted gray.</figcaption></figure>
</div></div>"""
# The theme's "Back to top" button, as it shows on a phone scrolled down.
BACK_TO_TOP = (
    '<p>A page scrolled down.</p><button type="button" class="btn btn-sm" id="pst-back-to-top"'
    ' style="display: block">Back to top</button>'
)


def check_reports() -> str:
    """A passing and a failing check report, as minirlhf.course.report draws them."""
    kl = get("kl_penalty")
    passed = Report(kl, [CaseResult(case, True) for case in kl.cases])
    failed = Report(
        kl,
        [CaseResult(kl.cases[0], False, None, "the result is None", mistake="type")]
        + [CaseResult(case, True) for case in kl.cases[1:]],
    )
    return "".join(
        f'<div class="cell_output docutils container"><div class="output text_html">{r._repr_html_()}</div></div>'
        for r in (passed, failed)
    )


# name: (body, what the check reports without the book's files: one problem each, given by
# pieces of its sentence)
CASES = {
    "output": (
        OUTPUT,
        [
            ("at 390 px 1 block(s) scroll but a keyboard cannot reach them", "pre in #output"),
            ("axe scrollable-region-focusable (serious) at 390 px: pre:",),
        ],
    ),
    "tabstop": (
        BARE_TAB_STOP,
        [("at 390 px 1 scrolling block(s) take the focus without a role and a name", "pre in #tabstop")],
    ),
    "ring": (
        NAMED_OUTPUT,
        [("at 390 px the focus ring of the scrolling block 'Output 1' is cut off by the div.output",)],
    ),
    "reports": (
        check_reports(),
        [
            ("axe color-contrast (serious) at 1280 px: .mr-pass > p > span (+1 more)", "#009e73"),
            ("axe color-contrast (serious) at 390 px: .mr-pass > p > span",),
            ("axe scrollable-region-focusable (serious) at 390 px", ".output.text_html"),
        ],
    ),
    "references": (
        REFERENCES,
        [
            ("axe aria-required-children (critical) at 1280 px: .citation-list",),
            ("axe aria-required-children (critical) at 390 px: .citation-list",),
        ],
    ),
    "figure": (FIGURE, [("axe color-contrast (serious) at 1280 px dark: figcaption", "1.71")]),
    "backtotop": (BACK_TO_TOP, [("axe color-contrast (serious) at 390 px: #pst-back-to-top", "2.45")]),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("a11y")
    Image.new("RGB", (80, 80), "#D55E00").save(folder / "red.png")
    (folder / "theme.css").write_text("\n".join(p.read_text(encoding="utf-8") for p in THEME_CSS), encoding="utf-8")
    for name in ("custom.css", "minirlhf.js"):
        (folder / name).write_text((ROOT / "_static" / name).read_text(encoding="utf-8"), encoding="utf-8")
    for name, (body, _) in CASES.items():
        for suffix, book in (("", BOOK_FILES), ("-bare", "")):
            page = PAGE.format(name=name, book=book, body=body)
            (folder / f"{name}{suffix}.html").write_text(page, encoding="utf-8")
    with serve(folder) as url:
        yield url


def accessibility(context, url: str, page_name: str) -> PageReport:
    page = context.new_page()
    try:
        page.set_viewport_size(DESKTOP)
        page.goto(f"{url}{page_name}.html", wait_until="load")
        report = PageReport(page_name)
        check_accessibility(page, report, DESKTOP, PHONE)
        return report
    finally:
        page.close()


@pytest.mark.parametrize("name", list(CASES))
def test_the_books_files_make_the_page_pass(site, chromium_context, name):
    report = accessibility(chromium_context, site, name)
    assert report.problems == []
    # axe ran three times (1280 px, 390 px, dark mode) and the summary says what it counted
    assert list(report.axe) == ["1280 px", "390 px", "1280 px dark"]
    assert all(counts["serious"] == counts["critical"] == 0 for counts in report.axe.values())
    assert summary(report.axe).startswith("axe (critical/serious/moderate/minor): 1280 px 0/0/")


@pytest.mark.parametrize("name", list(CASES))
def test_without_them_the_check_names_rule_width_and_element(site, chromium_context, name):
    report = accessibility(chromium_context, site, name + "-bare")
    missed = [e for e in CASES[name][1] if not any(all(p in problem for p in e) for problem in report.problems)]
    assert not missed, f"not reported: {missed}\nreported: {report.problems}"


def test_a_scrolling_block_is_named_by_what_it_holds(site, chromium_context):
    """The book's script names an output 'Output N, scrollable' while it scrolls, and takes the
    tab stop, role and name away again when the block fits (the wide screen)."""
    page = chromium_context.new_page()
    try:
        page.set_viewport_size(PHONE)
        page.goto(f"{site}output.html", wait_until="load")
        page.wait_for_timeout(100)
        pre = page.locator("pre")
        assert pre.evaluate("el => [el.tabIndex, el.getAttribute('role'), el.getAttribute('aria-label')]") == [
            0,
            "region",
            "Output 2, scrollable",  # the output's box is Output 1
        ]
        page.evaluate("() => document.querySelector('pre').textContent = 'short'")
        page.set_viewport_size(DESKTOP)
        page.wait_for_timeout(100)
        assert pre.evaluate("el => [el.tabIndex, el.getAttribute('role'), el.getAttribute('aria-label')]") == [
            -1,
            None,
            None,
        ]
    finally:
        page.close()
