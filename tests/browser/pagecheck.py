"""Open the rendered book in headless Chromium and check each page as a reader meets it.

``check_page`` loads one page from a local server and returns a ``PageReport``: how many
requests the page made, how many checks passed, and one plain sentence per problem. The
checks are generic (they look for images, math, dropdowns and sliders on whatever page they
are given), so a new chapter is covered as soon as it is in ``_toc.yml``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from axecheck import check_accessibility
from axecheck import summary as axe_summary

# The built book on a localhost port, and the Chromium `make pdf` uses with its flags (no sandbox,
# as CI runs as root; no GPU; nothing Chromium would fetch on its own account).
from minirlhf.course.pdf import CHROMIUM as CHROMIUM
from minirlhf.course.pdf import CHROMIUM_ARGS as CHROMIUM_ARGS
from minirlhf.course.pdf import serve as serve

ROOT = Path(__file__).resolve().parents[2]
# The built book and the screenshot folder; MINIRLHF_HTML / MINIRLHF_SCREENSHOTS point them at
# a private build.
HTML = Path(os.environ.get("MINIRLHF_HTML", ROOT / "_build" / "html"))
SHOTS = Path(os.environ.get("MINIRLHF_SCREENSHOTS", ROOT / "_build" / "screenshots"))
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
TIMEOUT_MS = 15_000
SOURCE_SUFFIXES = (".md", ".ipynb", ".rst")
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp")


# ---------------------------------------------------------------------------------------------
# The pages: _toc.yml in reading order
# ---------------------------------------------------------------------------------------------


def toc_pages(toc_file: Path) -> list[str]:
    """Return the docnames of a Jupyter Book ``_toc.yml`` in reading order, root first."""
    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8"))
    source = toc_file.parent
    pages = [_docname(toc["root"])]

    def walk(node: dict) -> None:
        for key in ("parts", "chapters", "sections"):
            for entry in node.get(key) or []:
                if "file" in entry:
                    pages.append(_docname(entry["file"]))
                elif "glob" in entry:
                    found = {
                        p.relative_to(source).with_suffix("").as_posix()
                        for suffix in SOURCE_SUFFIXES
                        for p in source.glob(entry["glob"] + suffix)
                    }
                    pages.extend(sorted(found))
                walk(entry)  # a part holds chapters, a chapter may hold sections

    walk(toc)
    return list(dict.fromkeys(pages))  # a glob may match a page listed by name too


def _docname(path: str) -> str:
    """Return a _toc.yml file entry without its source suffix."""
    for suffix in SOURCE_SUFFIXES:
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


# ---------------------------------------------------------------------------------------------
# A local server and a fresh browser
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def chromium(playwright):
    """Yield a browser context of the system Chromium with a fresh, throw-away profile."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=DESKTOP,
            service_workers="block",
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


# ---------------------------------------------------------------------------------------------
# One page
# ---------------------------------------------------------------------------------------------


@dataclass
class PageReport:
    """What one page did: requests made, checks passed, and the problems found."""

    page: str
    seconds: float = 0.0
    requests: int = 0
    checks: int = 0
    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    axe: dict[str, dict[str, int]] = field(default_factory=dict)  # per axe run: nodes by impact

    def check(self, ok: bool, problem: str) -> bool:
        """Count a passed check, or record ``problem``; return ``ok``."""
        if ok:
            self.checks += 1
        else:
            self.problems.append(problem)
        return ok

    def summary(self) -> str:
        """Return one line: page, requests, checks passed, problems, what was found."""
        found = ", ".join(f"{n} {what}" for what, n in self.counts.items() if n)
        status = "ok" if not self.problems else f"{len(self.problems)} PROBLEMS"
        line = (
            f"{self.page:<34} {self.seconds:5.1f} s {self.requests:>4} requests"
            f" {self.checks:>4} checks passed  {status}  ({found or 'nothing to open'})"
        )
        return line + (f"\n{'':<34} {axe_summary(self.axe)}" if self.axe else "")


