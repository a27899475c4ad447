"""The kernel that runs a learner's notebook, and its lifetime: start it, run the notebook's cells
in it, run the grading cells, interrupt a call that ignores its time limit, restart a kernel that
ignores the interrupt or dies, shut it down.

A :class:`_Runner` owns one kernel (nbclient, for the Python running the grader), started in a
process session of its own, in an empty working folder. It runs cells with a timeout each and
reports a failing cell as a :class:`CellProblem`. :func:`_call_in_kernel` drives the kernel side
(:mod:`minirlhf.course.grader.kernel`) a slice at a time and reads back what it wrote
(:mod:`minirlhf.course.grader.records`); it says in so many words how a session that did not
finish ended.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ...safe_text import printable, shorten
from .records import _read_records

SLICE = 1.0  # seconds of calls per grading cell, so the grader can step in between
GRACE = 3.0  # seconds a kernel gets to answer after a time limit or an interrupt
WARM_UP = '__import__("minirlhf.course.grader.kernel")'  # run in the kernel before the first call
WARM_UP_TIMEOUT = 120.0  # seconds that import may take (torch with it), the cell limit if longer
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CellProblem:
    """A notebook cell that failed while the notebook ran."""

    number: int  # among the non-empty code cells, from 1: the In [n] of a run from the top
    text: str  # what went wrong, one line
    line: int | None = None  # the line of the cell it points at, when known
    code: str = ""  # that line's code (or the cell's first line)
    defines: tuple = ()  # the functions the cell defines (so a missing exercise can point here)

    def __str__(self) -> str:
        where = f"code cell {self.number}" + (f", line {self.line}" if self.line else "")
        return f"{where}: {self.text}"


def _cell_problem(number: int, source: str, text: str, line: int | None = None) -> CellProblem:
    """Return the problem of a cell, quoting the line it points at (or its first line)."""
    lines = source.splitlines()
    if line and 1 <= line <= len(lines):
        code = lines[line - 1].strip()
    else:
        line, code = None, next((text.strip() for text in lines if text.strip()), "")
    defines = tuple(re.findall(r"^\s*def\s+(\w+)\s*\(", source, flags=re.M))
    return CellProblem(number, printable(text), line, printable(shorten(code, 100)), defines)


def _error_text(output: dict) -> tuple[str, int | None]:
    """Return (one line saying what an error output means, the line of the cell it points at).
    Control characters and line breaks of the error's text are escaped: a cell's error must not
    be able to draw lines of the report."""
    text, line = _error_text_raw(output)
    return printable(text), line


def _error_text_raw(output: dict) -> tuple[str, int | None]:
    ename, evalue = str(output.get("ename", "Error")), str(output.get("evalue", ""))
    trace = _ANSI.sub("", "\n".join(output.get("traceback", [])))
    line = re.search(r"In\s*\[\d*\], line (\d+)", trace)
    if ename in ("SyntaxError", "IndentationError", "TabError"):
        line = re.search(r", line (\d+)\)$", evalue) or line
        evalue = re.sub(r"\s*\([^()]*, line \d+\)$", "", evalue)
        return f"{ename}: {evalue}", int(line[1]) if line else None
    text = f"raised {ename}" + (f": {shorten(evalue, 100)}" if evalue else "")
    if ename == "NotImplementedError":
        text += " (it calls an exercise that is not written yet)"
    return text, int(line[1]) if line else None


_ERROR_KEPT = 20_000  # characters of an error's message, and of each line of its traceback, kept


def _trimmed_error(msg: dict) -> dict:
    """An error message from the kernel with its text cut to what a report can use: the
    message's first :data:`_ERROR_KEPT` characters, the traceback's last 50 lines, each cut."""
    content = dict(msg.get("content", {}))
    content["evalue"] = str(content.get("evalue", ""))[:_ERROR_KEPT]
    trace = content.get("traceback", [])
    content["traceback"] = [str(line)[:_ERROR_KEPT] for line in (trace if isinstance(trace, list) else [])[-50:]]
    return {**msg, "content": content}


def _quiet_leftovers(loop, context) -> None:
    """Event-loop error handler: drop the errors of nbclient's tasks that a cell time-out or a
    stop signal leaves behind (they fail later, on a socket that is gone, and nobody awaits
    them); pass anything else to asyncio's own handler."""
    task = context.get("future") or context.get("task")
    coro = task.get_coro() if hasattr(task, "get_coro") else None
    if getattr(coro, "__qualname__", "").startswith("NotebookClient."):
        return
    loop.default_exception_handler(context)


