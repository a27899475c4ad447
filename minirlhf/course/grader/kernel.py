"""The grader's side inside the learner's kernel: everything here runs in that kernel, sees the
inputs of the calls and never their expected values.

The grader (:mod:`minirlhf.course.grader.runner`) loads this module in the kernel by name (its
:data:`~minirlhf.course.grader.runner.WARM_UP` cell), then runs a one-line cell that calls
:func:`_kernel_step` until the session it starts is done. A session calls the learner's function
on each input with :func:`~minirlhf.course.sandbox.call_safely` and writes one line of JSON per
call to a results file (the returned value as plain data, :func:`~minirlhf.course.plain.to_plain`),
a slice of about a second at a time, so that the grader can step in between.

While an exercise is graded, the package's own reference solution for it raises when called,
under any name (:func:`_block_reference`), and its module cannot be loaded again.
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import time
import types

from ..plain import to_plain
from ..safe_text import shorten
from ..sandbox import Call, call_safely

_SESSIONS: dict = {}
_BLOCKED: dict = {}  # the reference function being graded -> its own code, while it is blocked


class _ReferenceNotAvailable(BaseException):
    """Raised by the package's reference solution while its exercise is graded. A
    BaseException, so that an ``except Exception`` around the call does not hide it."""

    used = False  # set by the stub, read after each call


def _reference_stub(*args, **kwargs):
    # Becomes the reference's code while it is blocked, so it runs with the reference's module
    # globals: it names nothing but builtins.
    kernel = __import__("minirlhf.course.grader.kernel", fromlist=["_"])
    kernel._ReferenceNotAvailable.used = True
    raise kernel._ReferenceNotAvailable("the package's reference solution is not available while grading")


def _stub_code(n_free: int):
    """The code of :func:`_reference_stub`, with ``n_free`` free variables (a closure's code can
    only be swapped for code with as many)."""
    if n_free == 0:
        return _reference_stub.__code__
    names = [f"_v{i}" for i in range(n_free)]
    source = (
        f"def _outer():\n    {' = '.join(names)} = None\n"
        f"    def _reference_stub(*args, **kwargs):\n        {', '.join(names)}\n"
        "        kernel = __import__('minirlhf.course.grader.kernel', fromlist=['_'])\n"
        "        kernel._ReferenceNotAvailable.used = True\n"
        "        raise kernel._ReferenceNotAvailable(\"the package's reference solution is not "
        'available while grading")\n    return _reference_stub\n'
    )
    space: dict = {}
    exec(compile(source, __file__, "exec"), space)
    return space["_outer"]().__code__


class _NoFreshCopy:
    """An import hook, first on ``sys.meta_path`` while an exercise is graded: it refuses to
    load the reference's module again (``importlib.reload``, or an import after deleting it from
    ``sys.modules``), which would make a fresh, unblocked copy of the reference."""

    def __init__(self, module: str):
        self.module = module

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.module:
            _ReferenceNotAvailable.used = True
            raise _ReferenceNotAvailable(f"{fullname} cannot be loaded again while grading")
        return None


_HOOKS: list = []


def _block(fn) -> None:
    if isinstance(fn, types.FunctionType) and fn not in _BLOCKED:
        code = fn.__code__
        stub = _stub_code(len(code.co_freevars))
        _BLOCKED[fn] = code
        fn.__code__ = stub


def _block_reference(where, name: str = "") -> None:
    """Make the reference of exercise ``name`` (the function ``module.name``, ``where``) raise
    while its exercise is graded.

    Its code is swapped, not its name, so every way to reach it raises: the name imported
    from any module, a wrapper that calls it, a ``functools.partial`` of it, the exercise's
    own ``reference`` (a closure too). So is the code of every other function that is a copy
    of it (the same code, in a module loaded twice), and its module cannot be loaded again.
    """
    _unblock_references()
    found = []
    if name:
        try:
            from ..exercises import get

            found.append(get(name).reference)
        except Exception:  # no such exercise here: the module and name below still apply
            pass
    if where:
        try:
            found.append(getattr(importlib.import_module(where[0]), where[1]))
        except Exception:  # not importable here: nothing to block
            pass
    found = [inspect_unwrap(fn) for fn in found]
    codes = {fn.__code__ for fn in found if isinstance(fn, types.FunctionType)}
    if not codes:
        return
    import gc

    for obj in gc.get_objects():  # copies of the reference: the same code in another function
        if type(obj) is types.FunctionType and obj.__code__ in codes:
            _block(obj)
    for fn in found:
        _block(fn)
    for module in {fn.__module__ for fn in found if isinstance(getattr(fn, "__module__", None), str)}:
        if module.startswith("minirlhf."):
            hook = _NoFreshCopy(module)
            sys.meta_path.insert(0, hook)
            _HOOKS.append(hook)


def inspect_unwrap(fn):
    """``fn`` without its ``functools.wraps`` wrappers."""
    import inspect

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
            _block_reference(spec.get("reference"), name)

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
            _ReferenceNotAvailable.used = False
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


def _call_record(index: int, call: Call, used_reference: bool = False, reference=None) -> dict:
    """Return the JSON-ready record of a call: what happened, and what it returned as plain data."""
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
        name = ".".join(reference) if reference else "the package's reference"
        record.update(
            kind="error",
            message=f"calls {name}, the package's own solution, which is not "
            "available while the grader runs: write the computation yourself",
        )
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
