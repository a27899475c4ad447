"""%%worked_answer in a real kernel, driven as JupyterLab drives it (allow_stdin: a person is
watching): a cell that fails or is interrupted ends in its error as a plain cell does, so that
"Run all" stops there (the queued cell is aborted), and its output comes before the traceback."""

import os
import queue
import re
import time

import pytest

jupyter_client = pytest.importorskip("jupyter_client")

QUEUED = "print('B ran after A')"


@pytest.fixture(scope="module")
def kernel():
    """A kernel of this very Python (the one that has minirlhf), with the magic registered."""
    import ipykernel.kernelspec
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    from minirlhf.course.frontend import BOOK_BUILD_ENV

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict())

    km = KernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())
    km.start_kernel(env={k: v for k, v in os.environ.items() if k != BOOK_BUILD_ENV})  # not a book build
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        reply = kc.execute_interactive(
            "from minirlhf.course import answers\nanswers.register()", allow_stdin=True, timeout=120
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run_all(kernel, cell: str, interrupt_after: str = "") -> tuple[dict, list]:
    """Send ``cell`` and a plain cell after it, as Run All does; interrupt the kernel once
    ``cell`` has printed ``interrupt_after``. Return the replies' statuses by cell ("A", "B")
    and what ``cell`` sent on iopub, in order, as (msg_type, content)."""
    km, kc = kernel
    a = kc.execute(cell, allow_stdin=True)  # stop_on_error, as JupyterLab sends it
    b = kc.execute(QUEUED, allow_stdin=True)
    sent, idle, deadline = [], False, time.monotonic() + 120
    while not idle and time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=5)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != a:
            assert "B ran after A" not in msg["content"].get("text", ""), "the queued cell ran"
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "status":
            idle = content["execution_state"] == "idle"
        elif kind in ("stream", "error", "display_data", "execute_result"):
            sent.append((kind, content))
            if interrupt_after and kind == "stream" and interrupt_after in content["text"]:
                km.interrupt_kernel()
    assert idle, "the cell did not end within 120 s"
    replies = {}
    for _ in range(2):
        reply = kc.get_shell_msg(timeout=60)
        replies["A" if reply["parent_header"]["msg_id"] == a else "B"] = reply["content"]["status"]
    assert replies.get("B") is not None and b
    return replies, sent


def _output_then_one_error(sent: list, printed: str) -> dict:
    kinds = [kind for kind, _ in sent]
    assert kinds.count("error") == 1, sent  # the traceback is shown once
    where = next(i for i, (kind, content) in enumerate(sent) if kind == "stream" and printed in content["text"])
    assert where < kinds.index("error"), sent  # the cell's output first, then its error
    return sent[kinds.index("error")][1]


def test_a_worked_answer_that_raises_stops_run_all(kernel):
    cell = "%%worked_answer\nimport time\nprint('A printed', flush=True)\ntime.sleep(0.5)\nraise ValueError('A failed')"
    replies, sent = _run_all(kernel, cell)
    assert replies == {"A": "error", "B": "aborted"}  # as a plain cell: Run All stops here
    error = _output_then_one_error(sent, "A printed")
    assert error["ename"] == "ValueError" and error["evalue"] == "A failed"
    assert "A failed" in "\n".join(error["traceback"])


def test_a_worked_answer_interrupted_stops_run_all(kernel):
    # what the cell prints is held for the fold; its stderr is not, and tells when it runs
    cell = (
        "%%worked_answer\nimport sys, time\nprint('A printed')\nprint('A started', file=sys.stderr, flush=True)\n"
        "for i in range(1200):\n    time.sleep(0.1)"
    )
    replies, sent = _run_all(kernel, cell, interrupt_after="A started")
    assert replies == {"A": "error", "B": "aborted"}  # the stop button stops Run All
    assert _output_then_one_error(sent, "A printed")["ename"] == "KeyboardInterrupt"


def test_a_worked_answer_that_runs_is_still_folded(kernel):
    km, kc = kernel
    shown = []
    reply = kc.execute_interactive(
        "%%worked_answer\nprint('KL 0.0123')", allow_stdin=True, timeout=60, output_hook=shown.append
    )
    assert reply["content"]["status"] == "ok"
    html = [m["content"]["data"]["text/html"] for m in shown if m["msg_type"] == "display_data"]
    assert len(html) == 1 and html[0].startswith('<details class="mr-answer">') and "KL 0.0123" in html[0]
    assert not [m for m in shown if m["msg_type"] == "stream"]  # nothing printed in plain view


@pytest.mark.parametrize("body", ["print('out')\nraise ValueError('A failed')", "print('out')\n1 +"])
def test_the_error_reads_as_a_plain_cells(kernel, body):
    # the cell's own traceback, once: not the magic's frames (a SyntaxError would show them)
    km, kc = kernel

    def shown(code: str) -> tuple[str, list]:
        out = []
        reply = kc.execute_interactive(code, allow_stdin=True, timeout=60, output_hook=out.append)
        errors = [m["content"] for m in out if m["msg_type"] == "error"]
        assert reply["content"]["status"] == "error" and len(errors) == 1, out
        text = re.sub(r"In\[\d+\]|\d+\.py", "", "\n".join(errors[0]["traceback"]))
        return errors[0]["ename"], text.splitlines()

    assert shown("%%worked_answer\n" + body) == shown(body)
