"""The engine stands apart from the course: it imports none of it, reads no setting about the
book, and changes no global setting when imported or called. No module of the package grows
past 700 lines, the size at which one has taken on a second job (exercise data apart), and no
two of its modules import each other, however indirectly."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "minirlhf"
# The three rooms: the engine, the course (minirlhf/course/) and the studies (minirlhf/studies/).
# Every other sub-package of the top level is part of the engine.
ROOMS = {PACKAGE / "course", PACKAGE / "studies"}
ENGINE = sorted(
    p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts and not any(room in p.parents for room in ROOMS)
)
# the command lines may choose the thread count, in their main() (the benchmark in _work)
ENTRY_POINTS = {"commands/bench.py", "commands/experiment.py", "commands/trl_run.py"}
WORKERS = {("parallel.py", "_serve")}  # a worker process the engine starts sets its own (one thread)


def imported_modules(path):
    """Return the modules a file imports, relative imports resolved against the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "minirlhf" + ("." + node.module if node.module else "")
                found.update([base] + [f"{base}.{a.name}" for a in node.names])
            else:
                found.add(node.module)
    return found


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: p.name)
def test_the_engine_imports_nothing_from_the_course_or_the_studies(path):
    bad = {m for m in imported_modules(path) if m.startswith(("minirlhf.course", "minirlhf.studies"))}
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", ENGINE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_engine_reads_no_book_setting_and_sets_threads_only_in_entry_points(path):
    text = path.read_text()
    assert "BUILDING_BOOK" not in text and "allow_stdin" not in text and "GRADING" not in text
    tree = ast.parse(text)
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        sets_threads = any(isinstance(c, ast.Attribute) and c.attr == "set_num_threads" for c in ast.walk(func))
        if sets_threads:
            assert (str(path.relative_to(PACKAGE)) in ENTRY_POINTS and func.name in ("main", "_work")) or (
                path.name,
                func.name,
            ) in WORKERS, f"{path.name}:{func.name}"
    module_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert not any(
        isinstance(c, ast.Attribute) and c.attr == "set_num_threads" for n in module_level for c in ast.walk(n)
    ), path.name