def check_page(
    context,
    base_url: str,
    page_name: str,
    next_page: str | None = None,
    shots: Path | None = None,
    accessibility: bool = False,
) -> PageReport:
    """Open ``page_name`` (a docname) in ``context``, run every check, return the report.

    ``accessibility``: also run axe-core and the keyboard checks of axecheck.py, with every
    dropdown open (the book's pages; a bare test page would fail on what only a theme gives)."""
    report = PageReport(page_name)
    start = time.perf_counter()
    url = urllib.parse.urljoin(base_url, page_name + ".html")
    local = urllib.parse.urlsplit(base_url).netloc
    requests, remote, failed, console = [], [], [], []

    def route(r):
        if urllib.parse.urlsplit(r.request.url).netloc == local:
            r.continue_()
        else:
            remote.append(r.request.url)
            r.abort()

    page = context.new_page()
    page.set_viewport_size(DESKTOP)
    page.route("**/*", route)
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: r.url not in remote and failed.append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.url} (HTTP {r.status})"))
    page.on("console", lambda m: m.type == "error" and console.append(m.text))
    page.on("pageerror", lambda e: console.append(f"uncaught {e}"))
    try:
        response = page.goto(url, wait_until="load")
        if not report.check(
            response is not None and response.ok,
            f"the page {url} did not load (HTTP {response.status if response else 'none'})",
        ):
            return report
        with contextlib.suppress(Exception):  # a page that keeps polling still gets checked
            page.wait_for_load_state("networkidle", timeout=5_000)

        _check_no_dead_widgets(page, report)
        _check_remote_references(page, report)
        _check_math(page, report)
        _check_images(page, report)
        check_layout(page, report)
        if shots:
            _screenshots(page, report, shots, page_name, "")
        _check_togglebuttons(page, report)
        _check_details(page, report)
        _check_sliders(page, report)
        opened = ("toggle admonitions", "hints", "answers", "code toggles", "other dropdowns")
        if shots and any(report.counts.get(kind) for kind in opened):
            _screenshots(page, report, shots, page_name, "-open")
        if accessibility:
            check_accessibility(page, report, DESKTOP, PHONE)
        page.wait_for_timeout(100)  # let the last events arrive

        report.requests = len(requests)
        report.counts["remote requests"] = len(remote)
        report.check(not remote, "it requested another host: " + _list(remote))
        report.check(not failed, "a request failed: " + _list(failed))
        report.check(not console, "the console shows an error: " + _list(console))

        _check_next(page, report, base_url, next_page)
    except Exception as error:  # a crash in one check must still name the page
        report.problems.append(f"the browser check stopped: {type(error).__name__}: {error}")
    finally:
        page.close()
        report.seconds = time.perf_counter() - start
    return report


def _list(items: list[str], limit: int = 5) -> str:
    """Return the distinct items joined by '; ', at most ``limit`` of them."""
    distinct = list(dict.fromkeys(items))
    more = f" (+{len(distinct) - limit} more)" if len(distinct) > limit else ""
    return "; ".join(distinct[:limit]) + more


