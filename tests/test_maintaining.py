"""The README and MAINTAINING.md agree with the tree: every folder of the package has its row in
the README's table, and every file, test, make target, command and name of the package that
MAINTAINING.md gives exists, so a recipe never sends a maintainer to something that has moved.

The README's table lists the modules of the three rooms (the engine at the top of the package,
``minirlhf/course/``, ``minirlhf/studies/``) one by one, which ``tests/test_layout.py`` checks;
each folder inside a room that is a package (``minirlhf/estimators/``,
``minirlhf/studies/silent_bugs/``, ...) has one row of its own for everything in it, which this
file checks."""

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minirlhf"
README = ROOT / "README.md"
MAINTAINING = ROOT / "MAINTAINING.md"
ROOMS = ("minirlhf/", "minirlhf/course/", "minirlhf/studies/")  # their modules have a row each
RECIPES = ("Add an arm", "Add an advantage estimator", "Add a leash", "Add an exercise", "Add a chapter")
RECIPE_PARTS = ("**Files.**", "**Tests that fail until it is done.**", "**What it reruns.**")
# Words that stand for a part of a name a maintainer chooses: chapters/NN_*.py, tests/test_NAME.py.
PLACEHOLDERS = {"NN": "[0-9][0-9]", "NAME": "*"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() + ("/" if path.is_dir() else "")


def _readme_rows() -> set[str]:
    """The first path of each row of the README's tables that starts with ``minirlhf/``."""
    text = README.read_text(encoding="utf-8")
    return {line.split("`")[1] for line in text.splitlines() if line.startswith("| `minirlhf/")}


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def _folders_with_one_row() -> set[str]:
    """Each package inside a room that is not itself a room: one row for all it holds."""
    return {_rel(p) for p in _packages() if _rel(p) not in ROOMS and _rel(p.parent) in ROOMS}


# ---------------------------------------------------------------------------- the README's table


def test_every_folder_of_the_package_has_its_row_in_the_readme():
    missing = sorted(_folders_with_one_row() - _readme_rows())
    assert not missing, f"README's table of modules lacks the folders: {', '.join(missing)}"


def test_every_folder_the_readme_lists_is_a_package():
    folders = sorted(row for row in _readme_rows() if row.endswith("/"))
    not_packages = [row for row in folders if not (ROOT / row / "__init__.py").is_file()]
    assert not not_packages, f"README's table lists folders that are no package: {', '.join(not_packages)}"


def test_a_folder_with_a_row_does_not_list_its_modules_again():
    folders = _folders_with_one_row()
    again = sorted(row for row in _readme_rows() if any(row != f and row.startswith(f) for f in folders))
    assert not again, f"README's table lists modules of a folder that has its own row: {', '.join(again)}"


def test_the_readme_points_to_maintaining():
    assert "(MAINTAINING.md" in README.read_text(encoding="utf-8")


def test_the_readme_names_only_commands_that_exist():
    problems = [f"python -m {m}: {why}" for m in _python_modules(README) if (why := _module_problem(m))]
    problems += [f"make {t}: no such target" for t in _make_targets(README) if t not in _makefile_targets()]
    assert not problems, "README.md names:\n" + "\n".join(problems)


# ---------------------------------------------------------------------------- MAINTAINING.md


def _spans(path: Path) -> list[str]:
    """The text of every inline code span and every line of every fenced block."""
    text = path.read_text(encoding="utf-8")
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", rest) + [line for block in fenced for line in block.splitlines()]


def _paths(path: Path) -> list[str]:
    """Every path under minirlhf/, tests/ or chapters/ named in a code span, with its ::test."""
    found = []
    for span in _spans(path):
        found += re.findall(r"(?<![\w./-])((?:minirlhf|tests|chapters)/[\w./*-]*(?:::\w+)?)", span)
    return sorted(set(found))


def _python_modules(path: Path) -> list[str]:
    return sorted({m for span in _spans(path) for m in re.findall(r"(?:^|\s)-m ([\w.]+)", span)})


def _make_targets(path: Path) -> list[str]:
    return sorted({t for span in _spans(path) for t in re.findall(r"(?:^|[\s(])make ([a-z][\w-]*)", span)})


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*)\s*:(?!=)", text, flags=re.M))


