"""The book's own tools, as a reader uses them in Chromium (helpers for test_site.py).

* MathJax's accessibility explorer, turned on from MathJax's own menu: everything it loads
  comes from the book, the math stays on the page and gets speech.
* The download menu: the chapter's notebooks and the course archive.
* One search box per page, search snippets that show math as text, a favicon.

Kept apart from pagecheck.py (the per-page reading checks) on purpose: each function here
takes an open Playwright page and returns what it found, and test_site.py judges it.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from dataclasses import dataclass, field

from pagecheck import DESKTOP, PHONE

EXPLORER_TIMEOUT_MS = 60_000  # enriching every formula of a long chapter takes a while
MATHJAX_SETTINGS = "MathJax-Menu-Settings"  # where MathJax's menu keeps a reader's choices


@dataclass
class Traffic:
    """Every request of a page, those that went (or tried to go) to another host, the failed
    ones (HTTP >= 400 or no answer), and console errors."""

    local: str
    requests: list[str] = field(default_factory=list)
    remote: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def since(self, mark: dict) -> dict:
        """Return what happened after ``mark`` (a :meth:`mark`)."""
        return {key: getattr(self, key)[n:] for key, n in mark.items()}

    def mark(self) -> dict:
        return {key: len(getattr(self, key)) for key in ("requests", "remote", "failed", "errors")}


@contextlib.contextmanager
def watched_page(context, base_url: str):
    """Yield ``(page, traffic)``: a new page whose requests to another host are recorded and
    blocked, and whose failed requests and console errors are recorded."""
    traffic = Traffic(urllib.parse.urlsplit(base_url).netloc)

    def route(r):
        if urllib.parse.urlsplit(r.request.url).netloc == traffic.local:
            r.continue_()
        else:
            traffic.remote.append(r.request.url)
            r.abort()

    page = context.new_page()
    page.set_viewport_size(DESKTOP)
    page.route("**/*", route)
    page.on("request", lambda r: traffic.requests.append(r.url))
    page.on("requestfailed", lambda r: r.url not in traffic.remote and traffic.failed.append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and traffic.failed.append(f"{r.url} (HTTP {r.status})"))
    page.on("console", lambda m: m.type == "error" and traffic.errors.append(m.text))
    page.on("pageerror", lambda e: traffic.errors.append(f"uncaught {e}"))
    try:
        yield page, traffic
    finally:
        with contextlib.suppress(Exception):  # leave no MathJax setting to the next page
            page.evaluate(f"() => localStorage.removeItem('{MATHJAX_SETTINGS}')")
        page.close()


def open_page(page, url: str) -> None:
    page.goto(url, wait_until="load")
    with contextlib.suppress(Exception):
        page.wait_for_load_state("networkidle", timeout=5_000)


# ---------------------------------------------------------------------------------------------
# MathJax's accessibility explorer
# ---------------------------------------------------------------------------------------------

_MATH_STATE_JS = """() => {
  const maths = [...document.querySelectorAll('.math')];
  const containers = maths.map(m => m.querySelector('mjx-container'));
  return {
    formulas: maths.length,
    rendered: containers.filter(c => c).length,
    spoken: containers.filter(c => c && (c.getAttribute('aria-label') || '').trim()).length,
    errors: document.querySelectorAll('mjx-merror').length,
  };
}"""


def math_state(page) -> dict:
    """Return how many formulas the page has, how many are typeset, how many carry speech
    (an aria-label, which MathJax writes once the explorer is on) and MathJax errors."""
    return page.evaluate(_MATH_STATE_JS)


def wait_for_mathjax(page) -> None:
    page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")


def turn_on_explorer(page) -> None:
    """Turn the explorer on as a reader does: right-click a formula, then Accessibility >
    Activate in MathJax's menu."""
    formula = page.locator("article mjx-container:visible").first
    formula.scroll_into_view_if_needed()
    formula.click(button="right")
    page.locator(".CtxtMenu_MenuItem", has_text="Accessibility").first.hover()
    page.locator(".CtxtMenu_MenuItem", has_text="Activate").first.click()


