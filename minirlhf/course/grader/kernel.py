"""The grader's side inside the learner's kernel: everything here runs in that kernel, sees the
inputs of the calls and never their expected values.

The grader (:mod:`minirlhf.course.grader.runner`) loads this module in the kernel by name (its
:data:`~minirlhf.course.grader.runner.WARM_UP` cell), then runs a one-line cell that calls
:func:`_kernel_step` until the session it starts is done. A session calls the learner's function
on each input with :func:`~minirlhf.course.sandbox.call_safely` and writes one line of JSON per
call to a results file (the returned value as plain data, :func:`~minirlhf.course.plain.to_plain`),
a slice of about a second at a time, so that the grader can step in between.

While an exercise is graded, the package's own reference solution for it raises when called,
under any name (:func:`_block_reference`), and so do the package's other functions that compute
the same answer (the exercise's ``also_blocks``); their modules cannot be loaded again, and their
code cannot be compiled or run afresh from their files under another name (:func:`_audit`). A
call that reaches one is recorded with the name of the function it reached.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pickle
import sys
import time
import types

from ...safe_text import shorten
from ..plain import to_plain
from ..sandbox import Call, call_safely

_SESSIONS: dict = {}
_BLOCKED: dict = {}  # the reference function being graded -> its own code, while it is blocked


class _ReferenceNotAvailable(BaseException):
    """Raised by the package's reference solution while its exercise is graded. A
    BaseException, so that an ``except Exception`` around the call does not hide it."""

    used = ""  # the name of the blocked function a call reached: set when raised, read after each call


def _refuse(label: str, what: str = "is not available while grading"):
    _ReferenceNotAvailable.used = label
    raise _ReferenceNotAvailable(f"{label} {what}")


_STUBS: dict = {}


def _stub_code(n_free: int, label: str):
    """The code that stands in for a blocked function's: it records ``label`` (the function's
    name) and raises. It runs with that function's module globals, so it names nothing but
    builtins; it has ``n_free`` free variables, as a closure's code can only be swapped for code
    with as many."""
    if (n_free, label) not in _STUBS:
        names = [f"_v{i}" for i in range(n_free)]
        source = "\n".join(
            ["def _outer():"]
            + ([f"    {' = '.join(names)} = None"] if names else [])
            + [
                "    def _stub(*args, **kwargs):",
                f"        {', '.join(names) or 'pass'}",
                f"        __import__('minirlhf.course.grader.kernel', fromlist=['_'])._refuse({label!r})",
                "    return _stub",
            ]
        )
        space: dict = {}
        exec(compile(source, __file__, "exec"), space)
        _STUBS[(n_free, label)] = space["_outer"]().__code__
    return _STUBS[(n_free, label)]


class _NoFreshCopy:
    """An import hook, first on ``sys.meta_path`` while an exercise is graded: it refuses to
    load a blocked function's module again (``importlib.reload``, or an import after deleting
    it from ``sys.modules``), which would make a fresh, unblocked copy of the function."""

    def __init__(self, module: str, label: str):
        self.module, self.label = module, label  # label: the blocked function of that module it would copy

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.module:
            _refuse(self.label, f"cannot be loaded again (its module {fullname}) while grading")
        return None


_HOOKS: list = []
_AUDITING: list = []  # not empty once the audit hook is added (it cannot be removed)
_ORIGINALS: dict = {}  # the key of each blocked function's own code (see _code_key) -> its name
_SOURCES: dict = {}  # each blocked function's source text -> its name


def _code_key(code, depth: int = 0):
    """What makes two compilations of a function the same function: its name, bytecode,
    names and constants (nested code by this same key), whatever file or line it came from."""
    consts = tuple(
        _code_key(c, depth + 1) if isinstance(c, types.CodeType) and depth < 20 else repr(c) for c in code.co_consts
    )
    return (code.co_name, code.co_code, code.co_names, code.co_varnames, consts)


def _codes_in(code, depth: int = 0):
    """``code`` and every code object nested in its constants."""
    yield code
    if depth < 20:
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                yield from _codes_in(c, depth + 1)


def _audit(event: str, args: tuple) -> None:
    """An audit hook (:func:`sys.addaudithook`; it stays once added, and does nothing unless a
    function is blocked): it refuses to compile, unmarshal or run a blocked function's code
    afresh, whatever name it is loaded under (``runpy.run_path`` of its file,
    ``importlib.util.spec_from_file_location``, ``exec`` of its source)."""
    if not _BLOCKED or event not in ("exec", "compile", "marshal.loads"):
        return
    if event == "exec" and args and isinstance(args[0], types.CodeType):
        names = {key[0] for key in _ORIGINALS}
        for code in _codes_in(args[0]):
            if code.co_name in names and _code_key(code) in _ORIGINALS:
                _refuse(_ORIGINALS[_code_key(code)], "cannot be run afresh while grading")
    elif event == "compile" and args and isinstance(args[0], (str, bytes)):
        text = args[0] if isinstance(args[0], str) else args[0].decode("utf-8", "replace")
        for source, label in _SOURCES.items():
            if source in text:
                _refuse(label, "cannot be compiled afresh while grading")
    elif event == "marshal.loads" and args and isinstance(args[0], (bytes, bytearray)):
        data = bytes(args[0])
        for key, label in _ORIGINALS.items():
            name, bytecode, names, varnames, _ = key
            if bytecode in data and all(n.encode() in data for n in (name, *names, *varnames)):
                _refuse(label, "cannot be loaded afresh while grading")


def _block(fn, label: str) -> None:
    if isinstance(fn, types.FunctionType) and fn not in _BLOCKED:
        code = fn.__code__
        _BLOCKED[fn] = code
        fn.__code__ = _stub_code(len(code.co_freevars), label)


def _resolve(dotted: str):
    """The function ``module.qualname`` names (``minirlhf.exact.best_of_n``), or None."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _block_reference(where, name: str = "", also=()) -> None:
    """Make the reference of exercise ``name`` (the function ``module.name``, ``where``) raise
    while its exercise is graded, and the package's functions ``also`` (dotted names: the
    exercise's ``also_blocks``, which compute the same answer another way).

    Their code is swapped, not their names, so every way to reach them raises: the name
    imported from any module, a wrapper that calls it, a ``functools.partial`` of it, the
    exercise's own ``reference`` (a closure too). So is the code of every other function that
    is a copy of one (the same code, in a module loaded twice); their modules cannot be loaded
    again, and their code cannot be compiled or run afresh from their files (:func:`_audit`).
    """
    _unblock_references()
    found = []  # (label, function)
    if name:
        try:
            from ..exercises import get

            exercise = get(name)
            found.append((None, exercise.reference))
            also = tuple(also) or tuple(getattr(exercise, "also_blocks", ()))
        except Exception:  # no such exercise here: the module and name below still apply
            pass
    if where:
        found.append((".".join(where), _resolve(".".join(where))))
    found += [(dotted, _resolve(dotted)) for dotted in also]
    named = []
    for label, fn in found:
        fn = inspect_unwrap(fn)
        if isinstance(fn, types.FunctionType):
            named.append((label or f"{fn.__module__}.{fn.__qualname__}", fn))
    if not named:
        return
    import gc

    labels = {fn.__code__: label for label, fn in reversed(named)}
    for label, fn in named:
        code = fn.__code__
        _ORIGINALS[_code_key(code)] = labels[code]
        try:
            _SOURCES[inspect.getsource(fn)] = labels[code]
        except Exception:  # no source to read: the other two checks still apply
            pass
    for obj in gc.get_objects():  # copies of a blocked function: the same code in another function
        if type(obj) is types.FunctionType and obj.__code__ in labels:
            _block(obj, labels[obj.__code__])
    for label, fn in named:
        _block(fn, label)
    modules = {}  # module -> the first blocked function of it: the reference's own comes first
    for label, fn in named:
        if isinstance(getattr(fn, "__module__", None), str):
            modules.setdefault(fn.__module__, label)
    for module, label in modules.items():
        if module.startswith("minirlhf."):
            hook = _NoFreshCopy(module, label)
            sys.meta_path.insert(0, hook)
            _HOOKS.append(hook)
    if not _AUDITING:
        sys.addaudithook(_audit)
        _AUDITING.append(True)


