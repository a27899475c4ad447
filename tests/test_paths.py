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
        spec = importlib.util.spec_from_file_location("fresh_paths", paths.__file__)
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
