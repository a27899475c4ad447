"""The page checker itself: it passes a sound page and names every fault of a broken one.

Two small hand-written pages are served from a temporary folder. The sound one also loads
the book's vendored MathJax, so this proves that MathJax typesets (with an extension that a
smaller bundle would fetch from the network) without any request leaving the folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sphinx_togglebutton
from pagecheck import ROOT, check_page, serve
from PIL import Image

SOUND = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>sound</title>
<script>window.MathJax = {};</script>
<script defer src="mathjax/tex-chtml-full.js"></script>
<link rel="stylesheet" href="togglebutton.css">
<script>let toggleHintShow = "Click to show", toggleHintHide = "Click to hide",
  toggleOpenOnPrint = "true"; var togglebuttonSelector = ".toggle, .admonition.dropdown";</script>
<script src="togglebutton.js"></script></head>
<body><main><article class="bd-article"><section id="all">
<p>The penalty is <span class="math">\(\beta \cdot \mathrm{mean}_t\,\mathrm{kl}_t\)</span>.</p>
<div class="math">\[\boldsymbol{J} = \frac{1}{T}\sum_t \min\big(r_t A_t,
  \mathrm{clip}(r_t, 1-\epsilon, 1+\epsilon) A_t\big)\]</div>
<figure><img src="red.png" alt="A red square" width="20" height="20" data-width-in="0.2"
  data-min-font-pt="9"><figcaption>A red square, drawn twice as sharp as it is shown.</figcaption></figure>
<details class="hint"><summary>Hint 1 of 1</summary><p>Take the mean.</p></details>
<details class="answer"><summary>Worked answer</summary><p>It is 0.5.</p></details>
<div class="admonition dropdown"><p class="admonition-title">Why?</p><p>Because.</p></div>
<div class="cell"><details class="hide above-input"><summary>Show code cell source</summary>
  <div class="cell_input"><pre>x = 1</pre></div></details></div>
<div class="cell_output"><figure class="mr-explorer">
  <input type="range" id="beta" min="0" max="2" value="0" aria-label="beta">
  <img id="frame" src="red.png" alt="beta = 0" width="20" height="20" data-width-in="0.2"
    data-min-font-pt="9"><figcaption>One color per beta.</figcaption></figure></div>
<script>
  const frames = ["red.png", "blue.png", "green.png"];
  document.getElementById("beta").addEventListener("input", e => {
    document.getElementById("frame").src = frames[e.target.value];
  });
</script>
</section></article>
<a class="right-next" href="broken.html">Next</a></main></body></html>
"""

BROKEN = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>broken</title>
<script src="https://cdn.example.invalid/lib.js"></script></head>
<body><main><article class="bd-article"><section id="all">
<p>Math without MathJax: <span class="math">\(x^2\)</span></p>
<img src="missing.png" alt="A figure that is not there">
<img src="red.png">
<img src="red.png" alt="red.png">
<img loading="lazy" style="margin-top: 4000px" src="https://img.example.invalid/far.png" alt="x">
<details class="hint"><summary>Hint 1 of 1</summary></details>
<div class="cell_output"><input type="range" min="0" max="3" value="1" aria-label="dead">
  <img src="red.png" alt="a figure no slider moves"></div>
<script type="application/vnd.jupyter.widget-view+json">{"model_id": "x"}</script>
<pre style="max-width: 300px; overflow-x: auto">a_code_line = "far too long for the column of a book read on a desktop screen, and then some more, and more again"</pre>
<table><tr><td style="white-space: nowrap">a table row far too long to fit on the narrow
  screen of a phone held upright in one hand, without wrapping</td></tr></table>
