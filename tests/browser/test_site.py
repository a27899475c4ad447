"""The book's own tools in Chromium: nothing leaves the book even on demand, the code is one
click away, search reads well.

Per page of _toc.yml: a favicon that loads; one search box at desktop and at phone width; a
download menu whose entries load (on a chapter page the learner's notebook and the solved
one, on every page the course archive); the repository buttons exactly when _config.yml names
a repository; and, on a page with math, MathJax's accessibility explorer turned on from its
menu: no request leaves the book or fails, the math stays typeset and gets speech.

Once: the course archive and each chapter's notebooks downloaded by clicking, opened, and a
notebook of the archive run with the package in it; search snippets with math as text; the
landing page's chapter titles the same as the navigation's; the TeX-to-text converter of
_static/minirlhf.js on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import zipfile
from pathlib import Path

import nbformat
import pytest
import sitecheck
import yaml
from pagecheck import ROOT, toc_pages

PAGES = toc_pages(ROOT / "_toc.yml")
CHAPTERS = [page for page in PAGES if (ROOT / f"{page}.ipynb").exists()]
PLACEHOLDER = 'raise NotImplementedError("your code here")'
REPOSITORY = (
    (yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8")).get("repository") or {}).get("url") or ""
).strip()


def _url(book_url: str, page: str) -> str:
    return urllib.parse.urljoin(book_url, page + ".html")


@pytest.mark.parametrize("page_name", PAGES)
def test_page_tools(page_name, book_url, chromium_context):
    problems = []
    with sitecheck.watched_page(chromium_context, book_url) as (page, traffic):
        sitecheck.open_page(page, _url(book_url, page_name))

        href, status, kind = sitecheck.favicon(page)
        if not (href and status == 200 and kind.startswith("image/")):
            problems.append(f"favicon: {href or 'no <link rel=icon>'} ({status}, {kind!r})")

        for width, boxes in sitecheck.search_boxes(page).items():
            if len(boxes) != 1:
                problems.append(f"at {width} px {len(boxes)} search boxes, expected 1: {boxes}")

        menu = sitecheck.download_menu(page)
        wanted = ["btn-download-course-archive-button"]
        if page_name in CHAPTERS:
            wanted += ["btn-download-learner-notebook-button", "btn-download-solved-notebook-button"]
        for label in wanted:
            entry = menu.get(label)
            if entry is None:
                problems.append(f"the download menu has no {label} (it has {sorted(menu)})")
            elif (code := sitecheck.status_of(page, entry["href"])) != 200:
                problems.append(f"download '{entry['text']}': {entry['href']} gives HTTP {code}")
        buttons = page.locator(".btn-source-repository-button").count()
        if bool(buttons) != bool(REPOSITORY):
            problems.append(f"{buttons} repository button(s) while _config.yml's repository.url is {REPOSITORY!r}")

        sitecheck.wait_for_mathjax(page)
        before = sitecheck.math_state(page)
        if before["formulas"]:
            mark = traffic.mark()
            sitecheck.turn_on_explorer(page)
            spoken = sitecheck.wait_until_spoken(page)
            after = sitecheck.math_state(page)
            if not spoken:
                problems.append(
                    f"explorer on: of {after['formulas']} formulas {after['rendered']}"
                    f" typeset and {after['spoken']} with speech (before:"
                    f" {before['rendered']} typeset)"
                )
            elif not sitecheck.explore_first_formula(page):
                problems.append("explorer on: stepping into a formula says nothing")
            if after["errors"]:
                problems.append(f"explorer on: {after['errors']} MathJax error(s)")
            new = traffic.since(mark)
            if not any("/mathjax/a11y/explorer.js" in r for r in new["requests"]):
                problems.append("explorer on: the explorer was never loaded")
            for kind, what in (
                ("remote", "requested another host"),
                ("failed", "a request failed"),
                ("errors", "the console shows an error"),
            ):
                if new[kind]:
                    problems.append(f"explorer on: {what}: {'; '.join(new[kind][:5])}")
        if traffic.remote:
            problems.append(f"requested another host: {'; '.join(traffic.remote[:5])}")
    assert not problems, f"{page_name}:\n  - " + "\n  - ".join(problems)


def _run_notebook(notebook: Path, folder: Path) -> str:
    """Run ``notebook`` in a fresh kernel with only ``folder`` on the path, and return what
    the added last cell prints: the file the kernel imported minirlhf from."""
    script = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "nb = nbformat.read(sys.argv[1], as_version=4)\n"
        "nb.cells.append(nbformat.v4.new_code_cell('import minirlhf; print(minirlhf.__file__)'))\n"
        "NotebookClient(nb, timeout=600, kernel_name='python3',\n"
        "               resources={'metadata': {'path': sys.argv[2]}}).execute()\n"
        "print(nb.cells[-1].outputs[0]['text'].strip())\n"
    )
    env = {key: value for key, value in os.environ.items() if key not in ("MINIRLHF_BUILDING_BOOK", "MINIRLHF_OUTPUTS")}
    env.update(PYTHONPATH=str(folder), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", script, str(notebook), str(notebook.parent)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{notebook.name} did not run:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def test_the_course_archive_downloads_and_its_notebook_runs(book_url, chromium_context, tmp_path):
    with sitecheck.watched_page(chromium_context, book_url) as (page, traffic):
        sitecheck.open_page(page, _url(book_url, "book/how-to-use"))
        saved = sitecheck.download(page, "btn-download-course-archive-button", tmp_path)
        # The how-to page's own link to it serves the same file.
        link = page.locator('article a[href$="minirlhf-course.zip"]')
        assert link.count() >= 1, "the how-to page does not link to the course archive"
        assert page.request.get(link.first.evaluate("a => a.href")).body() == saved.read_bytes()
    assert saved.name == "minirlhf-course.zip"
    with zipfile.ZipFile(saved) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        archive.extractall(tmp_path)
    folder = tmp_path / "minirlhf-course"
    for needed in (
        "README.md",
        "Makefile",
        "requirements.txt",
        "pyproject.toml",
        "minirlhf/__init__.py",
        "minirlhf/course/grader/__main__.py",
    ):
        assert f"minirlhf-course/{needed}" in names, f"the archive has no {needed}"
    notebooks = sorted(p.name for p in (folder / "notebooks").glob("*.ipynb"))
    assert notebooks == [Path(c).name + ".ipynb" for c in CHAPTERS], notebooks
    imported = _run_notebook(folder / "notebooks" / notebooks[0], folder)
    assert Path(imported).resolve() == (folder / "minirlhf" / "__init__.py").resolve(), (
        f"the notebook imported minirlhf from {imported}, not from the archive"
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_chapter_page_gives_both_of_its_notebooks(chapter, book_url, chromium_context, tmp_path):
    with sitecheck.watched_page(chromium_context, book_url) as (page, traffic):
        sitecheck.open_page(page, _url(book_url, chapter))
        learner = sitecheck.download(page, "btn-download-learner-notebook-button", tmp_path)
        solved = sitecheck.download(page, "btn-download-solved-notebook-button", tmp_path)
    stem = Path(chapter).name
    assert (learner.name, solved.name) == (f"{stem}.ipynb", f"{stem}_solved.ipynb")
    assert learner.read_bytes() == (ROOT / "notebooks" / f"{stem}.ipynb").read_bytes()
    learner_nb = nbformat.read(learner, as_version=4)
    solved_nb = nbformat.read(solved, as_version=4)
    nbformat.validate(learner_nb)
    nbformat.validate(solved_nb)
    code = [c for c in learner_nb.cells if c.cell_type == "code"]
    assert any(PLACEHOLDER in c.source for c in code) and not any(c.outputs for c in code)
    code = [c for c in solved_nb.cells if c.cell_type == "code"]
    assert not any(PLACEHOLDER in c.source for c in code) and any(c.outputs for c in code)


def test_search_snippets_show_math_as_text(book_url, chromium_context):
    with sitecheck.watched_page(chromium_context, book_url) as (page, traffic):
        snippets = sitecheck.search_snippets(page, book_url, "epsilon")
        boxes = sitecheck.search_boxes(page)
        assert not traffic.errors, traffic.errors
    for width, found in boxes.items():
        assert len(found) == 1, f"the search page at {width} px has {len(found)} search boxes: {found}"
    assert snippets, "searching 'epsilon' found nothing"
    raw = [s for s in snippets if any(t in s for t in ("\\(", "\\[", "\\epsilon", "\\mathrm"))]
    assert not raw, f"snippets with raw TeX: {raw}"
    assert any("ε" in s for s in snippets), f"no snippet shows ε: {snippets}"


def test_the_landing_table_names_each_chapter_as_the_navigation_does(book_url, chromium_context):
    with sitecheck.watched_page(chromium_context, book_url) as (page, traffic):
        sitecheck.open_page(page, _url(book_url, PAGES[0]))
        table = page.evaluate("""() => [...document.querySelectorAll('article table a')]
            .map(a => [a.href, a.textContent.trim()])""")
        navigation = dict(
            page.evaluate("""() => [...document.querySelectorAll('nav.bd-links a')]
            .map(a => [a.href, a.textContent.trim()])""")
        )
    assert len(table) == len(CHAPTERS), table
    for href, title in table:
        shown = navigation.get(href, "")
        assert shown.split(". ", 1)[-1] == title, f"the landing table calls {href} {title!r}, the navigation {shown!r}"


TEX_CASES = {
    r"\(\epsilon\)": "ε",
    r"\(\beta\,\mathrm{KL}(\pi_\theta \,\|\, \pi_{\mathrm{ref}})\)": "β KL(π_θ ‖ π_ref)",
    r"\(-\min\big(\rho A, \mathrm{clip}(\rho, 1 - \epsilon, 1 + \epsilon) A\big)\)": "-min(ρ A, clip(ρ, 1 - ε, 1 + ε) A)",  # noqa: E501
    r"\(z = \mathrm{clip}\big((s - \bar s)/(\sigma_s + 10^{-4}), -3, 3\big)\)": "z = clip((s - s̄)/(σ_s + 10⁻⁴), -3, 3)",
    r"\(\texttt{new\_logp}_i\)": "new_logp_i",
    r"\(\frac{1}{T}\sum_t \mathrm{kl}_t\)": "1/T Σ_t kl_t",
    r"\(\mathbb{E}_{x \sim q}[\log q(x)]\)": "E_(x ~ q)[log q(x)]",
    r"\(e^{\mu^2} - 1\)": "e^μ² - 1",
    r"\(\sqrt{2}\,\sigma\)": "√2 σ",
    r"\[a = b \\ c \le d\]": "a = b; c ≤ d",
}


def test_tex_becomes_readable_text(chromium_context):
    page = chromium_context.new_page()
    try:
        page.set_content("<!doctype html><html><head></head><body></body></html>")
        page.add_script_tag(path=str(ROOT / "_static" / "minirlhf.js"))
        got = page.evaluate("cases => cases.map(minirlhfTexToText)", list(TEX_CASES))
    finally:
        page.close()
    wrong = {tex: (text, want) for (tex, want), text in zip(TEX_CASES.items(), got) if text != want}
    assert not wrong, "tex -> (got, expected):\n" + json.dumps(wrong, ensure_ascii=False, indent=1)


def test_every_reference_links_to_its_paper(book_url, chromium_context):
    """Each entry of the bibliography has a DOI, arXiv or web link."""
    with sitecheck.watched_page(chromium_context, book_url) as (page, traffic):
        sitecheck.open_page(page, _url(book_url, "book/references"))
        entries = page.evaluate("""() => [...document.querySelectorAll('article .citation')]
            .map(c => [c.textContent.trim().slice(0, 70),
                       [...c.querySelectorAll('a.reference.external')].map(a => a.href)])""")
    assert entries, "no bibliography entries"
    unlinked = [
        text
        for text, links in entries
        if not any(link.startswith(("https://doi.org/", "https://arxiv.org/abs/", "http")) for link in links)
    ]
    assert not unlinked, f"entries without a link: {unlinked}"