def inspect_unwrap(fn):
    """``fn`` without its ``functools.wraps`` wrappers."""
    try:
        return inspect.unwrap(fn)
    except Exception:
        return fn


def _unblock_references() -> None:
    while _HOOKS:
        hook = _HOOKS.pop()
        if hook in sys.meta_path:
            sys.meta_path.remove(hook)
    while _BLOCKED:
        fn, code = _BLOCKED.popitem()
        fn.__code__ = code
    _ORIGINALS.clear()
    _SOURCES.clear()


class _KernelSession:
    """Calls one learner function on a list of inputs, a slice at a time, recording each call
    as a line of JSON."""

    def __init__(self, namespace: dict, spec: dict):
        self.spec = spec
        self.out = open(spec["results"], "a", encoding="utf-8")
        self.i = 0
        self.spent = 0.0  # seconds of calls so far
        self.done = False
        name = spec["name"]
        fn = namespace.get(name)
        if fn is None:
            own = sorted(
                k
                for k, v in namespace.items()
                if callable(v) and getattr(v, "__module__", None) == "__main__" and not k.startswith("_")
            )
            self._finish(setup="missing", names=own[:200])
        elif not callable(fn):
            self._finish(setup="not callable", detail=f"{name} is a {type(fn).__name__}, not a function")
        elif str(getattr(fn, "__module__", "")).startswith("minirlhf"):
            self._finish(setup="not yours", detail=f"{fn.__module__}.{getattr(fn, '__name__', name)}")
        else:
            self.fn = fn
            with open(spec["inputs"], "rb") as f:
                self.inputs = pickle.load(f)  # written by the grader, not by the notebook
            _block_reference(spec.get("reference"), name, spec.get("also_blocks", ()))

    def _write(self, record: dict) -> None:
        self.out.write(json.dumps(record, allow_nan=False) + "\n")
        self.out.flush()

    def _finish(self, **record) -> None:
        _unblock_references()
        self._write({"done": True, **record})
        self.out.close()
        self.done, self.inputs = True, []

    def step(self) -> None:
        """Run calls for about ``spec['slice']`` seconds, or to the end."""
        if self.done:
            return
        until = time.perf_counter() + self.spec["slice"]
        while self.i < len(self.inputs) and time.perf_counter() < until:
            _ReferenceNotAvailable.used = ""
            mentions = self.spec.get("mentions") or [None] * len(self.inputs)
            call = call_safely(
                self.fn,
                self.inputs[self.i],
                self.spec["time_limit"],
                tuple(self.spec.get("grad_wrt", ())),
                mentions[self.i],
            )
            self._write(_call_record(self.i, call, _ReferenceNotAvailable.used, self.spec.get("reference")))
            self.i += 1
            self.spent += call.seconds
            if call.kind == "timeout":
                return self._finish(reason="timeout")
            if self.spent > self.spec["budget"] and self.i < len(self.inputs):
                return self._finish(reason="budget")
        if self.i >= len(self.inputs):
            self._finish(reason="all")