def test_importing_and_calling_the_engine_leaves_the_thread_count_alone(tmp_path):
    code = (
        "import torch\n"
        "torch.set_num_threads(2)\n"
        "import minirlhf, minirlhf.ppo, minirlhf.experiment, minirlhf.store\n"
        "from minirlhf.sft import SFTConfig\n"
        "minirlhf.store.load_sft(SFTConfig(steps=1, batch_size=4), progress=False)\n"
        "print(torch.get_num_threads())\n"
    )
    env = {"MINIRLHF_OUTPUTS": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "2"


def test_the_public_face_exports_what_a_user_calls():
    import minirlhf

    for name in (
        "ppo_train",
        "PPOConfig",
        "SFTConfig",
        "RMConfig",
        "rm_reward",
        "verifier_reward",
        "run_experiment",
        "kl_penalty",
        "ppo_rlhf_objective",
        "load_sft",
        "load_rm",
    ):
        assert name in minirlhf.__all__ and callable(getattr(minirlhf, name))


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
EXERCISE_DATA = PACKAGE / "course" / "exercises"  # a chapter's exercises: cases, hints, slips, as data
MAX_LINES = 700  # a module past this has taken on a second job (cases.py and grader.py had 5 and 6)


@pytest.mark.parametrize(
    "path", [p for p in MODULES if EXERCISE_DATA not in p.parents], ids=lambda p: p.relative_to(PACKAGE).as_posix()
)
def test_no_module_is_over_700_lines(path):
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    where = path.relative_to(PACKAGE)
    assert n_lines <= MAX_LINES, f"{where} has {n_lines} lines: split it by job (at most {MAX_LINES})"


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_at_import_time(path, known):
    """Return the package's modules that ``path`` imports when it is imported: its top-level
    imports (those inside a function run later, and do not make a cycle at import time), each
    resolved to the deepest module of the package that it names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue  # (a __main__ block counts: run as a script, the module is imported again)
        for inner in ast.walk(node):
            if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                break
            targets = []
            if isinstance(inner, ast.Import):
                targets = [a.name for a in inner.names]
            elif isinstance(inner, ast.ImportFrom):
                base = inner.module or ""
                if inner.level:
                    anchor = package.split(".")[: len(package.split(".")) - inner.level + 1]
                    base = ".".join([*anchor, *([inner.module] if inner.module else [])])
                targets = [base, *(f"{base}.{a.name}" for a in inner.names)]
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
    return found


def _cycles(graph):
    """Return one cycle of ``graph`` (a dict of sets) per strongly connected part with more
    than one node, as a list of names (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, parts, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        part.append(top)
                        if top == node:
                            break
                    if len(part) > 1:
                        parts.append(sorted(part))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return parts


def test_no_import_cycle_among_the_package_modules():
    """A module imported while it imports another that needs it half-built is how a __main__
    hand-over or a re-export breaks: every import of the package, at import time, is one way.
    A package's __init__ importing its own modules, and they a sibling through the package,
    is the one allowed shape (their edges to the package itself are left out)."""
    known = {_module_name(p): p for p in MODULES}
    graph = {}
    for name, path in known.items():
        edges = _imports_at_import_time(path, known)
        # a module's own package (and its parents) are imported first, before the module itself
        graph[name] = {e for e in edges if not name.startswith(e + ".")}
    cycles = _cycles(graph)
    assert not cycles, "import cycles among the package's modules: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _readme_rows():
    text = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    return {line.split("`")[1] for line in text.splitlines() if line.startswith("| `minirlhf/")}


def test_the_readme_lists_every_module_with_its_job():
    rows = _readme_rows()
    # a sub-package of a room (the engine, course/, studies/) is listed as one row, a folder
    rooms = {PACKAGE, PACKAGE / "course", PACKAGE / "studies"}
    folders = {
        f"minirlhf/{init.parent.relative_to(PACKAGE).as_posix()}/"
        for init in PACKAGE.rglob("__init__.py")
        if init.parent not in rooms and init.parent.parent in rooms
    }
    modules = {
        f"minirlhf/{p.relative_to(PACKAGE)}"
        for p in PACKAGE.rglob("*.py")
        if p.name != "__init__.py" and not any(str(p).startswith(str(PACKAGE.parent / f)) for f in folders)
    }
    missing = sorted((modules | folders) - rows)
    assert not missing, f"README's table of modules lacks: {', '.join(missing)}"
    gone = sorted(row for row in rows if not (PACKAGE.parent / row).exists())
    assert not gone, f"README's table lists what is not there: {', '.join(gone)}"


def test_the_library_never_imports_a_command():
    for path in PACKAGE.rglob("*.py"):
        if "commands" in path.relative_to(PACKAGE).parts:
            continue
        tree = ast.parse(path.read_text())
        top = [node for node in tree.body if not (isinstance(node, ast.If) and "__main__" in ast.unparse(node.test))]
        for node in top:
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module and "commands" in inner.module.split("."):
                    raise AssertionError(
                        f"{path.relative_to(PACKAGE)} imports {inner.module} outside its __main__ guard"
                    )


def _names_a_string(node):
    """Whether ``node`` is a string literal, or a tuple, list or set of them."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_string(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def test_no_trainer_is_told_apart_by_its_name_outside_the_trainer_table():
    """What differs by trainer is read from minirlhf.trainers.TRAINERS: a comparison of a
    trainer's name elsewhere is a branch a third trainer would silently miss."""
    table = PACKAGE / "trainers.py"
    found = []
    for path in MODULES:
        if path == table:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            names = {s.attr if isinstance(s, ast.Attribute) else getattr(s, "id", "") for s in sides}
            if "trainer" in names and any(_names_a_string(s) for s in sides):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "a trainer told apart by its name (read it from TRAINERS): " + "; ".join(found)


def test_each_chapters_exercise_module_holds_only_that_chapters_exercises():
    """The grader takes a notebook's exercises from its NN_ prefix, as those of chNN.py whose
    chapter is NN: an exercise with another number there would never be graded."""
    import importlib

    for path in sorted(EXERCISE_DATA.glob("ch[0-9][0-9].py")):
        number = int(path.stem[2:])
        module = importlib.import_module(f"minirlhf.course.exercises.{path.stem}")
        wrong = [e.name for e in module.IN_THIS_CHAPTER if e.chapter != number]
        assert not wrong, f"{path.name} holds exercises of another chapter: {wrong}"
        assert list((PACKAGE.parent / "chapters").glob(f"{number:02d}_*.py")), f"{path.name}: no chapter {number}"