def _short(text: str | None, limit: int = 70) -> str:
    """Return ``text`` on one line, cut to ``limit`` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------


def _check_no_dead_widgets(page, report: PageReport) -> None:
    """A saved ipywidgets view shows as an empty box in a page without a kernel."""
    n = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    report.check(
        n == 0,
        f"{n} ipywidgets output(s) that need a kernel: in the book an explorer"
        " must be a client-side slider over precomputed frames",
    )


_REMOTE_REFERENCES_JS = """() => {
  const loads = 'script[src], img[src], iframe[src], source[src], video[src], audio[src], ' +
    'embed[src], object[data], link[href]:not([rel~="next"]):not([rel~="prev"])' +
    ':not([rel~="index"]):not([rel~="search"]):not([rel~="canonical"]):not([rel~="alternate"])';
  return [...document.querySelectorAll(loads)]
    .map(el => [el.tagName.toLowerCase(), el.src || el.href || el.data || ''])
    .filter(([, url]) => /^https?:/.test(url) && new URL(url).host !== location.host)
    .map(([tag, url]) => `<${tag}> ${url}`);
}"""


def _check_remote_references(page, report: PageReport) -> None:
    """Resources that would load from another host on some later event (lazy, on click)."""
    found = page.evaluate(_REMOTE_REFERENCES_JS)
    report.check(not found, "it refers to a resource on another host: " + _list(found))


_MATH_JS = """async () => {
  const maths = [...document.querySelectorAll('.math')];
  if (!maths.length) return {count: 0};
  const mj = window.MathJax;
  if (!(mj && mj.startup && mj.startup.promise)) return {count: maths.length, loaded: false};
  const timeout = new Promise(resolve => setTimeout(() => resolve('timeout'), 20000));
  const done = await Promise.race([mj.startup.promise.then(() => 'done'), timeout]);
  return {
    count: maths.length, loaded: done === 'done',
    unrendered: maths.filter(m => !m.querySelector('mjx-container'))
                     .map(m => m.textContent.trim().slice(0, 60)),
    errors: [...document.querySelectorAll('mjx-merror')]
              .map(e => e.getAttribute('data-mjx-error') || e.textContent.slice(0, 60)),
  };
}"""


def _check_math(page, report: PageReport) -> None:
    math = page.evaluate(_MATH_JS)
    report.counts["math"] = math["count"]
    if not math["count"]:
        return
    if not report.check(
        math["loaded"], f"the page has {math['count']} formulas but MathJax did not load or did not finish"
    ):
        return
    report.check(
        not math["unrendered"], f"{len(math['unrendered'])} formula(s) not rendered: " + _list(math["unrendered"])
    )
    report.check(not math["errors"], "MathJax could not typeset: " + _list(math["errors"]))


_IMAGES_JS = """async () => {
  const imgs = [...document.querySelectorAll('img')];
  imgs.forEach(img => { img.loading = 'eager'; });
  await Promise.all(imgs.map(img => img.complete ? null : new Promise(resolve => {
    img.addEventListener('load', resolve, {once: true});
    img.addEventListener('error', resolve, {once: true});
    setTimeout(resolve, 10000);
  })));
  return imgs.map(img => ({
    src: img.getAttribute('src') || '', alt: img.getAttribute('alt'), width: img.naturalWidth,
    where: (img.closest('section[id]') || {}).id || '',
  }));
}"""


def _check_images(page, report: PageReport) -> None:
    images = page.evaluate(_IMAGES_JS)
    report.counts["images"] = len(images)
    for img in images:
        name = f"image {_short(img['src'], 60)}" + (f" in #{img['where']}" if img["where"] else "")
        report.check(img["width"] > 0, f"{name} did not load (natural width 0)")
        alt = (img["alt"] or "").strip()
        if report.check(bool(alt), f"{name} has no alt text"):
            report.check(
                not _is_file_name(alt, img["src"]),
                f"{name}: its alt text is only the file name ({_short(alt, 40)}); describe what the figure shows",
            )


def _is_file_name(alt: str, src: str) -> bool:
    """True for the alt text Sphinx writes when a notebook image has none: its own path."""
    base = src.rsplit("/", 1)[-1]
    return alt in (src, base) or (" " not in alt and alt.lower().endswith(IMAGE_SUFFIXES))


_CONTENT_SHOWN_JS = """(el, skip) => {
  const parts = [...el.children].filter(c => !c.matches(skip));
  return parts.some(c => {
    const r = c.getBoundingClientRect();
    return r.width > 0 && r.height > 0 &&
      (c.innerText.trim() !== '' || c.querySelector('img, svg, canvas, mjx-container') !== null);
  });
}"""


def _check_togglebuttons(page, report: PageReport) -> None:
    """sphinx-togglebutton admonitions (``:class: dropdown``): the title opens them."""
    items = page.locator("article .toggle.admonition")
    report.counts["toggle admonitions"] = items.count()
    for i in range(items.count()):
        item = items.nth(i)
        title = item.locator(":scope > .admonition-title")
        label = f"dropdown '{_short(title.inner_text(), 50)}'"
        title.click()
        page.wait_for_timeout(50)
        opened = not item.evaluate("el => el.classList.contains('toggle-hidden')")
        if report.check(opened, f"{label} does not open on click"):
            report.check(item.evaluate(_CONTENT_SHOWN_JS, ".admonition-title"), f"{label} opens but shows nothing")


_DETAILS_KIND_JS = """d => d.classList.contains('hint') ? 'hints'
  : d.classList.contains('answer') ? 'answers'
  : d.closest('.cell') ? 'code toggles'
  : 'other dropdowns'"""


def _check_details(page, report: PageReport) -> None:
    """Hints, worked answers, hidden solution cells and any other <details> in the article."""
    details = page.locator("article details")
    for kind in ("hints", "answers", "code toggles", "other dropdowns"):
        report.counts.setdefault(kind, 0)
    for i in range(details.count()):
        d = details.nth(i)
        kind = d.evaluate(_DETAILS_KIND_JS)
        report.counts[kind] += 1
        summary = d.locator(":scope > summary")
        if not report.check(summary.count() == 1, f"a <details> ({kind}) has no <summary>"):
            continue
        label = f"{kind[:-1]} '{_short(summary.inner_text(), 50)}'"
        if not d.evaluate("d => d.open"):
            summary.click()
        if report.check(d.evaluate("d => d.open"), f"{label} does not open on click"):
            report.check(d.evaluate(_CONTENT_SHOWN_JS, "summary"), f"{label} opens but shows nothing")


_EXPLORER_JS = """input => {
  const box = input.closest('.cell_output, .output, figure') || input.closest('section')
              || input.parentElement;
  const clone = box.cloneNode(true);
  clone.querySelectorAll('input').forEach(i => i.remove());
  return {
    images: [...box.querySelectorAll('img')].map(i => i.getAttribute('src') || ''),
    loaded: [...box.querySelectorAll('img')].every(i => i.complete && i.naturalWidth > 0),
    html: clone.innerHTML,
    value: input.value, min: input.min || '0', max: input.max || '100',
    label: input.getAttribute('aria-label') || (input.labels && input.labels[0]
           ? input.labels[0].innerText : '') || input.id || input.name || '',
  };
}"""


def _check_sliders(page, report: PageReport) -> None:
    """Each client-side slider must change what its explorer shows, and change it back."""
    sliders = page.locator('article input[type="range"]')
    report.counts["sliders"] = sliders.count()
    for i in range(sliders.count()):
        slider = sliders.nth(i)
        before = slider.evaluate(_EXPLORER_JS)
        label = f"slider {i + 1} '{_short(before['label'], 40)}'"
        if not report.check(slider.is_visible(), f"{label} is not visible"):
            continue
        slider.focus()
        at_max = float(before["value"]) >= float(before["max"])
        page.keyboard.press("Home" if at_max else "End")
        try:
            page.wait_for_function(
                "([input, value]) => input.value !== value",
                arg=[slider.element_handle(), before["value"]],
                timeout=2_000,
            )
        except Exception:
            report.check(False, f"{label} does not move with the keyboard")
            continue
        page.wait_for_timeout(150)  # the explorer swaps its frame on the input event
        after = slider.evaluate(_EXPLORER_JS)
        if before["images"]:
            changed = after["images"] != before["images"]
            what = "the figure (img src)"
        else:
            changed = after["html"] != before["html"]
            what = "what the explorer shows"
        report.check(changed, f"{label} moved from {before['value']} to {after['value']} but {what} did not change")
        report.check(after["loaded"], f"{label}: the figure at {after['value']} did not load")
        # Back to the start: the explorer must show its first frame again.
        slider.evaluate(
            """(input, value) => {
            input.value = value;
            input.dispatchEvent(new Event('input', {bubbles: true}));
            input.dispatchEvent(new Event('change', {bubbles: true}));
        }""",
            before["value"],
        )
        page.wait_for_timeout(150)
        back = slider.evaluate(_EXPLORER_JS)
        report.check(
            back["images"] == before["images"] and back["html"] == before["html"],
            f"{label} set back to {before['value']} does not show its first view again",
        )


_OVERFLOW_JS = """() => {
  const W = document.documentElement.clientWidth;
  const main = document.querySelector('main') || document.body;
  const describe = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.classList.length ? '.' + [...el.classList].slice(0, 2).join('.') : '');
  const bad = new Set(), out = [];
  for (const el of main.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || r.right <= W + 1) continue;
    if (!el.checkVisibility({visibilityProperty: true})) continue;  // a closed side drawer
    // Fixed layers (drawers, overlays) do not widen the page, and clipped elements are for
    // screen readers only (MathJax's MathML copy).
    let hidden = false;
    for (let a = el; a && a !== document.documentElement && !hidden; a = a.parentElement) {
      const style = getComputedStyle(a);
      hidden = style.position === 'fixed' || style.clip !== 'auto';
    }
    if (hidden) continue;
    // The first ancestor that does not let it spill decides: it scrolls, or it cuts.
    let fate = 'overflows the page';
    for (let a = el.parentElement; a && a !== document.documentElement; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if (ox === 'auto' || ox === 'scroll') { fate = null; break; }
      if (ox === 'hidden' || ox === 'clip') {
        fate = a.getBoundingClientRect().right <= W + 1 ? 'is cut off' : fate; break;
      }
    }
    if (!fate) continue;
    bad.add(el);
    if (!bad.has(el.parentElement)) {
      const where = (el.closest('section[id]') || {}).id;
      out.push(`${describe(el)}${where ? ' in #' + where : ''} ${fate} ` +
               `(right edge at ${Math.round(r.right)} px)`);
    }
  }
  const doc = document.documentElement.scrollWidth;
  return {scroll: doc > W + 1 ? doc : 0, width: W, offenders: out.slice(0, 5)};
}"""


def _screenshots(page, report: PageReport, shots: Path, page_name: str, suffix: str) -> None:
    """Full-page screenshots at desktop and phone width; at phone width nothing may stick out."""
    slug = page_name.replace("/", "-")
    shots.mkdir(parents=True, exist_ok=True)
    state = "as loaded" if not suffix else "with every dropdown open"
    # A focused slider or skip link would be drawn highlighted; the sticky header is drawn
    # wherever the page was scrolled to.
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(400)  # the theme animates its side drawers for 0.2 s
        result = page.evaluate(_OVERFLOW_JS)
        report.check(
            not result["scroll"] and not result["offenders"],
            f"at {size['width']} px ({state}) content is wider than the screen"
            + (f" (page {result['scroll']} px wide)" if result["scroll"] else "")
            + ": "
            + _list(result["offenders"] or ["(no single element found)"]),
        )
        page.screenshot(path=str(shots / f"{slug}.{name}{suffix}.png"), full_page=True)
    page.set_viewport_size(DESKTOP)
    page.wait_for_timeout(100)


def _check_next(page, report: PageReport, base_url: str, next_page: str | None) -> None:
    """The footer's 'next' link leads to the next page of the table of contents."""
    if next_page is None:
        return
    expected = urllib.parse.urljoin(base_url, next_page + ".html")
    link = page.locator("a.right-next")
    if not report.check(link.count() == 1, f"no 'next' link at the bottom (expected one to {next_page})"):
        return
    href = link.evaluate("a => a.href").split("#")[0]
    if not report.check(href == expected, f"the 'next' link goes to {href}, expected {expected}"):
        return
    link.click()
    page.wait_for_load_state("load")
    report.check(page.url.split("#")[0] == expected, f"clicking 'next' ended at {page.url}, expected {expected}")


