"""The course archive holds what `make lab` needs, and the book build serves it and the notebooks.

The browser test (tests/browser/test_site.py) downloads the archive from the built book and
runs a notebook from it; these tests need neither a built book nor a browser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from minirlhf.course import archive, nbgen
from minirlhf.paths import ROOT

NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    return archive.pack(tmp_path_factory.mktemp("archive") / archive.ARCHIVE_NAME)


def _names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as z:
        return z.namelist()


def test_it_holds_the_learner_notebooks_the_package_and_what_installs_them(packed):
    folder = archive.FOLDER + "/"
    names = _names(packed)
    assert all(name.startswith(folder) for name in names), "every member sits in one folder"
    names = {name[len(folder) :] for name in names}
    package = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "minirlhf").rglob("*.py") if "__pycache__" not in p.parts
    }
    expected = (
        {"README.md", "Makefile", "requirements.txt", "pyproject.toml", "LICENSE"}
        | {f"notebooks/{name}" for name in NOTEBOOKS}
        | package
    )
    assert names == expected, f"missing: {sorted(expected - names)}; not expected: {sorted(names - expected)}"
    assert "minirlhf/course/archive.py" in names and "minirlhf/course/grader/__main__.py" in names


def test_its_notebooks_are_the_learners_not_the_solutions(packed):
    assert len(NOTEBOOKS) == len(nbgen.sources()), "one learner notebook per chapter"
    with zipfile.ZipFile(packed) as z:
        for name in NOTEBOOKS:
            data = z.read(f"{archive.FOLDER}/notebooks/{name}")
            assert data == _blank(name), f"{name} is not the blank the generator makes from its source"
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
            code = [c for c in nb.cells if c.cell_type == "code"]
            assert not any(c.outputs for c in code), f"{name}: outputs in a learner notebook"
            assert any(nbgen.PLACEHOLDER in c.source for c in code), f"{name}: no blank exercise"


def test_packing_twice_gives_the_same_bytes(packed, tmp_path):
    again = archive.pack(tmp_path / "again.zip")
    assert again.read_bytes() == packed.read_bytes()


def test_the_readme_says_how_to_start_and_how_to_check(packed):
    with zipfile.ZipFile(packed) as z:
        text = z.read(f"{archive.FOLDER}/README.md").decode("utf-8")
    for needed in [
        "make lab",
        "make check",
        f"unzip {archive.ARCHIVE_NAME}",
        f"cd {archive.FOLDER}",
        "minirlhf.course.grader",
        *NOTEBOOKS,
    ]:
        assert needed in text, f"the archive's README does not mention {needed!r}"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "\nlab:" in makefile and "\ncheck:" in makefile, "the README's targets left the Makefile"


def test_the_package_imported_there_is_the_one_in_the_archive(packed, tmp_path):
    with zipfile.ZipFile(packed) as z:
        z.extractall(tmp_path)
    folder = tmp_path / archive.FOLDER
    env = {**os.environ, "PYTHONPATH": str(folder), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "import minirlhf, minirlhf.course.grader; print(minirlhf.__file__)"],
        cwd=folder / "notebooks",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()).resolve() == (folder / "minirlhf" / "__init__.py").resolve()


def test_it_refuses_to_pack_without_chapter_sources(tmp_path):
    for name in archive.TOP_FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "minirlhf").mkdir()
    (tmp_path / "minirlhf" / "__init__.py").write_text("")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_kl_penalty.ipynb").write_bytes(
        (ROOT / "notebooks" / "01_kl_penalty.ipynb").read_bytes()
    )
    with pytest.raises(FileNotFoundError, match=r"no chapter sources in .*chapters: .*`make notebooks`"):
        archive.pack(tmp_path / "out.zip", root=tmp_path)
    assert not (tmp_path / "out.zip").exists()


@pytest.fixture
def worked_in(tmp_path) -> Path:
    """A copy of the repository's layout (chapters 1 and 2) where the learner solved an exercise
    in notebooks/01_kl_penalty.ipynb, an older version left a graded copy beside it, and
    another notebook was added by hand."""
    for name in archive.TOP_FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "minirlhf").mkdir()
    (tmp_path / "minirlhf" / "__init__.py").write_text("")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "notebooks").mkdir()
    for source in nbgen.sources()[:2]:
        shutil.copy(source, tmp_path / "chapters" / source.name)
        shutil.copy(ROOT / "notebooks" / f"{source.stem}.ipynb", tmp_path / "notebooks")
    mine = tmp_path / "notebooks" / "01_kl_penalty.ipynb"
    nb = nbformat.read(mine, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and nbgen.PLACEHOLDER in c.source)
    cell.source = cell.source.replace(nbgen.PLACEHOLDER, "return 0.0  # MY WORK")
    nbformat.write(nb, mine)
    shutil.copy(mine, tmp_path / "notebooks" / "01_kl_penalty.graded.ipynb")
    shutil.copy(mine, tmp_path / "notebooks" / "03_my_own.ipynb")
    return tmp_path


def _blank(name: str) -> bytes:
    """The blank notebook the generator makes from the chapter source of ``name``."""
    source = nbgen.SOURCES / f"{Path(name).stem}.py"
    return nbgen.dumps(nbgen.build(nbgen.parse(source.read_text(encoding="utf-8")), learner=True)).encode("utf-8")


def test_only_the_blank_notebooks_of_the_chapters_are_packed(worked_in):
    """N15: the learner's solved notebook, a stray graded copy and a notebook of no chapter
    stay out; the archive carries the blank the generator makes from each chapter source."""
    out = archive.pack(worked_in / "course.zip", root=worked_in)
    with zipfile.ZipFile(out) as z:
        notebooks = {n.removeprefix(f"{archive.FOLDER}/"): z.read(n) for n in z.namelist() if "/notebooks/" in n}
        readme = z.read(f"{archive.FOLDER}/README.md").decode("utf-8")
    assert sorted(notebooks) == ["notebooks/01_kl_penalty.ipynb", "notebooks/02_ppo_objective.ipynb"]
    for name, data in notebooks.items():
        assert data == _blank(Path(name).name) and b"MY WORK" not in data
    assert ".graded" not in readme and "03_my_own" not in readme and "01_kl_penalty.ipynb" in readme
    assert b"MY WORK" in (worked_in / "notebooks" / "01_kl_penalty.ipynb").read_bytes()  # the work untouched


def test_the_book_serves_the_same_blank_notebooks_and_nothing_else(worked_in):
    """N15: `_serve_course` (the book build's last step) copies the same notebooks into the site,
    and a notebook an earlier build served that no chapter makes now is no longer served."""
    from types import SimpleNamespace

    site = worked_in / "_build" / "html"
    served = site / archive.SITE_DIR / "notebooks"
    served.mkdir(parents=True)
    (served / "01_kl_penalty.graded.ipynb").write_text("{}")  # served by an older build
    app = SimpleNamespace(srcdir=str(worked_in), outdir=str(site), builder=SimpleNamespace(format="html"))
    archive._serve_course(app, None)
    assert sorted(p.name for p in served.iterdir()) == ["01_kl_penalty.ipynb", "02_ppo_objective.ipynb"]
    assert all(p.read_bytes() == _blank(p.name) for p in served.iterdir())
    with zipfile.ZipFile(site / archive.SITE_DIR / archive.ARCHIVE_NAME) as z:
        assert not any(b"MY WORK" in z.read(n) for n in z.namelist())


# ---------------------------------------------------------------------------------------------
# The book: the download menu and the repository buttons
# ---------------------------------------------------------------------------------------------


def _pathto(path, resource=0):
    assert resource == 1, "a link to a file of the site, not to a page"
    return "../" + path


def test_a_chapter_page_offers_both_notebooks_and_the_archive():
    buttons = archive.download_buttons(
        _pathto,
        ".ipynb",
        "solutions/01_kl_penalty.ipynb",
        "solutions/01_kl_penalty.ipynb",
        "course/notebooks/01_kl_penalty.ipynb",
    )
    links = {b["label"]: b["url"] for b in buttons if b["type"] == "link"}
    assert links == {
        "download-learner-notebook-button": "../course/notebooks/01_kl_penalty.ipynb",
        "download-solved-notebook-button": "../_sources/solutions/01_kl_penalty.ipynb",
        "download-course-archive-button": "../course/minirlhf-course.zip",
    }


def test_a_prose_page_offers_its_source_and_the_archive():
    buttons = archive.download_buttons(_pathto, ".md", "book/how-to-use.md", None, None)
    links = {b["label"]: b["url"] for b in buttons if b["type"] == "link"}
    assert links == {
        "download-source-button": "../_sources/book/how-to-use.md",
        "download-course-archive-button": "../course/minirlhf-course.zip",
    }
    assert (
        archive.download_buttons(_pathto, ".md", "x.md", None, None, archive=False)[0]["label"]
        == "download-source-button"
    )


@pytest.mark.parametrize(
    "url, repository, issues",
    [
        ("", False, False),
        ("   ", False, False),
        ("https://github.com/owner/minirlhf", True, True),
        ("https://gitlab.com/owner/minirlhf", True, True),
        ("https://git.example.org/owner/minirlhf", True, False),
    ],
)
def test_the_repository_buttons_follow_the_url(url, repository, issues):
    switches = archive.repository_buttons({"repository_url": url})
    assert switches["use_repository_button"] is repository
    assert switches["use_issues_button"] is issues
    assert not switches["use_edit_page_button"] and not switches["use_source_button"]


def _config_with(tmp_path, url: str) -> dict:
    """The book's html theme options, as Jupyter Book makes them from _config.yml with
    ``repository.url`` set to ``url``."""
    from jupyter_book.config import get_final_config

    text = (ROOT / "_config.yml").read_text(encoding="utf-8")
    assert '\nrepository:\n  url: ""\n' in text, "_config.yml's repository section moved"
    config = tmp_path / "_config.yml"
    config.write_text(text.replace('\nrepository:\n  url: ""\n', f'\nrepository:\n  url: "{url}"\n'), encoding="utf-8")
    sphinx_config, _ = get_final_config(user_yaml=config, sourcedir=ROOT, cli_config={"latex_individualpages": False})
    assert "minirlhf.course.archive" in sphinx_config["extensions"]
    return sphinx_config["html_theme_options"]


def test_a_repository_url_in_the_config_switches_the_buttons_on(tmp_path):
    options = _config_with(tmp_path, "https://github.com/owner/minirlhf")
    options.update(archive.repository_buttons(options))
    assert options["use_repository_button"] and options["use_issues_button"]
    assert options["navbar_persistent"] == [], "the header's second search box came back"

    options = _config_with(tmp_path, "")
    options.update(archive.repository_buttons(options))
    assert not options["use_repository_button"] and not options["use_issues_button"]


@pytest.mark.parametrize("url", ["https://github.com/owner/minirlhf", ""])
def test_the_theme_shows_the_buttons_only_with_a_url(tmp_path, url):
    """A one-page Sphinx build with the book's theme and this extension."""
    from sphinx.application import Sphinx

    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        "extensions = ['sphinx_book_theme', 'minirlhf.course.archive']\n"
        "html_theme = 'sphinx_book_theme'\n"
        f"html_theme_options = {{'repository_url': {url!r}, 'navbar_persistent': []}}\n"
    )
    (source / "index.rst").write_text("Title\n=====\n\nText.\n")
    app = Sphinx(
        str(source),
        str(source),
        str(tmp_path / "out"),
        str(tmp_path / "doctrees"),
        "html",
        status=None,
        warning=None,
        freshenv=True,
    )
    app.build()
    html = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert ("btn-source-repository-button" in html) is bool(url)
    assert ("btn-source-issues-button" in html) is bool(url)
    if url:
        assert 'href="https://github.com/owner/minirlhf"' in html
    # Not the course's repository (no notebooks/): no archive to offer, and none written.
    assert "minirlhf-course.zip" not in html
    assert not (tmp_path / "out" / archive.SITE_DIR).exists()


def test_the_command_refuses_an_out_that_is_not_a_regular_file_before_packing(tmp_path, capsys, monkeypatch):
    import os
    import stat

    from minirlhf.course import archive

    packed = []
    monkeypatch.setattr(archive, "members", lambda *a: packed.append(1) or [])
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    device = tmp_path / "null"  # D7: a stand-in for /dev/null, a device only to os.stat
    device.write_text("")
    real = os.stat

    def fake_stat(path, *args, **kwargs):
        found = real(path, *args, **kwargs)
        if str(path) != str(device):
            return found
        return os.stat_result([stat.S_IFCHR | 0o666, *list(found)[1:]])

    monkeypatch.setattr(os, "stat", fake_stat)
    for out, words in (
        (device, "is a character device"),
        (tmp_path / "folder", "is a folder"),
        (tmp_path / "pipe", "is a named pipe (FIFO)"),
        ("", "the file name is empty"),
    ):
        assert archive.main([str(out)]) == 2  # D7, D8: no traceback
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("ERROR OUT: ") and words in err
    monkeypatch.undo()
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode) and device.read_text() == "" and not packed
