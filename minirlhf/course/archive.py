"""The course archive: everything ``make lab`` needs, in one zip the book serves itself.

The archive unpacks into one folder, ``minirlhf-course/``::

    minirlhf-course/
        README.md            how to start, in three steps (written here, not the repository's)
        Makefile             the repository's; ``make lab`` and ``make check`` work here
        requirements.txt     the pinned versions
        pyproject.toml       so that ``pip install -e .`` installs the package
        LICENSE
        minirlhf/            the package, every ``.py`` file
        notebooks/           the learner's notebooks: exercises blank, no outputs

The notebooks packed (and served by the book) are those the generator makes from the chapter
sources, one per ``chapters/NN_name.py``, made afresh here (:func:`blank_notebooks`): not the
files in ``notebooks/``, where a learner may have worked, or an older version left a copy
(``NAME.graded.ipynb``). When ``notebooks/`` is up to date they are the same bytes. The solved
notebooks are not in it: each chapter page of the book offers its own.

``python -m minirlhf.course.archive OUT.zip`` packs it. The book build does the same: this
module is also a Sphinx extension (listed in ``_config.yml``) that

* after a successful build, writes the archive and the learner's notebooks to
  ``course/`` in the built site (:data:`SITE_DIR`);
* puts them in each page's download menu: on a chapter page the learner's notebook and
  the solved one, on every page the course archive, and the whole book as one PDF once
  ``make pdf`` has made it (:mod:`minirlhf.course.pdf`; the build copies it into the site);
* turns the repository and open-issue buttons on when ``_config.yml`` names a repository
  URL, and leaves them off otherwise (Jupyter Book refuses the buttons without a URL, and
  the book must build without one).

The zip is the same, byte for byte, whenever its files are: fixed timestamps and
permissions, members in sorted order.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import zipfile
from pathlib import Path

from .. import cli
from ..paths import ROOT, file_problem, write_atomic

__all__ = [
    "ARCHIVE_NAME",
    "FOLDER",
    "SITE_DIR",
    "TOP_FILES",
    "chapter_sources",
    "blank_notebooks",
    "members",
    "readme",
    "pack",
    "repository_buttons",
    "download_buttons",
    "setup",
]

ARCHIVE_NAME = "minirlhf-course.zip"
FOLDER = "minirlhf-course"  # the folder the archive unpacks into
SITE_DIR = "course"  # where the built book serves the archive and the learner's notebooks
TOP_FILES = ("Makefile", "requirements.txt", "pyproject.toml", "LICENSE")
SOURCES = "[0-9][0-9]_*.py"  # the chapter sources in chapters/, one learner notebook each
_DATE = (2026, 1, 1, 0, 0, 0)  # every member's timestamp, so that equal files give equal zips


def chapter_sources(root: Path = ROOT) -> list[Path]:
    """Return the chapter sources of ``root/chapters``, in chapter order: each makes one
    learner notebook, ``notebooks/NN_name.ipynb``."""
    return sorted((root / "chapters").glob(SOURCES))


def blank_notebooks(root: Path = ROOT) -> list[tuple[str, bytes]]:
    """Return ``(file name, contents)`` of each learner notebook, in chapter order: made from
    the chapter sources of ``root`` as ``make notebooks`` makes them (exercises blank, no
    outputs), never read from ``root/notebooks``, which may hold a learner's work or stray
    copies. Raises FileNotFoundError when ``root`` has no chapter sources."""
    from . import nbgen

    sources = chapter_sources(root)
    if not sources:
        raise FileNotFoundError(
            f"no chapter sources in {root / 'chapters'}: the learner notebooks are made from them (`make notebooks`)"
        )
    made = []
    for source in sources:
        cells = nbgen.parse(source.read_text(encoding="utf-8"), source.name)
        made.append((f"{source.stem}.ipynb", nbgen.dumps(nbgen.build(cells, learner=True)).encode("utf-8")))
    return made


def members(root: Path = ROOT, notebooks: list[tuple[str, bytes]] | None = None) -> list[tuple[str, Path | bytes]]:
    """Return ``(name in the archive, file on disk or contents)`` for every file packed from
    ``root``, sorted by name: the learner notebooks are :func:`blank_notebooks`' (or
    ``notebooks``, when given); README.md is not among them (:func:`readme` writes it)."""
    found = [(name, root / name) for name in TOP_FILES]
    found += [
        (p.relative_to(root).as_posix(), p) for p in (root / "minirlhf").rglob("*.py") if "__pycache__" not in p.parts
    ]
    missing = [name for name, path in found if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"cannot pack the course archive, missing: {', '.join(missing)}")
    found += [(f"notebooks/{name}", data) for name, data in (notebooks or blank_notebooks(root))]
    return sorted((f"{FOLDER}/{name}", what) for name, what in found)


def _title(name: str, data: bytes) -> str:
    """Return the first heading of the notebook ``data``, without its '#' (else ``name``)."""
    for cell in json.loads(data.decode("utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            for line in source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return Path(name).stem


def readme(root: Path = ROOT, notebooks: list[tuple[str, bytes]] | None = None) -> str:
    """Return the archive's README.md: what is in it and how to start (``notebooks``: as
    :func:`members` takes them)."""
    notebooks = notebooks or blank_notebooks(root)
    chapters = "\n".join(f"      {name:<30} {_title(name, data)}" for name, data in notebooks)
    requirements = (root / "requirements.txt").read_text(encoding="utf-8").splitlines()
    torch = next((line for line in requirements if line.startswith("torch==")), "torch")
    return f"""# minirlhf: the course notebooks