def _call_record(index: int, call: Call, used_reference: str = "", reference=None) -> dict:
    """Return the JSON-ready record of a call: what happened, and what it returned as plain data.
    ``used_reference``: the name of the blocked function the call reached, if it reached one."""
    record = {
        "index": index,
        "kind": call.kind,
        "message": shorten(str(call.message), 600),
        "n_printed": int(call.n_printed),
        "seconds": float(call.seconds),
        "value": None,
        "grads": None,
        "named": call.named if type(call.named) is bool else None,
    }
    if used_reference:  # whatever it did after that, it leaned on the package's answer
        own = ".".join(reference) if reference else ""
        label = used_reference if isinstance(used_reference, str) else own or "the package's reference"
        if label == own or not own:
            what = f"calls {label}, the package's own solution, which is not available while the grader runs"
        else:
            what = (
                f"calls {label}, a function of the package that computes this exercise's answer, "
                "which is not available while the grader runs"
            )
        record.update(kind="error", message=shorten(f"{what}: write the computation yourself", 600))
    elif call.kind in ("ok", "mutated"):
        record["value"] = to_plain(call.value)
        record["grads"] = to_plain(call.grads)
    return record


def _kernel_step(namespace: dict, spec: dict) -> None:
    """Entry point of the grading cell: start or continue the session for ``spec``."""
    session = _SESSIONS.get(spec["results"])
    if session is None:
        session = _SESSIONS[spec["results"]] = _KernelSession(namespace, spec)
    session.step()  # a finished session stays, so a late step does not start it again