def _module_problem(name: str) -> str:
    """Return "" when ``python -m name`` can run, else why not (``pkg.NAME``: when pkg has a module)."""
    if name.endswith(".NAME"):
        package = importlib.util.find_spec(name.removesuffix(".NAME"))
        found = package is not None and any(Path(p).glob("[a-z]*.py") for p in package.submodule_search_locations or ())
        return "" if found else "no such package, or no module in it"
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        return "no such module"
    if spec.submodule_search_locations is not None:
        return "" if importlib.util.find_spec(f"{name}.__main__") is not None else "a package without __main__"
    if name.startswith("minirlhf.") and not re.search(
        r"__name__ == [\"']__main__[\"']", Path(spec.origin).read_text(encoding="utf-8")
    ):
        return "a module of the library, with no command line (the commands are in minirlhf.commands)"
    return ""


def _path_problem(name: str) -> str:
    """Return "" when the path (placeholders as wildcards) exists and defines its ::test, else why not."""
    file, _, test = name.partition("::")
    pattern = file.rstrip("/")
    for word, wildcard in PLACEHOLDERS.items():
        pattern = re.sub(rf"(?<![A-Z]){word}(?![A-Z])", wildcard, pattern)
    matches = [p for p in ROOT.glob(pattern) if "__pycache__" not in p.parts]
    if not matches:
        return "not in the tree"
    if file.endswith("/") and not any(p.is_dir() for p in matches):
        return "not a folder"
    if test:
        tree = ast.parse(matches[0].read_text(encoding="utf-8"))
        if test not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}:
            return f"{file} defines no {test}"
    return ""


def test_maintaining_names_only_paths_and_tests_that_exist():
    named = _paths(MAINTAINING)
    assert len(named) > 30, "the path finder found almost nothing: has its pattern broken?"
    problems = [f"{name}: {why}" for name in named if (why := _path_problem(name))]
    assert not problems, "MAINTAINING.md names:\n" + "\n".join(problems)


def test_maintaining_names_only_make_targets_that_exist():
    named = _make_targets(MAINTAINING)
    assert {"lint", "unit", "notebooks", "book", "test"} <= set(named)
    missing = [t for t in named if t not in _makefile_targets()]
    assert not missing, f"MAINTAINING.md names make targets the Makefile lacks: {', '.join(missing)}"


def test_maintaining_names_only_python_modules_that_exist():
    named = _python_modules(MAINTAINING)
    assert "minirlhf.course.nbgen" in named
    problems = [f"python -m {m}: {why}" for m in named if (why := _module_problem(m))]
    assert not problems, "MAINTAINING.md names:\n" + "\n".join(problems)


def _dotted_names(path: Path) -> list[str]:
    return sorted({m for span in _spans(path) for m in re.findall(r"(?<![\w/.-])(minirlhf(?:\.\w+)+)(?![\w/-])", span)})


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_name_of_the_package_maintaining_gives_resolves():
    named = _dotted_names(MAINTAINING)
    assert "minirlhf.studies.matching" in named
    gone = [name for name in named if not _resolves(name)]
    assert not gone, f"MAINTAINING.md names what the package does not hold: {', '.join(gone)}"


def _sections(text: str, level: str) -> dict[str, str]:
    parts = re.split(rf"^{level} (.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


@pytest.mark.parametrize("recipe", RECIPES)
def test_each_recipe_says_its_files_its_tests_and_what_it_reruns(recipe):
    recipes = _sections(_sections(MAINTAINING.read_text(encoding="utf-8"), "##").get("Recipes", ""), "###")
    assert recipe in recipes, f"MAINTAINING.md has no recipe '{recipe}'"
    body = recipes[recipe]
    for part in RECIPE_PARTS:
        assert part in body, f"the recipe '{recipe}' lacks {part}"
    assert "tests/test_" in body and re.search(r"`(?:minirlhf|chapters)/", body), f"'{recipe}' names no file"


def test_maintaining_has_its_other_sections():
    sections = _sections(MAINTAINING.read_text(encoding="utf-8"), "##")
    for title in ("Where things are", "The commands a maintainer runs", "The hidden rules"):
        assert title in sections, f"MAINTAINING.md lacks the section '{title}'"
    assert "README" in sections["Where things are"]
    assert sections["The hidden rules"].count("**") >= 2 * 12, "fewer hidden rules than the twelve it keeps"
