"""Where outputs go, and the check a long run makes before it writes there."""

import importlib.util
import json
import os
import re
import stat
import subprocess
import sys

import pytest

from minirlhf import paths
from minirlhf.paths import folder_problem, kind_of


def load_paths_with(env_value):
    """Import a fresh copy of minirlhf/paths.py with MINIRLHF_OUTPUTS set to ``env_value``."""
    saved = os.environ.get("MINIRLHF_OUTPUTS")
    os.environ["MINIRLHF_OUTPUTS"] = env_value
    try:
        spec = importlib.util.spec_from_file_location(
            "minirlhf.fresh_paths", paths.__file__
        )  # in the package: its relative imports resolve
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            os.environ.pop("MINIRLHF_OUTPUTS")
        else:
            os.environ["MINIRLHF_OUTPUTS"] = saved


def test_an_empty_outputs_variable_is_unset_not_the_current_folder(tmp_path):
    assert load_paths_with("").OUTPUTS == paths.ROOT / "outputs"
    assert load_paths_with(str(tmp_path)).OUTPUTS == tmp_path


def test_folder_problem_names_what_is_in_the_way(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "out" / "results.json").mkdir(parents=True)
    os.mkfifo(tmp_path / "pipe")
    assert folder_problem(tmp_path / "new" / "deeper") == ""
    assert folder_problem(tmp_path / "out", ("a.png",)) == ""
    assert folder_problem(tmp_path / "file") == f"{tmp_path / 'file'} is a regular file, not a folder"
    assert folder_problem(tmp_path / "file" / "sub") == (
        f"{tmp_path / 'file' / 'sub'} cannot be made: {tmp_path / 'file'} is a regular file, not a folder"
    )
    assert folder_problem(tmp_path / "out", ("results.json",)) == (
        f"{tmp_path / 'out' / 'results.json'} is a folder, where the output file should go"
    )
    assert folder_problem(tmp_path / "pipe") == f"{tmp_path / 'pipe'} is a named pipe (FIFO), not a folder"
    assert kind_of(tmp_path / "nothing") == "nothing"


# ----------------------------------------------------------------------------- one guard for every write


def _fake_device(monkeypatch, target):
    """Make os.stat report ``target`` as a character device (no real device is touched)."""
    real = os.stat

    def fake(path, *args, **kwargs):
        result = real(path, *args, **kwargs)
        if os.path.abspath(path) == os.path.abspath(target):
            fields = list(result)
            fields[0] = stat.S_IFCHR | 0o666
            return os.stat_result(fields)
        return result

    monkeypatch.setattr(paths.os, "stat", fake)


def test_write_atomic_never_replaces_what_is_not_a_regular_file(tmp_path, monkeypatch):
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", tmp_path / "link-to-pipe")
    os.symlink(tmp_path / "folder", tmp_path / "link-to-folder")
    for name, words in (
        ("folder", "a folder"),
        ("pipe", "a named pipe (FIFO)"),
        ("link-to-pipe", "a named pipe (FIFO)"),
        ("link-to-folder", "a folder"),
    ):
        with pytest.raises(paths.NotRegularFile, match=re.escape(f"is {words}, not a file")):
            paths.write_atomic(tmp_path / name, "x")
        assert paths.file_problem(tmp_path / name).endswith(f"is {words}, not a file that can be replaced")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode) and os.path.islink(tmp_path / "link-to-pipe")
    with pytest.raises(paths.NotRegularFile, match="empty"):
        paths.write_atomic("", "x")
    assert paths.file_problem("") == "the file name is empty"
    device = tmp_path / "dev-null"
    device.write_text("a stand-in")
    _fake_device(monkeypatch, device)
    with pytest.raises(paths.NotRegularFile, match="a character device"):
        paths.write_atomic(device, "zip bytes")
    assert device.read_text() == "a stand-in"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dev-null",
        "folder",
        "link-to-folder",
        "link-to-pipe",
        "pipe",
    ]  # no temporary file left either


def test_write_atomic_still_replaces_a_regular_file_and_makes_folders(tmp_path):
    target = tmp_path / "a" / "b.json"
    paths.write_atomic(target, "1")
    paths.write_atomic(target, b"2")
    assert target.read_text() == "2" and paths.file_problem(target) == ""
    (tmp_path / "file").write_text("x")
    assert "is a regular file, not a folder" in paths.file_problem(tmp_path / "file" / "out.json")


