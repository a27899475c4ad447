"""The whole book as one PDF (``make pdf``): Sphinx's single-page rendering, printed by Chromium.

``make pdf`` builds the book with Sphinx's ``singlehtml`` builder (every page of ``_toc.yml`` in
one HTML page, in the book's order), then ``python -m minirlhf.course.pdf SITE OUT.pdf`` serves
that folder on a localhost port, opens it in Debian's headless Chromium (through playwright, as
the browser test does) and prints it:

* a title page: the book's title, its author, the date and the chapters;
* math typeset: the print waits for MathJax (vendored in ``_vendor/mathjax``) and its fonts;
* every dropdown (hints, worked answers, a check's cases) printed open, in its own block;
* every slider printed as its default frame, its caption, and one line naming the values shown
  and saying that the interactive version is in the HTML book and in JupyterLab;
* code and printed output wrap at the margin instead of running off the page;
* page numbers in the footer, and an outline (PDF bookmarks) made from the headings: one entry
  per chapter, the chapter's sections under it.

The print styles are in ``_static/print.css`` (an ``@media print`` sheet on every page, so a
single page printed from the browser's menu looks the same). The built HTML book offers the PDF
in its download menu once ``make pdf`` has made it (:mod:`minirlhf.course.archive`).
"""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import sys
import tempfile
import threading
import time
from pathlib import Path

from .. import cli
from ..paths import ROOT, NotRegularFile, file_problem, write_atomic

PDF_NAME = "minirlhf-book.pdf"
PDF_PATH = ROOT / "_build" / "pdf" / PDF_NAME  # where `make pdf` writes it
_PRINT_PAGE = "_print.html"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The note under each slider's printed frame.
SLIDER_NOTE = "The interactive version of this figure, with its slider, is in the HTML book and in JupyterLab."
FOOTER = (
    '<div style="width:100%;font-size:8pt;color:#555;text-align:center;font-family:sans-serif">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)

# Run in the page before printing; returns what it did, for the command's summary.
_PREPARE = r"""
({title, author, date, note}) => {
  const done = {dropdowns: 0, sliders: 0, chapters: []};
  // Images load now, not when scrolled to.
  for (const img of document.querySelectorAll("img")) img.loading = "eager";
  // Dropdowns open, each in its own block.
  for (const d of document.querySelectorAll("details")) {
    d.open = true;
    d.classList.add("mr-print-open");
    done.dropdowns += 1;
  }
  // sphinx-togglebutton's hidden blocks, if any.
  for (const t of document.querySelectorAll(".toggle-hidden")) t.classList.remove("toggle-hidden");
  // A slider: its default frame, its caption, and one line saying where it moves.
  for (const fig of document.querySelectorAll("figure.mr-explorer")) {
    const shown = [...fig.querySelectorAll(".mr-explorer-control")].map((c) => {
      const label = c.querySelector("label")?.textContent.trim() ?? "";
      const value = c.querySelector("output")?.textContent.trim() ?? "";
      c.remove();
      return `${label} = ${value}`;
    });
    const line = document.createElement("p");
    line.className = "mr-print-note";
    line.textContent = (shown.length ? `Shown: ${shown.join(", ")}. ` : "") + note;
    fig.appendChild(line);
    done.sliders += 1;
  }
  // The chapters: the root page's section, then each page the single page inlines (Sphinx
  // marks where one starts with <span id="document-NAME">); each starts a new sheet.
  const article = document.querySelector(".bd-article") || document.querySelector("main") || document.body;
  const sections = [article.querySelector("section")];
  for (const mark of document.querySelectorAll('span[id^="document-"]')) {
    let next = mark.nextElementSibling;
    while (next && next.tagName !== "SECTION") next = next.nextElementSibling;
    if (next) sections.push(next);
  }
  for (const sec of sections.filter(Boolean)) {
    sec.classList.add("mr-chapter");
    const h = sec.querySelector("h1, h2, h3, h4");
    if (h) done.chapters.push(h.textContent.replace(/[#¶]\s*$/, "").trim());
  }
  // The title page, before everything else.
  const page = document.createElement("section");
  page.className = "mr-title-page";
  const list = done.chapters.map((c) => `<li>${c.replace(/</g, "&lt;")}</li>`).join("");
  page.innerHTML =
    `<p class="mr-title">${title}</p><p class="mr-author">${author}</p>` +
    `<p class="mr-date">${date}</p><p class="mr-contents-head">Contents</p><ol>${list}</ol>`;
  article.prepend(page);
  return done;
}
"""

_WAIT_MATH = """
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  const imgs = [...document.images];
  await Promise.all(imgs.map((i) => i.complete ? null : new Promise((r) => { i.onload = i.onerror = r; })));
  return {
    math: document.querySelectorAll("mjx-container").length,
    images: imgs.length,
    raw: [...document.querySelectorAll(".math")].filter((m) => !m.querySelector("mjx-container")).length,
  };
}
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request would drown what the caller prints
        pass


@contextlib.contextmanager
def serve(directory: Path):
    """Serve ``directory`` on a free localhost port; yield its base URL (ending in '/'). The
    PDF's printing and the browser tests both read the built book through it."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _book_title(root: Path = ROOT) -> tuple[str, str]:
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    return str(config.get("title", "")), str(config.get("author", ""))


def _root_page(root: Path = ROOT) -> str:
    """The root page of _toc.yml (book/index): the single page holds the book there."""
    import yaml

    return str(yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))["root"])


