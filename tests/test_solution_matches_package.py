"""The exercise solutions shown to the reader and the package's reference implementations
must not drift apart: run both on the registry's cases and on many random inputs."""

import ast
import json

import numpy as np
import pytest

from minirlhf.course.cases import MeasuredCases, run_case
from minirlhf.course.exercises import EXERCISES
from minirlhf.course.nbgen import SOLUTION_DIR, SOURCES, drop_markers, parse

N_RANDOM = 300


def _function_source(code: str, name: str) -> str | None:
    """Return the source of the top-level ``def name`` in ``code``, or None."""
    tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(code, node)
    return None


def _imports(codes: list[str]) -> str:
    """Return the top-level import statements of the notebook's code cells."""
    lines = []
    for code in codes:
        tree = ast.parse(code)
        lines += [
            ast.get_source_segment(code, node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
        ]
    return "\n".join(lines)


def _load(codes: list[str], name: str):
    """Run the notebook's imports, then the one cell-level ``def name``; return the function."""
    for code in codes:
        found = _function_source(code, name)
        if found:
            namespace = {}
            exec(compile(_imports(codes), "<notebook imports>", "exec"), namespace)
            exec(compile(found, f"<solution of {name}>", "exec"), namespace)
            return namespace[name]
    return None


def _from_chapter(ex):
    path = next(SOURCES.glob(f"{ex.chapter:02d}_*.py"), None)
    assert path is not None, f"exercise {ex.name} belongs to chapter {ex.chapter}, which has no source"
    codes = [
        drop_markers(c["source"]) for c in parse(path.read_text(encoding="utf-8"), path.name) if c["kind"] == "code"
    ]
    fn = _load(codes, ex.name)
    assert fn is not None, f"{path.name} has no cell defining {ex.name}"
    return fn


def _from_solution_notebook(ex):
    path = next(SOLUTION_DIR.glob(f"{ex.chapter:02d}_*.ipynb"), None)
    assert path is not None, f"no solution notebook for chapter {ex.chapter}: run make notebooks"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    codes = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    fn = _load(codes, ex.name)
    assert fn is not None, f"{path.name} defines no {ex.name}"
    return fn


EXAMPLES = sorted(EXERCISES)


@pytest.mark.parametrize("where", [_from_chapter, _from_solution_notebook], ids=["chapter", "solution"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_solution_agrees_with_the_package(name, where):
    ex = EXERCISES[name]
    if isinstance(ex.cases, MeasuredCases):
        pytest.skip("its answer is measured on the chapter's stored runs: nbval runs the solution's check on them")
    solution = where(ex)
    for i, case in enumerate(ex.cases, 1):  # a case may expect a raise: judged as the checker does
        result = run_case(solution, case, ex)
        assert result.passed, f"case {i}: {case.why}: {result.message}"
    rng = np.random.default_rng(2024)
    for i in range(N_RANDOM):
        kwargs = ex.random_kwargs(rng)
        got, want = solution(**kwargs), ex.reference(**kwargs)
        assert ex.expect.problem(got, want) is None, f"random input {i}: {kwargs}: {got} != {want}"


def test_the_drift_guard_can_fail():
    """A solution with a deliberate slip (the KL subtracted twice) is caught."""
    ex = EXERCISES["ppo_rlhf_objective"]
    good = _from_chapter(ex)

    def double_counted(**kwargs):
        out = good(**kwargs)
        penalty = out["kl_penalty"]
        return {k: (round(v - penalty, 2) if k != "kl_penalty" else v) for k, v in out.items()}

    rng = np.random.default_rng(0)
    mismatches = 0
    for _ in range(100):
        kwargs = ex.random_kwargs(rng)
        mismatches += ex.expect.problem(double_counted(**kwargs), ex.reference(**kwargs)) is not None
    assert mismatches > 50