def wait_until_spoken(page) -> bool:
    """Wait until every formula is typeset again and carries speech; return False on time-out."""
    try:
        page.wait_for_function(
            f"() => {{ const s = ({_MATH_STATE_JS})(); return s.formulas > 0 &&"
            " s.rendered === s.formulas && s.spoken === s.formulas; }",
            timeout=EXPLORER_TIMEOUT_MS,
            polling=250,
        )
        return True
    except Exception:
        return False


def explore_first_formula(page) -> str:
    """Enter the first visible formula with the keyboard, step into it, and return what the
    explorer's live region says."""
    formula = page.locator("article mjx-container:visible").first
    formula.focus()
    page.keyboard.press("Enter")
    page.keyboard.press("ArrowDown")
    page.wait_for_timeout(500)
    return page.evaluate("""() => [...document.querySelectorAll('.MJX_LiveRegion')]
        .map(r => r.textContent.trim()).filter(t => t).join(' | ')""")


# ---------------------------------------------------------------------------------------------
# The download menu, search boxes, the favicon
# ---------------------------------------------------------------------------------------------


def download_menu(page) -> dict[str, dict]:
    """Return the entries of the page's download menu by their button class:
    {label: {text, href (absolute), download}}."""
    return {
        entry["label"]: entry
        for entry in page.evaluate("""() =>
        [...document.querySelectorAll('.dropdown-download-buttons .dropdown-item')].map(el => ({
          label: [...el.classList].find(c => c.startsWith('btn-download-')) || '',
          text: el.textContent.trim(), href: el.href || null,
          download: el.getAttribute('download')}))""")
    }


def download(page, label: str, folder):
    """Open the download menu, click the entry ``label`` and return the saved file's path."""
    page.locator(".dropdown-download-buttons > button").click()
    with page.expect_download() as info:
        page.locator(f".dropdown-download-buttons a.{label}").click()
    saved = folder / info.value.suggested_filename
    info.value.save_as(saved)
    page.keyboard.press("Escape")
    return saved


_SEARCH_BOXES_JS = """() => [...document.querySelectorAll(
    'input[type="search"], .search-button__button, .search-button-field')]
  .filter(el => el.checkVisibility({visibilityProperty: true, opacityProperty: true}) &&
                el.getBoundingClientRect().width > 0)
  .map(el => el.tagName.toLowerCase() + '.' + [...el.classList].slice(0, 3).join('.'))"""


def search_boxes(page) -> dict[int, list[str]]:
    """Return the visible search fields and buttons at desktop and at phone width."""
    found = {}
    for size in (DESKTOP, PHONE):
        page.set_viewport_size(size)
        page.wait_for_timeout(300)
        found[size["width"]] = page.evaluate(_SEARCH_BOXES_JS)
    page.set_viewport_size(DESKTOP)
    return found


def favicon(page) -> tuple[str | None, int, str]:
    """Return the page's icon URL, and the HTTP status and content type it is served with."""
    href = page.evaluate("() => { const l = document.querySelector('link[rel~=\"icon\"]'); return l ? l.href : null; }")
    if not href:
        return None, 0, ""
    response = page.request.get(href)
    return href, response.status, response.headers.get("content-type", "")


def status_of(page, url: str) -> int:
    return page.request.get(url).status


def search_snippets(page, base_url: str, query: str) -> list[str]:
    """Search the book for ``query`` and return the text of each result's snippet."""
    open_page(page, urllib.parse.urljoin(base_url, "search.html?q=" + urllib.parse.quote(query)))
    page.wait_for_function(
        "() => /finished/i.test((document.querySelector('#search-results .search-summary')"
        " || document.querySelector('.search-summary') || {}).textContent || '')",
        timeout=30_000,
    )
    # Each snippet is read from its result's page, and may arrive after that line.
    page.wait_for_function(
        "() => { const items = document.querySelectorAll('#search-results li');"
        " return [...items].every(li => li.querySelector('p.context')); }",
        timeout=15_000,
    )
    return page.evaluate("() => [...document.querySelectorAll('#search-results li p.context')].map(p => p.textContent)")