def make_pdf(site: Path, out: Path, chromium: str = CHROMIUM) -> dict:
    """Print ``site/index.html`` (a ``singlehtml`` build) to ``out``; return what was done."""
    from playwright.sync_api import sync_playwright

    title, author = (html.escape(s) for s in _book_title())
    started = time.monotonic()
    # Sphinx writes the single page where the root page goes (book/index.html) but links its
    # assets as if it sat at the site's root (_static/...): print a copy put there, written as
    # every output is (a link planted there is replaced, never written through).
    write_atomic(site / _PRINT_PAGE, (site / (_root_page() + ".html")).read_bytes())
    with serve(site) as url, sync_playwright() as playwright, tempfile.TemporaryDirectory() as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS, service_workers="block"
        )
        try:
            context.set_default_timeout(300_000)
            page = context.new_page()
            page.emulate_media(media="print")
            page.goto(url + _PRINT_PAGE, wait_until="load")
            facts = page.evaluate(
                _PREPARE,
                {"title": title, "author": author, "date": time.strftime("%d %B %Y"), "note": SLIDER_NOTE},
            )
            facts.update(page.evaluate(_WAIT_MATH))
            document = page.pdf(
                format="A4",
                margin={"top": "16mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
                print_background=True,
                outline=True,
                tagged=True,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
            )
        finally:
            context.close()
    # the PDF comes back as bytes and goes through the one write guard: no half file, and
    # nothing written through a link or into a device, a pipe or a folder
    write_atomic(out, document)
    facts["bytes"] = len(document)
    facts["seconds"] = round(time.monotonic() - started, 1)
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(
        prog="python -m minirlhf.course.pdf",
        description="Print the single-page build of the book to one PDF with headless Chromium.",
    )
    parser.add_argument("site", nargs="?", default=str(ROOT / "_build" / "singlehtml"), help="the singlehtml build")
    parser.add_argument("out", nargs="?", default=str(PDF_PATH), help=f"the PDF to write (default: {PDF_PATH})")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the Chromium to use (default: {CHROMIUM})")
    args = parser.parse_args(argv)
    site = Path(args.site)
    if not (site / (_root_page() + ".html")).is_file():
        print(f"ERROR no {site / (_root_page() + '.html')}: `make pdf` builds it (singlehtml)", file=sys.stderr)
        return 2
    if not Path(args.chromium).exists():
        print(f"ERROR no Chromium at {args.chromium}: apt-get install chromium", file=sys.stderr)
        return 2
    # before a print of about a minute: every file it writes can be written
    for path, what in ((args.out, "out"), (site / _PRINT_PAGE, "the print page")):
        problem = file_problem(path)
        if problem:
            print(f"ERROR {what}: {problem}", file=sys.stderr)
            return 2
    try:
        facts = make_pdf(site, Path(args.out), args.chromium)
    except NotRegularFile as e:  # something was put there during the print
        print(f"ERROR {e}", file=sys.stderr)
        return 2
    print(
        f"{args.out}: {facts['bytes'] / 1e6:.1f} MB in {facts['seconds']} s; {len(facts['chapters'])} chapters,"
        f" {facts['math']} formulas, {facts['images']} images, {facts['dropdowns']} dropdowns printed open,"
        f" {facts['sliders']} sliders printed at their default frame"
    )
    if facts["raw"]:
        print(f"WARNING {facts['raw']} math elements were not typeset", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
