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


def _make(tmp_path: Path, *args: str, pip_fails: bool = False, environ: dict | None = None):
    """Run `make venv ARGS` with a recording Python (and ``environ`` added to the environment);
    return (completed process, pip calls)."""
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
    env.update(environ or {})
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


@pytest.mark.parametrize("choice", ["cpu default", "cpu cpu", "default cpu", "cpu,default"])
def test_two_words_are_refused_not_read_as_the_default(tmp_path, index, choice):
    """N17: `filter` let "cpu default" through, and the install then took the default index."""
    done, calls = _make(tmp_path, f"TORCH={choice}", f"TORCH_CPU_INDEX={index(200)}", "UNAME_S=Linux")
    assert done.returncode != 0 and calls == [], done.stdout
    assert f"TORCH={choice}: say TORCH=cpu (the default) or TORCH=default" in done.stderr
    assert "configured index" not in done.stdout


def test_a_torch_in_the_environment_stops_only_an_install(tmp_path):
    """N17: TORCH=1 set for another program: `make help` and `make -n clean` work; an install
    says where the value came from and what TORCH must be."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    for target in (["help"], ["-n", "clean"]):
        done = subprocess.run(
            ["make", "--no-print-directory", "-C", str(ROOT), *target],
            capture_output=True, text=True, env={**env, "TORCH": "1"}, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", (target, done.stderr)
    done, calls = _make(tmp_path, environ={"TORCH": "1"})
    assert done.returncode != 0 and calls == []
    assert "TORCH=1 (from the environment): say TORCH=cpu (the default) or TORCH=default, or unset TORCH" in done.stderr


@pytest.fixture
def dribbling_index():
    """A stand-in for the CPU index that answers one byte of its headers every 0.2 s, for
    20 s: each read gets a byte well within any per-read timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def dribble(conn):
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            end = time.monotonic() + 20
            while time.monotonic() < end and not stop.is_set():
                try:
                    conn.sendall(b"a")
                except OSError:
                    return
                time.sleep(0.2)

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=dribble, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/whl/cpu"
    stop.set()
    server.close()


def test_the_probe_has_one_deadline_for_a_server_that_dribbles(tmp_path, dribbling_index):
    """N18: the probe gave up only when a single read waited its 10 s, so a server sending a
    byte at a time held it for as long as it liked. Now the whole probe has a deadline
    (INDEX_PROBE_SECONDS, 10 by default; 2 here to keep the test short)."""
    start = time.monotonic()
    done, calls = _make(tmp_path, f"TORCH_CPU_INDEX={dribbling_index}", "UNAME_S=Linux", "INDEX_PROBE_SECONDS=2")
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert _pip(calls) == ["--upgrade pip", "-r requirements.txt", "--no-deps --no-build-isolation -e ."]
    assert f"{dribbling_index}/torch/: no answer within 2 s" in done.stderr
    assert "cannot be reached: torch comes from the configured index" in done.stdout
    assert took < 10, took
    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if x.startswith("INDEX_PROBE_SECONDS"))
    assert line.split("?=")[1].strip() == "10"


def test_a_notebook_name_with_a_space_is_one_argument(tmp_path):
    """N16: Finder's copy, "01_kl_penalty copy.ipynb", was split by make into two names that
    do not exist. Each learner notebook is one argument of the grader and of nbval; the
    copies a command kept are still left out."""
    (tmp_path / "notebooks").mkdir()
    names = ["01_kl_penalty.ipynb", "01_kl_penalty copy.ipynb", "02_it's $HOME.ipynb"]
    for name in [*names, "01_kl_penalty.graded.ipynb", "01_kl_penalty copy.backup-20261203-164000.ipynb"]:
        (tmp_path / "notebooks" / name).write_text("{}")
    log, fake = tmp_path / "args.log", tmp_path / "python"
    fake.write_text(f'#!/bin/bash\nfor a in "$@"; do echo "$a" >> {log}; done\necho --- >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TORCH")}
    done = subprocess.run(
        ["make", "-s", "-C", str(tmp_path), "-f", str(ROOT / "Makefile"), "STAMP=", f"PY={fake}", "check",
         "nbval-notebooks"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    check, nbval, _ = log.read_text().split("---\n")
    expected = sorted(f"notebooks/{name}" for name in names)
    assert check.splitlines()[:2] == ["-m", "minirlhf.course.grader"]
    assert sorted(check.splitlines()[2:]) == expected
    assert sorted(a for a in nbval.splitlines() if a.startswith("notebooks/")) == expected


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