def test_figures_are_written_atomically(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    target = tmp_path / "fig.png"
    target.write_bytes(b"old picture")

    def killed(self, *args, **kwargs):  # a stop in the middle of rendering
        raise KeyboardInterrupt

    monkeypatch.setattr(type(fig), "savefig", killed)
    with pytest.raises(KeyboardInterrupt):
        paths.save_figure(fig, target)
    assert target.read_bytes() == b"old picture" and [p.name for p in tmp_path.iterdir()] == ["fig.png"]
    monkeypatch.undo()
    paths.save_figure(fig, target, dpi=50)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(fig)


def test_one_writer_per_folder_and_a_crashed_lock_is_taken_over(tmp_path):
    out = tmp_path / "out"
    with paths.output_lock(out, "first") as lock:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from minirlhf import paths\n"
                "try:\n with paths.output_lock(sys.argv[1], 'second'): pass\n"
                "except paths.FolderInUse as e: print(e); sys.exit(3)",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        assert other.returncode == 3, other.stderr
        assert f"is in use by another run (process {os.getpid()}" in other.stdout and ": first)" in other.stdout
    assert not (out / paths.LOCK_NAME).exists()
    # a run that crashed left its lock: its process is gone, so the next run takes the folder
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    out.mkdir()  # the first run wrote nothing, so its empty folder went with its lock
    (out / paths.LOCK_NAME).write_text(
        json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "started": "earlier", "command": "crashed"})
    )
    with paths.output_lock(out, "after the crash") as lock:
        assert json.loads(lock.read_text())["command"] == "after the crash"
    (out / paths.LOCK_NAME).write_text("")  # half written and never finished
    with paths.output_lock(out):
        pass
    assert not (out / paths.LOCK_NAME).exists()
    (out / paths.LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "another-machine", "started": "now"}))
    with pytest.raises(
        paths.FolderInUse,
        match=re.escape(
            f"on another-machine, started now); wait for it to end, "
            f"or choose another folder (if no run is going there, "
            f"delete {out / paths.LOCK_NAME})"
        ),
    ):
        with paths.output_lock(out):
            pass  # a process elsewhere cannot be checked: refused, and the file to delete named


def _held(out, holder) -> str:
    """Put a lock file saying ``holder`` (a dict as JSON, or raw text) in ``out``, ask for the
    folder, and return "taken" or the refusal's message."""
    out.mkdir(exist_ok=True)
    (out / paths.LOCK_NAME).write_text(holder if isinstance(holder, str) else json.dumps(holder))
    try:
        with paths.output_lock(out, "the next run") as lock:
            assert json.loads(lock.read_text())["command"] == "the next run"
        return "taken"
    except paths.FolderInUse as exc:
        return str(exc)


_HERE = __import__("socket").gethostname()


@pytest.mark.parametrize(
    "holder",
    [
        {"pid": 100000000000000000000, "host": _HERE},  # was OverflowError from os.kill
        {"pid": -(10**30), "host": _HERE},
        {"pid": 5, "host": ["a"], "command": {"x": 1}},  # was TypeError building the message
        {"pid": True, "host": _HERE},
        {"pid": os.getpid(), "host": _HERE, "started": 7},
        "[" * 2000 + "]" * 2000,  # deeper than json.loads goes
    ],
    ids=["huge-pid", "huge-negative-pid", "wrong-types", "bool-pid", "started-a-number", "deep"],
)
def test_a_lock_with_numbers_or_fields_no_run_writes_is_taken_over(tmp_path, holder):
    """N12: a pid too large for any process, a host that is a list, a command that is a table:
    no lock this package wrote, so it is taken over like a damaged one, never a traceback."""
    assert _held(tmp_path / "out", holder) == "taken"
    assert list((tmp_path / "out").iterdir()) == []  # and the lock gone after the run


def test_a_live_process_on_this_host_is_refused_with_the_lock_file_named(tmp_path):
    """N13: the lock's number belongs to a live process here (perhaps not a run at all, after a
    restart): only the user can tell, so the file to delete is named, as for another host."""
    import socket

    out = tmp_path / "out"
    said = _held(out, {"pid": os.getppid(), "host": socket.gethostname(), "started": "then", "command": "x\ny"})
    assert said == (
        f"{out} is in use by another run (process {os.getppid()}, started then: x\\ny); wait for it to end, "
        f"or choose another folder (if no run is going there, delete {out / paths.LOCK_NAME})"
    )
    assert (out / paths.LOCK_NAME).is_file()
    assert _held(out, {"pid": os.getppid()}).startswith(f"{out} is in use by another run (process {os.getppid()} on ?")


@pytest.mark.parametrize(
    "make, words", [(os.mkdir, "a folder"), (os.mkfifo, "a named pipe (FIFO)")], ids=["folder", "fifo"]
)
def test_a_folder_or_pipe_named_like_the_lock_is_refused_in_one_line_and_left(tmp_path, make, words):
    """N12, N13: never removed (it is someone's), never a traceback, never taken over."""
    out = tmp_path / "out"
    out.mkdir()
    make(out / paths.LOCK_NAME)
    with pytest.raises(paths.FolderInUse) as refused:
        with paths.output_lock(out):
            pytest.fail(f"the run went ahead over {words}")
    assert str(refused.value) == (
        f"{out / paths.LOCK_NAME} is {words}, not a lock file: remove it yourself if it is no one's, "
        "or choose another folder"
    )
    assert kind_of(out / paths.LOCK_NAME) == words and [p.name for p in out.iterdir()] == [paths.LOCK_NAME]
    # a symbolic link to it is only a link: removed, what it points to kept
    os.rename(out / paths.LOCK_NAME, tmp_path / "target")
    os.symlink(tmp_path / "target", out / paths.LOCK_NAME)
    with paths.output_lock(out):
        pass
    assert kind_of(tmp_path / "target") == words and list(out.iterdir()) == []