The exercises of the book *minirlhf: PPO-based RLHF, built by hand*, with the package they
import. You need Python 3.10 or newer and `make`; the first run installs the pinned
requirements (PyTorch among them) into `.venv/` in this folder.

## Start in three steps

1. Unzip the archive and go into its folder:

       unzip {ARCHIVE_NAME}
       cd {FOLDER}

2. Run `make lab`. The first time, it creates `.venv/`, installs PyTorch's CPU build, then
   `requirements.txt` and this package into it, and opens JupyterLab on `notebooks/`
   (`make lab TORCH=default` takes PyTorch from the default index, which on Linux is the
   CUDA build, several GB).

3. Open `notebooks/01_kl_penalty.ipynb`, run the cells from the top, and write your code
   where an exercise cell says `raise NotImplementedError("your code here")`. The check
   cell under each exercise tells you, case by case, what passed and what did not.

To grade yourself, `make check` runs every notebook in a fresh kernel and tests each of
your functions on many inputs the notebooks never show; one notebook:

    .venv/bin/python -m minirlhf.course.grader notebooks/01_kl_penalty.ipynb

The grader only reads your notebooks. If you save one while it is graded, the version it
graded is kept in `kept/`, and your file is left as you saved it.

Without `make`:

    python3 -m venv .venv
    .venv/bin/python -m pip install --index-url https://download.pytorch.org/whl/cpu {torch}   # Linux
    .venv/bin/python -m pip install -r requirements.txt
    .venv/bin/python -m pip install --no-deps -e .
    .venv/bin/jupyter lab notebooks/

## What is here

    notebooks/                       one notebook per chapter, exercises blank:
{chapters}
    minirlhf/                        the package the notebooks import
    Makefile                         `make lab`, `make check` (its other targets build the
                                     book and need the full repository)

