"""A docstring that says "Defined in chapter N" is a promise to the reader: chapter N's source
names the function or class (it shows it, calls it or teaches it). Checked for every one of the
package's modules, so that a function moved or renamed cannot keep a stale pointer."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "minirlhf"
CHAPTERS = ROOT / "chapters"
CLAIM = re.compile(r"Defined in chapters? (\d+)((?:(?:, | and | or )\d+)*)")


def _claims():
    """Yield (module path, qualified name, chapter numbers) for every docstring's claim."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            doc = ast.get_docstring(node) or ""
            for match in CLAIM.finditer(" ".join(doc.split())):
                numbers = [int(match.group(1)), *map(int, re.findall(r"\d+", match.group(2)))]
                yield path.relative_to(ROOT).as_posix(), node.name, numbers


CLAIMS = list(_claims())


def _chapter_source(number):
    found = sorted(CHAPTERS.glob(f"{number:02d}_*.py"))
    assert found, f"there is no chapter {number}"
    return found[0].read_text(encoding="utf-8")


def test_the_claims_are_found():
    assert len(CLAIMS) > 50  # the scan reads the docstrings (about a hundred claims)


@pytest.mark.parametrize("where, name, numbers", CLAIMS, ids=[f"{w}:{n}" for w, n, _ in CLAIMS])
def test_the_chapter_a_docstring_names_uses_the_function(where, name, numbers):
    missing = [n for n in numbers if not re.search(rf"\b{re.escape(name)}\b", _chapter_source(n))]
    assert not missing, (
        f"{where}: {name} says it is defined in chapter {', '.join(map(str, numbers))}, but chapter "
        f"{', '.join(map(str, missing))} never names it: point to the chapter that does, or drop the line"
    )