# ---------------------------------------------------------------------------------------------
# Layout at both widths: figures sharp, captioned and legible; code that fits its column
# ---------------------------------------------------------------------------------------------

MIN_FONT_PX = 8.9  # "about 9 CSS px": the smallest text a figure may show a reader
# Where a phone may scroll sideways on purpose, inside a block that scrolls on its own: a wide
# table in its wrapper, a long formula, a check report, a code cell or a printed output (whose
# lines must keep their indentation and columns; at 1280 px they must fit, see _WIDE_BLOCKS_JS).
PHONE_SCROLLERS = (
    ".pst-scrollable-table-container, .table-wrapper, mjx-container, .mr-check, div.highlight, div.cell_output pre"
)

_FIGURES_JS = """() => {
  const out = [];
  for (const img of document.querySelectorAll('main img')) {
    const r = img.getBoundingClientRect();
    if (r.width === 0 || !img.checkVisibility()) continue;
    const fig = img.closest('figure');
    const cap = fig && fig.querySelector('figcaption');
    const narrow = img.hasAttribute('data-narrow-width-in') && img.currentSrc && img.currentSrc !== img.src;
    const inch = parseFloat(img.getAttribute(narrow ? 'data-narrow-width-in' : 'data-width-in'));
    const pt = parseFloat(img.getAttribute(narrow ? 'data-narrow-min-font-pt' : 'data-min-font-pt'));
    const svg = /\\.svg$|^data:image\\/svg/.test(img.currentSrc || img.src);
    out.push({
      where: (img.closest('section[id]') || {}).id || '',
      alt: (img.getAttribute('alt') || '').slice(0, 50),
      caption: cap ? cap.textContent.trim().length : -1,
      shown: r.width, natural: img.naturalWidth, svg: svg, narrow: !!narrow,
      fontPx: (inch > 0 && pt > 0) ? pt * 100 / 72 * r.width / (inch * 100) : null,
    });
  }
  return out;
}"""