Chapters 3 and 4 train the two small models on first use and keep them in `outputs/`;
chapter 5 makes its longer runs on first use and keeps their results there too, so a
second run of a notebook is quick. The solved notebooks, executed, are on each chapter
page of the book, in its download menu, and so is the whole book as one PDF when the book
was built with it (`make pdf` in the full repository).
"""


def pack(out: Path, root: Path = ROOT, notebooks: list[tuple[str, bytes]] | None = None) -> Path:
    """Write the course archive of ``root`` to ``out``; return ``out`` (``notebooks``: as
    :func:`members` takes them)."""
    notebooks = notebooks or blank_notebooks(root)
    buffer = io.BytesIO()
    entries = members(root, notebooks) + [(f"{FOLDER}/README.md", readme(root, notebooks).encode("utf-8"))]
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, source in sorted(entries, key=lambda entry: entry[0]):
            data = source if isinstance(source, bytes) else source.read_bytes()
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.external_attr = 0o100644 << 16  # a plain file, rw-r--r--
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=9)
    return write_atomic(Path(out), buffer.getvalue())


# ---------------------------------------------------------------------------------------------
# The book build (Sphinx)
# ---------------------------------------------------------------------------------------------


def repository_buttons(options: dict) -> dict:
    """Return the theme's repository-button switches for ``options`` (the html theme options):
    with a ``repository_url``, the repository button on, and the open-issue button too when
    the repository is on GitHub or GitLab (the hosts the theme can open an issue on); without
    one, every repository button off. The edit and show-source buttons stay off either way:
    a chapter page is generated, and they would point at ``solutions/``, not at the chapter's
    source in ``chapters/``."""
    url = (options.get("repository_url") or "").strip()
    issues = any(host in url.lower() for host in ("github.com", "gitlab.com"))
    return {
        "use_repository_button": bool(url),
        "use_issues_button": bool(url) and issues,
        "use_edit_page_button": False,
        "use_source_button": False,
    }


def download_buttons(
    pathto,
    source_suffix: str,
    sourcename: str,
    notebook: str | None,
    learner: str | None,
    archive: bool = True,
    book_pdf: str | None = None,
) -> list[dict]:
    """Return the entries of a page's download menu, in the theme's button format.

    ``pathto`` makes a site path relative to the page; ``notebook`` is the page's notebook
    under ``_sources/`` (None for a markdown page), ``learner`` the site path of the learner's
    notebook of the chapter (None when there is none); ``archive``: offer the course archive;
    ``book_pdf``: the site path of the whole book as one PDF (None when it was not made).
    """
    buttons = []
    if learner:
        buttons.append(
            {
                "type": "link",
                "url": pathto(learner, 1),
                "text": "Exercises notebook (.ipynb)",
                "tooltip": "The chapter with its exercises blank, to work in JupyterLab",
                "icon": "fas fa-pen",
                "label": "download-learner-notebook-button",
            }
        )
    if notebook:
        buttons.append(
            {
                "type": "link",
                "url": f"{pathto('_sources', 1)}/{notebook}",
                "text": "Solved notebook (.ipynb)",
                "tooltip": "The chapter as this page shows it, executed",
                "icon": "fas fa-code",
                "label": "download-solved-notebook-button",
            }
        )
    else:
        buttons.append(
            {
                "type": "link",
                "url": f"{pathto('_sources', 1)}/{sourcename}",
                "text": source_suffix,
                "tooltip": "Download source file",
                "icon": "fas fa-file",
                "label": "download-source-button",
            }
        )
    if archive:
        buttons.append(
            {
                "type": "link",
                "url": pathto(f"{SITE_DIR}/{ARCHIVE_NAME}", 1),
                "text": "Course archive (.zip)",
                "tooltip": "Every notebook with exercises blank, and the package they import",
                "icon": "fas fa-file-zipper",
                "label": "download-course-archive-button",
            }
        )
    if book_pdf:
        buttons.append(
            {
                "type": "link",
                "url": pathto(book_pdf, 1),
                "text": "The whole book (.pdf)",
                "tooltip": "Every chapter in one PDF, with an outline, for print or an e-reader",
                "icon": "fas fa-book",
                "label": "download-book-pdf-button",
            }
        )
    buttons.append(
        {
            "type": "javascript",
            "javascript": "window.print()",
            "text": "Print this page (.pdf)",
            "tooltip": "Print to PDF",
            "icon": "fas fa-file-pdf",
            "label": "download-pdf-button",
        }
    )
    return buttons


def _course_root(app) -> Path | None:
    """Return the book's source folder when it holds chapter sources, whose learner notebooks
    the book serves, else None."""
    root = Path(app.srcdir)
    return root if chapter_sources(root) else None


def _book_pdf(app) -> Path | None:
    """Return the PDF of the whole book that `make pdf` made beside this build, if there is one."""
    from .pdf import PDF_NAME

    path = Path(app.outdir).parent / "pdf" / PDF_NAME
    return path if path.is_file() else None


def _switch_repository_buttons(app) -> None:
    from pydata_sphinx_theme.utils import get_theme_options_dict

    options = get_theme_options_dict(app)
    options.update(repository_buttons(options))


def _download_menu(app, pagename, templatename, context, doctree) -> None:
    """Replace the theme's download menu (a notebook page's source, the solved notebook, under
    the name of the learner's; no archive) with ours."""
    group = next((b for b in context.get("header_buttons", []) if b.get("label") == "download-buttons"), None)
    if group is None:
        return
    # A notebook page's source is its notebook; a MyST-markdown notebook has one made for it.
    suffix, sourcename = context.get("page_source_suffix", ""), context.get("sourcename", "")
    notebook = context.get("ipynb_source") or (sourcename if suffix == ".ipynb" else None)
    root, learner = _course_root(app), None
    if root and notebook and Path(notebook).name in {f"{p.stem}.ipynb" for p in chapter_sources(root)}:
        learner = f"{SITE_DIR}/notebooks/{Path(notebook).name}"
    pdf = _book_pdf(app)
    group["buttons"] = download_buttons(
        context["pathto"],
        suffix,
        sourcename,
        notebook,
        learner,
        archive=root is not None,
        book_pdf=pdf.name if pdf else None,
    )
    group["tooltip"] = (
        "Download this chapter's notebooks or the course archive"
        if notebook
        else "Download this page or the course archive"
    )