class _Runner:
    """A kernel running one notebook, plus the grading cells. Owns the kernel's lifetime."""

    def __init__(self, nb, cwd: Path, cell_timeout: float, grace: float = GRACE, tmp: Path | None = None):
        from jupyter_core.utils import ensure_event_loop
        from nbclient import NotebookClient

        from ..exercises import GRADING_ENV
        from ..frontend import BOOK_BUILD_ENV, RECORDING_ENV

        class QuietClient(NotebookClient):
            def output(self, outs, msg, display_id, cell_index):
                # Keep errors only, and only their start: a cell that prints a flood, or raises
                # an error with a huge message, must not fill the memory.
                if msg["msg_type"] == "error":
                    return super().output(outs, _trimmed_error(msg), display_id, cell_index)
                return None

        ensure_event_loop().set_exception_handler(_quiet_leftovers)  # a safety net for what is left
        self.nb = nb
        # nbclient's limit is whole seconds, at least 1: keep the one used, so messages name it
        self.cell_timeout, self.grace = max(1, math.ceil(cell_timeout)), grace
        self.nb.cells.append(_new_code_cell(""))  # scratch cell for the grading code
        self.scratch = len(self.nb.cells) - 1
        env = dict(os.environ, **{GRADING_ENV: "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
        env.pop(BOOK_BUILD_ENV, None)  # solutions and learners run in the live (JupyterLab) mode
        env.pop(RECORDING_ENV, None)  # and make no book forms, which grading never shows
        if tmp is not None:  # the kernel's temporary files go where the grader removes them
            env.update(TMPDIR=str(tmp), TEMP=str(tmp), TMP=str(tmp))
        self.start_kwargs = {"env": env, "cwd": str(cwd), "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if os.name == "posix":  # a session of its own: a signal to its process group stays there
            self.start_kwargs["start_new_session"] = True
        self.client = QuietClient(
            nb,
            kernel_name="python3",
            allow_errors=True,
            timeout=math.ceil(cell_timeout),
            startup_timeout=60,
            shutdown_kernel="immediate",
        )
        self.restarts = 0
        self.tmp = tmp
        self._start()

    def _start(self, attempts: int = 3) -> None:
        """Start the kernel and connect to it. A kernel that exits before it answers is started
        again (up to ``attempts`` in all): when many kernels start at once, two can be handed
        the same free port, and the one that loses the race exits at once."""
        for attempt in range(1, attempts + 1):
            self.client.km = _current_env_kernel_manager()
            if self.tmp is not None:  # its connection file too goes where the grader removes it
                self.client.km.connection_file = str(self.tmp / f"kernel-{self.restarts}-{attempt}.json")
            try:
                self.client.start_new_kernel(**self.start_kwargs)
                self.client.start_new_kernel_client()
                return
            except RuntimeError as exc:
                if "died" not in str(exc) or attempt == attempts:
                    raise
                if self.client.km is not None:  # nbclient usually cleans up itself
                    try:
                        self.client._cleanup_kernel()
                    except Exception:
                        pass

    def restart(self) -> None:
        """Kill the kernel and start a fresh one (the notebook must then be run again)."""
        self.shutdown()
        self.restarts += 1
        self._start()

    def shutdown(self) -> None:
        self._drop_leftover_tasks()
        try:
            self.client._cleanup_kernel()
        except Exception:  # already gone
            pass

    @staticmethod
    def _drop_leftover_tasks() -> None:
        """Cancel the nbclient tasks a cell time-out (or a stop signal) leaves running, and let
        them end.

        On a time-out nbclient leaves the cell's output poller waiting: it would read the
        kernel's next messages and drop those of later cells, and fail with a traceback nobody
        retrieves ("Task exception was never retrieved") once the kernel's sockets close.
        """
        import asyncio

        from jupyter_core.utils import ensure_event_loop

        loop = ensure_event_loop()
        if loop.is_running():
            return
        tasks = [
            t
            for t in asyncio.all_tasks(loop)
            if not t.done() and getattr(t.get_coro(), "__qualname__", "").startswith("NotebookClient.")
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def execute(self, index: int, timeout: float, store_history: bool = True) -> str:
        """Run cell ``index``; return "ok", "timeout" or "dead" (the kernel died)."""
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        self.client.timeout = max(1, math.ceil(timeout))
        try:
            self.client.execute_cell(self.nb.cells[index], index, store_history=store_history)
        except CellTimeoutError:
            self._drop_leftover_tasks()
            return "timeout"
        except DeadKernelError:
            self._drop_leftover_tasks()
            return "dead"
        return "ok"

    def error_of(self, index: int) -> str:
        """Return "Name: value" of the error cell ``index`` ended with, or ""."""
        for output in self.nb.cells[index].get("outputs", []):
            if output.get("output_type") == "error":
                return f"{output.get('ename')}: {shorten(str(output.get('evalue')), 200)}"
        return ""

    def run_code(self, code: str, timeout: float) -> str:
        self.nb.cells[self.scratch].source = code
        return self.execute(self.scratch, timeout, store_history=False)

    def recover(self) -> bool:
        """After a time-out: interrupt, and restart if the kernel does not answer. True if it answered."""
        from nbclient.util import run_sync

        try:
            run_sync(self.client.km.interrupt_kernel)()
        except Exception:  # the kernel is gone: the probe below fails and we restart
            pass
        if self.run_code("pass", self.grace) == "ok":
            return True
        self.restart()
        return False

    def run_notebook(self, problems: dict, skip: set) -> None:
        """Run every code cell but ``skip``; record failures in ``problems`` (by cell index)."""
        number = 0
        for index, cell in enumerate(self.nb.cells[: self.scratch]):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            number += 1
            if index in skip:
                continue
            status = self.execute(index, self.cell_timeout)
            if status == "ok":
                errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
                if errors and index not in problems:
                    problems[index] = _cell_problem(number, cell.source, *_error_text(errors[0]))
                continue
            skip.add(index)
            if status == "timeout":
                problems[index] = _cell_problem(
                    number,
                    cell.source,
                    f"ran longer than the {self.cell_timeout:g} s limit per cell (--cell-timeout) and was stopped",
                )
                # A cell stopped half-way may leave anything half-done (a module half-imported:
                # the grader's own imports would fail after it), so the rest runs in a new kernel.
                self.restart()
            else:
                problems[index] = _cell_problem(
                    number, cell.source, "stopped the kernel (a crash, exit() or out of memory)"
                )
                self.restart()
            return self.run_notebook(problems, skip)  # the kernel is new: run the notebook again


def _current_env_kernel_manager():
    """Return a kernel manager for this very Python (the environment that has minirlhf), not
    whatever a "python3" kernel spec elsewhere on the machine points to."""
    import ipykernel.kernelspec
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class CurrentEnv(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())

    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=CurrentEnv())


def _new_code_cell(source: str):
    import nbformat

    return nbformat.v4.new_code_cell(source)


def _call_in_kernel(runner: _Runner, spec: dict, n_inputs: int) -> tuple[list, str, str]:
    """Run the grading cell step by step until the kernel session is done.

    Return (the records written, what went wrong if it did not finish, how it ended:
    "" when it finished, "error" when the grading cell failed, "dead" when the kernel died and
    "restart" when it ignored the interrupt; in both last cases it was restarted).
    """
    # The grader's side is loaded into the kernel first, under a time limit of its own: after a
    # (re)start that import brings torch with it, which takes seconds when several kernels
    # start at once on a busy machine, and the learner's first call must not pay for it.
    warm_limit = max(runner.cell_timeout, WARM_UP_TIMEOUT)
    warm = runner.run_code(WARM_UP, warm_limit)
    if warm == "dead":
        runner.restart()
        return [], "stopped the kernel (a crash, exit() or out of memory)", "dead"
    if warm == "timeout" or runner.error_of(runner.scratch):
        why = runner.error_of(runner.scratch) or f"it took longer than {warm_limit:g} s"
        return [], f"could not be graded (the grader could not load in the kernel: {why})", "error"
    code = f'__import__("minirlhf.course.grader.kernel", fromlist=["_"])._kernel_step(globals(), {spec!r})'
    results = Path(spec["results"])
    limit = n_inputs + 1
    for _ in range(n_inputs + 2):  # every step makes at least one call, so this is plenty
        status = runner.run_code(code, SLICE + spec["time_limit"] + runner.grace)
        if status == "timeout" and runner.recover():
            status = "ok"  # the interrupt stopped the call, which is recorded as a time-out
        records = _read_records(results, limit)
        if records and records[-1].get("done"):
            return records, "", ""
        if status == "ok":
            error = runner.error_of(runner.scratch)
            if error:  # the grading cell itself failed: say so rather than try again
                return records, f"could not be graded ({error})", "error"
            continue
        if status == "dead":
            runner.restart()
            return (_read_records(results, limit), "stopped the kernel (a crash, exit() or out of memory)", "dead")
        ignored = (
            f"ran past the {spec['time_limit']:g} s time limit and ignored the interrupt "
            "(an `except:` that catches everything?); the kernel was restarted"
        )
        return _read_records(results, limit), ignored, "restart"
    return _read_records(results, limit), "could not be graded (the grading cell made no progress)", "error"
