"""Independent runs in worker processes, with the results of making them one after another.

The experiment and the chapters' long cells make many runs that share nothing: seeds x arms,
a sweep of beta, the runs from chapter 6's starts. :func:`map_runs` hands them to worker
processes, one per core unless ``workers`` says otherwise, and returns their results in the
order of the items, each identical to the last bit to the run made in the calling process: a
run depends only on its inputs and its own seeds, and every worker computes with one torch
thread, as the book's notebooks and commands do. ``workers=1`` makes the runs in the calling
process, one after another, with no worker at all.

How the workers start:

* Where processes can be forked safely (Linux), each worker is a copy of the calling process.
  It has every function the caller has, also one defined in a notebook (a learner's
  ``loss_fn``) or inside another function, and nothing is pickled on the way in; only the
  results are sent back.
* Elsewhere (macOS, whose system libraries are not safe to fork, and Windows) workers start
  afresh and receive the function and the items pickled, so the function must live in a
  module. When it cannot be pickled (a function defined in a notebook), the runs are made in
  the calling process, one after another, and a line says so, once.

Ctrl-C stops the workers at once (they ignore it themselves, and the calling process ends
them) and raises KeyboardInterrupt in the caller, after ``on_result`` has seen every run that
finished. A run that raises in a worker stops the others; its exception is raised again in
the caller, with the run's label and the worker's traceback.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Callable, Iterable

from . import progress as _progress

__all__ = ["default_workers", "resolve_workers", "start_method", "map_runs"]

_IN_WORKER = False  # True in a worker process: a run there never starts workers of its own
_SAID: set = set()  # the notes already printed in this process


def default_workers() -> int:
    """Return the number of cores this process may use: the default number of workers."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13
        n = os.process_cpu_count()
    elif hasattr(os, "sched_getaffinity"):
        n = len(os.sched_getaffinity(0))
    else:
        n = os.cpu_count()
    return max(1, n or 1)


def resolve_workers(workers: int | None, n_runs: int | None = None) -> int:
    """Return how many workers to start: ``workers`` (None: :func:`default_workers`), at most
    one per run, and 1 inside a worker. Raises ValueError for anything but None or an int >= 1."""
    if workers is None:
        workers = default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(
            f"workers must be a whole number >= 1, or None for one per core ({default_workers()} here), got {workers!r}"
        )
    if _IN_WORKER:
        return 1
    return max(1, workers if n_runs is None else min(workers, n_runs))


def start_method() -> str:
    """Return how workers start here: ``"fork"`` where that is safe (not on macOS), else ``"spawn"``."""
    if "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin":
        return "fork"
    return "spawn"


def _say_once(key: str, message: str, enabled: bool) -> None:
    if enabled and key not in _SAID:
        _SAID.add(key)
        _progress.status(message)


def _warm_up() -> None:
    # torch imports its compiler the first time an optimizer is made (about a second): do it
    # once in the calling process, so that forked workers have it instead of each paying.
    import torch

    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


