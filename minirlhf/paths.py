"""Where the package keeps what it makes, how it checks a folder before a long run writes there,
and how it writes a file so that it is never half there."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["ROOT", "OUTPUTS", "write_atomic", "folder_problem", "kind_of"]

ROOT = Path(__file__).resolve().parent.parent
# MINIRLHF_OUTPUTS moves the outputs; set but empty counts as unset (not "the current folder").
OUTPUTS = Path(os.environ.get("MINIRLHF_OUTPUTS") or ROOT / "outputs")


def kind_of(path: Path) -> str:
    """Return what is at ``path`` in words: "a regular file", "a folder", "a named pipe (FIFO)",
    ..., or "nothing". Follows symbolic links; never opens the file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symbolic link" if os.path.islink(path) else "nothing"
    except NotADirectoryError:
        return "nothing (a file stands where a folder should be)"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


def folder_problem(folder: Path, files=()) -> str:
    """Return why ``folder`` cannot take the output files ``files`` (names inside it), or "".

    The folder must be a folder, or not exist yet under a folder that can be written; each of
    ``files`` that exists already must be a regular file (it will be replaced). Meant to be
    called before a long run, so that the run does not end in a failed write.
    """
    folder = Path(folder)
    if str(folder) == "":
        return "the folder name is empty"
    if folder.exists():
        if not folder.is_dir():
            return f"{folder} is {kind_of(folder)}, not a folder"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"{folder} is a folder this user cannot write to"
        for name in files:
            what = kind_of(folder / name)
            if what not in ("nothing", "a regular file"):
                return f"{folder / name} is {what}, where the output file should go"
        return ""
    parent = folder.absolute().parent
    while not parent.exists() and parent != parent.parent:
        if parent.is_symlink():
            return f"{parent} is a broken symbolic link"
        parent = parent.parent
    if not parent.is_dir():
        return f"{folder} cannot be made: {parent} is {kind_of(parent)}, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{folder} cannot be made: {parent} is a folder this user cannot write to"
    return ""


def write_atomic(path: Path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename it.

    A crash mid-write leaves the old file (or none), never half a file. The file is readable
    by all (0644), like any other output. Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