def _serve_course(app, exception) -> None:
    """After a successful HTML build: the archive and the learner's notebooks into the site."""
    if exception is not None or app.builder.format != "html":
        return
    from sphinx.util import logging

    root = _course_root(app)
    if root is None:  # not the course's repository: nothing to serve
        return
    site = Path(app.outdir) / SITE_DIR
    (site / "notebooks").mkdir(parents=True, exist_ok=True)
    notebooks = blank_notebooks(root)
    for name, data in notebooks:
        write_atomic(site / "notebooks" / name, data)
    for old in (site / "notebooks").glob("*.ipynb"):  # served by an earlier build, no chapter's now
        if old.name not in dict(notebooks) and old.is_file() and not old.is_symlink():
            with contextlib.suppress(OSError):
                old.unlink()
    archive = pack(site / ARCHIVE_NAME, root, notebooks)
    pdf = _book_pdf(app)
    if pdf is not None:  # `make pdf` made it: the download menu offers it from the site's root
        write_atomic(Path(app.outdir) / pdf.name, pdf.read_bytes())
    logging.getLogger(__name__).info(
        f"course archive: {archive.relative_to(app.outdir)} ({archive.stat().st_size // 1024} KB)"
    )


def setup(app):
    """Sphinx extension: the course archive and the notebooks in the book, repository buttons."""
    app.connect("builder-inited", _switch_repository_buttons)
    # After the theme has made its buttons (priority 501).
    app.connect("html-page-context", _download_menu, priority=502)
    app.connect("build-finished", _serve_course)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(
        prog="python -m minirlhf.course.archive",
        description="Pack the course archive: the learner's notebooks, the package, and what `make lab` needs.",
    )
    parser.add_argument(
        "out",
        nargs="?",
        default=ARCHIVE_NAME,
        help=f"the zip to write (default: {ARCHIVE_NAME}); a regular file there is replaced, "
        "anything else (a folder, a device, a pipe) is refused",
    )
    args = parser.parse_args(argv)
    problem = file_problem(args.out)  # before packing: never replace what is not a regular file
    if problem:
        print(f"ERROR OUT: {problem}", file=sys.stderr)
        return 2
    try:
        out = pack(Path(args.out))
    except OSError as error:  # a missing file to pack, or the write refused or failed
        print(f"ERROR {error}", file=sys.stderr)
        return 2
    with zipfile.ZipFile(out) as packed:
        count = len(packed.namelist())
    print(f"{out}: {count} files, {out.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
