"""The browser test of the rendered book: headless Chromium against the built pages.

It runs only when asked: ``make browser`` (which sets MINIRLHF_BROWSER=1), or
``pytest tests/browser`` by name. The plain unit run, ``pytest tests``, does not collect it,
so unit tests need neither a built book nor Chromium.

Where it looks: the built book in ``_build/html`` and screenshots to ``_build/screenshots``;
MINIRLHF_HTML and MINIRLHF_SCREENSHOTS point them elsewhere (a private build, say).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from axecheck import IMPACTS
from pagecheck import CHROMIUM, HTML, SHOTS, chromium, serve

HERE = Path(__file__).resolve().parent
_REPORTS = pytest.StashKey[list]()


def _asked(config) -> bool:
    """True when the run names this folder (or a file in it), or MINIRLHF_BROWSER=1."""
    if os.environ.get("MINIRLHF_BROWSER") == "1":
        return True
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if collection_path.resolve().parent == HERE and not _asked(config):
        return True
    return None


# The run may spread over processes (`make browser` runs two, with pytest-xdist): each page's
# report travels to the main process in its test's user_properties, under this name, and the
# main process alone empties the screenshot folder before the run and writes the summary after.
PAGE_REPORT = "page_report"
_CONFIG = None  # this process's pytest config, for the hook that keeps the page reports


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    global _CONFIG
    _CONFIG = config
    config.stash[_REPORTS] = []
    if not _is_worker(config) and _asked(config):
        SHOTS.mkdir(parents=True, exist_ok=True)
        for old in SHOTS.glob("*.png"):
            old.unlink()


def pytest_runtest_logreport(report):
    """Keep the page report a test sends in its user_properties (in whichever process ran it)."""
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == PAGE_REPORT:
            _CONFIG.stash[_REPORTS].append(value)


@pytest.fixture
def report_page(request):
    """Call with a page's PageReport: it joins the summary printed at the end of the run."""

    def send(index: int, report) -> None:
        request.node.user_properties.append(
            (
                PAGE_REPORT,
                {
                    "index": index,
                    "line": report.summary(),
                    "requests": report.requests,
                    "checks": report.checks,
                    "axe": report.axe,
                },
            )
        )

    return send


@pytest.fixture(scope="session")
def chromium_context():
    """One Chromium (fresh profile) for the whole session."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `make browser` installs Debian's chromium")
    with sync_playwright() as playwright, chromium(playwright) as context:
        yield context


@pytest.fixture(scope="session")
def book_url():
    """The built book served on a localhost port."""
    if not (HTML / "index.html").exists():
        pytest.fail(f"no built book in {HTML}: run `make book` first")
    with serve(HTML) as url:
        yield url


@pytest.fixture(scope="session")
def shots() -> Path:
    """The screenshot folder (emptied of the last run's pictures when the run began)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


def pytest_terminal_summary(terminalreporter, config):
    """One line per page checked, in the order of the book; the same lines go to
    _build/screenshots/summary.txt."""
    if _is_worker(config):
        return
    found = sorted(config.stash.get(_REPORTS, []), key=lambda r: r["index"])
    if not found:
        return
    lines = [report["line"] for report in found]
    terminalreporter.section("pages checked in Chromium")
    for line in lines:
        terminalreporter.write_line(line)
    terminalreporter.write_line(
        f"{len(found)} pages, {sum(r['requests'] for r in found)} requests,"
        f" {sum(r['checks'] for r in found)} checks passed; screenshots in {SHOTS}"
    )
    runs = [counts for r in found for counts in (r.get("axe") or {}).values()]
    if runs:
        totals = {impact: sum(c.get(impact, 0) for c in runs) for impact in IMPACTS}
        line = f"axe-core, {len(runs)} runs: " + ", ".join(f"{n} {impact}" for impact, n in totals.items())
        lines.append(line)
        terminalreporter.write_line(line + " (nodes; serious and critical fail the test)")
    if SHOTS.is_dir():
        (SHOTS / "summary.txt").write_text(
            time.strftime("%Y-%m-%d %H:%M\n") + "\n".join(lines) + "\n", encoding="utf-8"
        )
