"""Every page of the table of contents, opened in headless Chromium as a reader would.

The page list comes from _toc.yml, so a new chapter is checked as soon as it is listed. Per
page: nothing loads from another host and no request fails; no console error; every image
loads and has alt text; math is typeset; every hint, worked answer, solution toggle and
dropdown opens on click and shows its content; every slider changes its explorer's figure;
nothing is wider than a phone screen; the 'next' link reaches the next page. Screenshots at
desktop and phone width go to _build/screenshots/.

Accessibility (axecheck.py), with every dropdown open: axe-core's WCAG 2.0/2.1 A and AA rules at
1280 and 390 px, and its contrast rule in dark mode, find no serious or critical violation; a
keyboard reaches every block that scrolls, which has a name and a focus ring nothing clips. The
summary gives each page's axe counts by impact.
"""

from __future__ import annotations

import pytest
from pagecheck import HTML, ROOT, check_page, toc_pages

PAGES = toc_pages(ROOT / "_toc.yml")


@pytest.mark.parametrize("index", range(len(PAGES)), ids=PAGES)
def test_page(index, book_url, chromium_context, shots, report_page):
    page = PAGES[index]
    next_page = PAGES[index + 1] if index + 1 < len(PAGES) else None
    built = HTML / f"{page}.html"
    assert built.exists(), f"{page}: listed in _toc.yml but not built ({built} is missing)"

    report = check_page(chromium_context, book_url, page, next_page, shots, accessibility=True)
    report_page(index, report)
    assert not report.problems, f"{page}: {len(report.problems)} problem(s):\n  - " + "\n  - ".join(report.problems)


def test_the_front_door_leads_to_the_first_page(book_url, chromium_context):
    """`make book` tells the reader to open _build/html/index.html: it must lead to the root."""
    page = chromium_context.new_page()
    try:
        page.goto(book_url + "index.html")
        expected = book_url + PAGES[0] + ".html"
        page.wait_for_url(expected, timeout=10_000)
    except Exception as error:
        pytest.fail(f"index.html: does not lead to {PAGES[0]}.html ({error})")
    finally:
        page.close()