class _WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text."""

    def __str__(self) -> str:
        return self.args[0]


def _portable(exc: BaseException) -> BaseException:
    # An exception that survives pickling both ways; else a RuntimeError that says what it was.
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _end_with_the_caller() -> None:
    # Linux: the kernel ends this worker when the calling process ends, even in the middle of a
    # run (a Jupyter kernel that is shut down). Elsewhere it ends after the run it is making.
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _serve(conn, fn, items, payload) -> None:
    # A worker: run the items the caller names by index, one at a time, until it sends None.
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the caller, which ends us
    if hasattr(signal, "SIGHUP"):  # so is a hang-up (the caller keeps the finished runs)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _end_with_the_caller()
    _progress.silence()
    import torch

    torch.set_num_threads(1)
    if payload is not None:  # started afresh: the function and items come pickled
        fn, items = pickle.loads(payload)
    parent = multiprocessing.parent_process()
    while True:
        if parent is not None and conn not in wait([conn, parent.sentinel]):
            return  # the caller is gone
        try:
            i = conn.recv()
        except (EOFError, OSError):
            return
        if i is None:
            return
        began = time.perf_counter()
        try:
            reply = ("ok", i, fn(items[i]), time.perf_counter() - began)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            reply = ("error", i, _portable(exc), traceback.format_exc())
        try:
            # Plain pickle: torch's own reducers would move tensors to shared memory instead.
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps(
                (
                    "error",
                    i,
                    TypeError(
                        f"the run's result cannot be sent back from the worker process: {type(exc).__name__}: {exc}"
                    ),
                    "",
                )
            )
        try:
            conn.send_bytes(data)
        except OSError:
            return


def _died(proc, label: str) -> None:
    proc.join(timeout=5)
    raise RuntimeError(
        f"a worker process died (exit code {proc.exitcode}) during the run {label}: was it out of memory, or killed?"
    )


def _raise_from_worker(exc: BaseException, text: str, label: str) -> None:
    where = f"in the run {label} (a worker process)"
    if hasattr(exc, "add_note"):  # Python 3.11
        exc.add_note(f"raised {where}; the worker's traceback is above")
    if text:
        raise exc from _WorkerTraceback(f"{where}:\n{text.rstrip()}")
    raise exc


class _NoInterrupt:
    """Ctrl-C is ignored inside the block (in the main thread): the workers are ended whole."""

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not None:  # None: a handler set outside Python, which could not be put back
                self.previous = previous
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def map_runs(
    fn: Callable,
    items: Iterable,
    workers: int | None = None,
    progress: bool = True,
    desc: str = "runs",
    label: Callable = str,
    on_result: Callable | None = None,
) -> list:
    """Return ``[fn(item) for item in items]``, the items run by worker processes.

    ``workers``: how many (None: one per core, :func:`default_workers`; never more than there
    are items; 1: in this process, one after another, with no worker). ``fn`` is called once
    per item; it may show its own progress when the runs are made here, and shows none in a
    worker (:func:`minirlhf.progress.silence`); there, with ``progress``, this process shows
    one bar over the runs, ``desc`` naming them and ``label(item)`` each finished one (a line
    per run in a log). ``on_result(index, result)`` is called in this process as each run
    finishes, in the order they finish, so a caller that catches KeyboardInterrupt keeps what
    finished. See the module's docstring for how workers start, and for Ctrl-C and errors.
    """
    items = list(items)
    n = len(items)
    w = resolve_workers(workers, n)
    method = start_method()
    payload = None
    if w > 1 and method == "spawn":
        try:
            payload = pickle.dumps((fn, items), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - e.g. a function defined in a notebook
            _say_once(
                "pickle",
                f"note: the runs are made one after another in this process: their function "
                f"cannot be sent to a worker process here ({type(exc).__name__}); a function "
                f"defined in a module (a .py file) can",
                progress,
            )
            w = 1
    if w == 1:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if on_result is not None:
                on_result(i, out[-1])
        return out
    return _in_workers(fn, items, w, method, payload, progress, desc, label, on_result)


def _in_workers(fn, items, w, method, payload, progress, desc, label, on_result) -> list:
    n = len(items)
    ctx = multiprocessing.get_context(method)
    if method == "fork":
        _warm_up()
    procs, conns, running = [], [], {}  # running: connection -> index of its run
    results, next_i, finished, clean = [None] * n, 0, 0, False
    bar = _progress.progress_bar(total=n, desc=f"{desc} ({w} worker processes)", enabled=progress, each_line=True)
    try:
        for k in range(w):
            here, there = ctx.Pipe()
            args = (there, fn, items, None) if payload is None else (there, None, None, payload)
            proc = ctx.Process(target=_serve, args=args, daemon=True, name=f"minirlhf-worker-{k + 1}")
            proc.start()
            there.close()
            procs.append(proc)
            conns.append(here)
        for conn in conns:
            if next_i < n:
                conn.send(next_i)
                running[conn] = next_i
                next_i += 1
        while finished < n:
            sentinels = {procs[conns.index(c)].sentinel: c for c in running}
            ready = wait([*running, *sentinels])
            for conn in [c for c in ready if c in running]:
                try:
                    kind, i, value, extra = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):  # it closed its end: it is gone
                    _died(procs[conns.index(conn)], label(items[running[conn]]))
                del running[conn]
                if kind == "error":
                    _raise_from_worker(value, extra, label(items[i]))
                results[i], finished = value, finished + 1
                if on_result is not None:
                    on_result(i, value)
                bar.set_postfix_str(f"{label(items[i])}, {extra:.1f} s")
                bar.update(1)
                if next_i < n:
                    conn.send(next_i)
                    running[conn] = next_i
                    next_i += 1
            for sentinel in [s for s in ready if s in sentinels]:
                conn = sentinels[sentinel]
                if conn in running and not conn.poll():
                    _died(procs[conns.index(conn)], label(items[running[conn]]))
        clean = True
    finally:
        with _NoInterrupt():
            bar.close()
            for conn, proc in zip(conns, procs):
                if clean:
                    try:
                        conn.send(None)
                    except OSError:
                        pass
                    proc.join(timeout=10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
                conn.close()
    return results