<script>console.error("boom");</script>
</section></article>
<a class="right-next" href="sound.html">Next</a></main></body></html>
"""

# A sound page but for one displayed formula too wide for its column at 1280 px.
WIDE_MATH = SOUND.replace('<section id="all">', '<section id="all" style="max-width: 320px">').replace(
    r"\[\boldsymbol{J} =",
    r"\[a_1 + a_2 + a_3 + a_4 + a_5 + a_6 + a_7 + a_8 + a_9 + a_{10} + a_{11} + a_{12} = \boldsymbol{J} =",
)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    for name, color in (("red", "#D55E00"), ("blue", "#0072B2"), ("green", "#009E73")):
        Image.new("RGB", (40, 40), color).save(folder / f"{name}.png")
    (folder / "sound.html").write_text(SOUND, encoding="utf-8")
    (folder / "broken.html").write_text(BROKEN, encoding="utf-8")
    (folder / "widemath.html").write_text(
        WIDE_MATH.replace('href="broken.html"', 'href="sound.html"'), encoding="utf-8"
    )
    shutil.copytree(ROOT / "_vendor" / "mathjax", folder / "mathjax")
    togglebutton = Path(sphinx_togglebutton.__file__).parent / "_static"
    for name in ("togglebutton.js", "togglebutton.css"):
        shutil.copy(togglebutton / name, folder / name)
    with serve(folder) as url:
        yield url, folder


def test_a_sound_page_passes(site, chromium_context):
    url, folder = site
    report = check_page(chromium_context, url, "sound", "broken", folder / "shots")
    assert report.problems == []
    assert report.counts["math"] == 2
    assert report.counts["images"] == 2
    assert (
        report.counts["hints"],
        report.counts["answers"],
        report.counts["code toggles"],
        report.counts["toggle admonitions"],
        report.counts["sliders"],
    ) == (1, 1, 1, 1, 1)
    assert report.counts["remote requests"] == 0
    assert (folder / "shots" / "sound.phone.png").exists()


def test_a_broken_page_is_caught_fault_by_fault(site, chromium_context):
    url, folder = site
    report = check_page(chromium_context, url, "broken", "third", folder / "shots")
    expected = [
        "requested another host: https://cdn.example.invalid/lib.js",
        "refers to a resource on another host: <script> https://cdn.example.invalid/lib.js;"
        " <img> https://img.example.invalid/far.png",
        "formulas but MathJax did not load",
        "image missing.png in #all did not load (natural width 0)",
        "image red.png in #all has no alt text",
        "its alt text is only the file name",
        "hint 'Hint 1 of 1' opens but shows nothing",
        "slider 1 'dead' moved from 1 to 3 but the figure (img src) did not change",
        "ipywidgets output(s) that need a kernel",
        "at 390 px (as loaded) content is wider than the screen (page",
        "table in #all overflows the page",
        "at 390 px an element is wider than the screen: table in #all",
        "at 1280 px a code or output block is wider than its column",
        ('the figure "A figure that is not there"', "has no caption"),
        ('the figure "a figure no slider moves"', "is blurry on a 2x screen"),
        ('the figure "a figure no slider moves"', "does not say its drawn width"),
        ("the console shows an error: ", "boom"),
        "a request failed: " + url + "missing.png (HTTP 404)",
        "the 'next' link goes to " + url + "sound.html, expected " + url + "third.html",
    ]

    # An entry is a piece of one problem's sentence, or a tuple of pieces of the same one.
    def found(parts):
        return any(all(p in problem for p in parts) for problem in report.problems)

    missed = [e for e in expected if not found((e,) if isinstance(e, str) else e)]
    assert not missed, f"not reported: {missed}\nreported: {report.problems}"


def test_a_formula_wider_than_its_column_is_caught(site, chromium_context):
    url, folder = site
    report = check_page(chromium_context, url, "widemath", "sound", folder / "shots")
    assert any("at 1280 px a displayed formula is wider than its column" in p for p in report.problems), report.problems
    # (this bare page lacks the book's style, which lets a formula scroll on a phone, so the
    # phone checks complain too; only the desktop check matters here)
