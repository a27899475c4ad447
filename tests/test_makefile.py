"""The Makefile's torch choice, without the network: which pip commands each choice runs.

`make venv` runs for real with a stand-in for the venv's Python: it runs the reachability probe
(``python -c``) with the real interpreter, against an index served on 127.0.0.1, and records every
other call (the pip commands) in a log instead of installing anything.
"""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIN = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch=="))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


class _Index(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"<html></html>")

    def log_message(self, *args):
        pass


@pytest.fixture
def index():
    """A local stand-in for the CPU index; ``index(status)`` sets what it answers."""
    handler = type("Handler", (_Index,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def answer(status: int) -> str:
        handler.status = status
        return f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"

    yield answer
    server.shutdown()
    server.server_close()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/whl/cpu"  # nothing listens there: connection refused


def _make(tmp_path: Path, *args: str, pip_fails: bool = False):
    """Run `make venv ARGS` with a recording Python; return (completed process, pip calls)."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
        f'echo "$*" >> {log}\n' + ('case "$*" in *--index-url*) exit 1;; esac\n' if pip_fails else "")
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    venv = tmp_path / "venv"
    venv.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TORCH")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "venv", f"PY={fake}", f"VENV={venv}",
         f"STAMP={venv}/.installed", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    calls = log.read_text().splitlines() if log.exists() else []
    return done, calls


def _pip(calls: list[str]) -> list[str]:
    return [c.removeprefix("-m pip install --quiet ") for c in calls]


def test_default_is_the_cpu_index_first_then_the_requirements(tmp_path, index):
    url = index(200)
    done, calls = _make(tmp_path, f"TORCH_CPU_INDEX={url}", "UNAME_S=Linux")
    assert done.returncode == 0, done.stderr
    assert _pip(calls) == [
        "--upgrade pip",
        f"--timeout 30 --retries 2 --index-url {url} {PIN}",
        "-r requirements.txt",
        "--no-deps --no-build-isolation -e .",
    ]
    assert f"torch: the CPU build from {url}" in done.stdout
    assert (tmp_path / "venv" / ".installed").exists()


def test_an_index_that_answers_4xx_is_reachable(tmp_path, index):
    url = index(404)
    done, calls = _make(tmp_path, "TORCH=cpu", f"TORCH_CPU_INDEX={url}", "UNAME_S=Linux")
    assert done.returncode == 0, done.stderr
    assert any("--index-url" in c for c in calls)


@pytest.mark.parametrize("how", ["refused", "503"])
def test_unreachable_index_falls_back_to_the_configured_one_quickly(tmp_path, index, how):
    url = _closed_port_url() if how == "refused" else index(503)
    start = time.monotonic()
    done, calls = _make(tmp_path, f"TORCH_CPU_INDEX={url}", "UNAME_S=Linux")
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert _pip(calls) == ["--upgrade pip", "-r requirements.txt", "--no-deps --no-build-isolation -e ."]
    assert "cannot be reached: torch comes from the configured index" in done.stdout
    assert url in done.stderr  # the probe's one-line reason
    assert took < 20


def test_torch_default_never_asks_the_cpu_index(tmp_path, index):
    url = index(200)
    done, calls = _make(tmp_path, "TORCH=default", f"TORCH_CPU_INDEX={url}", "UNAME_S=Linux")
    assert done.returncode == 0, done.stderr
    assert _pip(calls) == ["--upgrade pip", "-r requirements.txt", "--no-deps --no-build-isolation -e ."]
    assert "TORCH=default" in done.stdout


def test_macos_takes_pypi_torch_which_is_the_cpu_build(tmp_path, index):
    url = index(200)
    done, calls = _make(tmp_path, f"TORCH_CPU_INDEX={url}", "UNAME_S=Darwin")
    assert done.returncode == 0, done.stderr
    assert not any("--index-url" in c for c in calls)
    assert "on macOS is the CPU build" in done.stdout


def test_a_failed_install_from_a_reachable_cpu_index_stops_the_build(tmp_path, index):
    """No silent fall-back to a CUDA build when the CPU index answered but pip failed."""
    url = index(200)
    done, calls = _make(tmp_path, f"TORCH_CPU_INDEX={url}", "UNAME_S=Linux", pip_fails=True)
    assert done.returncode != 0
    assert not any(c.endswith("-r requirements.txt") for c in calls)
    assert not (tmp_path / "venv" / ".installed").exists()


def test_an_unknown_choice_is_refused(tmp_path):
    done, calls = _make(tmp_path, "TORCH=cuda")
    assert done.returncode != 0 and calls == []
    assert "TORCH=cpu (the default) or TORCH=default" in done.stderr


def test_make_n_prints_the_cpu_index_only_for_the_cpu_choice():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TORCH")}

    def dry(*args: str) -> str:
        return subprocess.run(
            ["make", "--no-print-directory", "-C", str(ROOT), "-n", "venv", "STAMP=/nonexistent/.installed", *args],
            capture_output=True, text=True, env=env, check=True,
        ).stdout  # fmt: skip

    assert f'--index-url https://download.pytorch.org/whl/cpu "{PIN}"' in dry("UNAME_S=Linux")
    assert "--index-url" not in dry("TORCH=default", "UNAME_S=Linux")
    assert "--index-url" not in dry("UNAME_S=Darwin")


def test_nbval_runs_every_solution_once_the_longest_first(tmp_path):
    """make test's nbval on solutions/ lists every chapter's solution exactly once, in the
    Makefile's order (the longest first), with xdist told to keep that order; a solution the
    order does not name still runs, after the others."""
    (tmp_path / "solutions").mkdir()
    names = ["01_a.ipynb", "09_b.ipynb", "11_c.ipynb", "12_new.ipynb"]
    for name in names:
        (tmp_path / "solutions" / name).write_text("{}")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".installed").write_text("")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "requirements.txt", tmp_path / "requirements.txt")
    (tmp_path / "pyproject.toml").write_text("")
    os.utime(tmp_path / ".venv" / ".installed", (time.time() + 60, time.time() + 60))
    out = subprocess.run(["make", "-n", "nbval-solutions"], cwd=tmp_path, capture_output=True, text=True, check=True)
    listed = [word.removeprefix("solutions/") for word in out.stdout.split() if word.startswith("solutions/")]
    assert listed == ["11_c.ipynb", "09_b.ipynb", "01_a.ipynb", "12_new.ipynb"]
    assert "--no-loadscope-reorder" in out.stdout
    # and the order names every chapter the book has
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith("SOLUTIONS_FIRST :="))
    first = line.split(":=")[1].split()
    assert sorted(first) == sorted(p.name[:2] for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