# Blocks wider than their column: code and output blocks (``main pre``), and displayed formulas
# (MathJax's ``mjx-container[display="true"]``), each named by its section and its start.
_WIDE_BLOCKS_JS = """(selector) => {
  const out = [];
  for (const el of document.querySelectorAll(selector)) {
    if (!el.checkVisibility()) continue;
    const over = el.scrollWidth - el.clientWidth;
    if (over > 1) {
      const text = el.tagName === 'PRE'
        ? el.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '').trim()
        : el.textContent;
      out.push(`${(el.closest('section[id]') || {}).id || '?'}: ${over} px too wide: "${text.slice(0, 60)}"`);
    }
  }
  return out;
}"""

_PHONE_OVERFLOW_JS = """(scrollers) => {
  const W = document.documentElement.clientWidth, out = [];
  for (const el of document.querySelectorAll('main *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 1 || !el.checkVisibility({visibilityProperty: true})) continue;
    if (el.closest(scrollers)) continue;
    let hidden = false;
    for (let a = el; a && a !== document.documentElement && !hidden; a = a.parentElement) {
      const s = getComputedStyle(a);
      hidden = s.position === 'fixed' || s.clip !== 'auto';
    }
    if (hidden || (el.parentElement && el.parentElement.getBoundingClientRect().right > W + 1 &&
                   !el.parentElement.closest(scrollers))) continue;  // name the outermost one
    out.push(`${el.tagName.toLowerCase()} in #${(el.closest('section[id]') || {}).id || '?'}` +
             ` reaches ${Math.round(r.right)} px`);
  }
  return out.slice(0, 5);
}"""


def check_layout(page, report: PageReport) -> None:
    """At 1280 px: no code or output block, and no displayed formula, wider than its column. At both widths:
    every figure has a caption, is sharp at a device-pixel ratio of 2 (natural width at least twice the
    shown width, or SVG) and shows no text smaller than MIN_FONT_PX. At 390 px: nothing is
    wider than the screen except inside a scrolling table wrapper or a long formula."""
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(400)
        figures = page.evaluate(_FIGURES_JS)
        report.counts[f"figures at {size['width']} px"] = len(figures)
        for f in figures:
            label = f'at {size["width"]} px the figure "{f["alt"]}" in #{f["where"]}'
            report.check(f["caption"] > 0, f"{label} has no caption")
            report.check(
                f["svg"] or f["natural"] >= 2 * f["shown"] - 1,
                f"{label} is blurry on a 2x screen ({f['natural']} px drawn, {f['shown']:.0f} px shown)",
            )
            report.check(
                f["fontPx"] is None or f["fontPx"] >= MIN_FONT_PX,
                f"{label} shows text at {f['fontPx'] or 0:.1f} px"
                f"{' (its narrow variant)' if f['narrow'] else ''}; at least {MIN_FONT_PX} px",
            )
            report.check(f["fontPx"] is not None or f["svg"], f"{label} does not say its drawn width and smallest font")
        if name == "desktop":
            wide = page.evaluate(_WIDE_BLOCKS_JS, "main pre")
            report.check(not wide, "at 1280 px a code or output block is wider than its column: " + _list(wide))
            wide_math = page.evaluate(_WIDE_BLOCKS_JS, 'main mjx-container[display="true"]')
            report.check(
                not wide_math,
                "at 1280 px a displayed formula is wider than its column (break it "
                "into aligned lines): " + _list(wide_math),
            )
        else:
            over = page.evaluate(_PHONE_OVERFLOW_JS, PHONE_SCROLLERS)
            report.check(not over, "at 390 px an element is wider than the screen: " + _list(over))
    page.set_viewport_size(DESKTOP)
    page.wait_for_timeout(100)
