"""Where the package keeps what it makes, how it checks a folder before a long run writes there,
how it writes a file so that it is never half there, and how one run keeps a folder to itself.

Every file the package writes goes through :func:`write_atomic`, which replaces regular files
only: a folder, a named pipe, a device or a symbolic link to one is never replaced. A command
that runs for minutes checks its output paths first (:func:`folder_problem`,
:func:`file_problem`), and holds its output folder with :func:`output_lock` while it runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path

from .safe_text import printable, shorten

__all__ = [
    "ROOT",
    "OUTPUTS",
    "KEPT",
    "write_atomic",
    "save_figure",
    "folder_problem",
    "file_problem",
    "kind_of",
    "open_regular",
    "NotRegularFile",
    "FolderInUse",
    "output_lock",
    "LOCK_NAME",
    "making",
]

ROOT = Path(__file__).resolve().parent.parent
# MINIRLHF_OUTPUTS moves the outputs; set but empty counts as unset (not "the current folder").
OUTPUTS = Path(os.environ.get("MINIRLHF_OUTPUTS") or ROOT / "outputs")
# Copies of a learner's notebook that a command kept rather than lose: the version the grader
# graded when the file changed meanwhile, and what `make notebooks --force` replaced. Not under
# notebooks/ (no glob of notebooks there matches them) and not under outputs/ (`make clean`
# removes that).
KEPT = Path(os.environ.get("MINIRLHF_KEPT") or ROOT / "kept")
LOCK_NAME = ".minirlhf-lock"  # the lock file output_lock keeps in the folder it holds


class NotRegularFile(OSError):
    """Raised by :func:`write_atomic` when something other than a regular file stands at the
    target (a folder, a named pipe, a device, ...): it is never replaced."""


class FolderInUse(OSError):
    """Raised by :func:`output_lock` when another running process holds the folder."""


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
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def open_regular(path: Path):
    """Return a binary file object for ``path`` if it is a regular file; None if nothing is
    there; raise IsADirectoryError (a folder) or OSError (anything else). Opened without
    blocking, so a named pipe at the path is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except NotADirectoryError:  # a file where a folder of the path should be
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise IsADirectoryError(path) if stat.S_ISDIR(mode) else OSError(f"{path} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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
            if not _replaceable(what):
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


def _replaceable(what: str) -> bool:
    # what kind_of says: a regular file may be replaced; where nothing is, a file may be made
    return what == "a regular file" or what.startswith("nothing")


def file_problem(path: Path) -> str:
    """Return why a file cannot be written at ``path`` by :func:`write_atomic`, or "".

    The name must not be empty, what stands at ``path`` must be nothing or a regular file
    (a symbolic link is followed), and its folder must be a folder that exists or can be made.
    Meant to be called before a long run, so that the run does not end in a failed write.
    """
    if str(path) == "":
        return "the file name is empty"
    path = Path(path)
    what = kind_of(path)
    if not _replaceable(what):
        return f"{path} is {what}, not a file that can be replaced"
    return folder_problem(path.parent)


def write_atomic(path: Path, data, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, then rename it.

    ``data`` is bytes, text, or a binary file object open for reading, copied in chunks from
    where it stands to its end (never whole in memory: a copy of a file of any size). A crash
    mid-write leaves the old file (or none), never half a file. The file is readable by all
    (0644), like any other output. Returns ``path``. Raises :class:`NotRegularFile`, before
    writing anything, when ``path`` is empty or something other than a regular file stands
    there (a folder, a named pipe, a device, a symbolic link to one of those): that is never
    replaced.
    """
    if str(path) == "":
        raise NotRegularFile("the file name is empty")
    path = Path(path)
    what = kind_of(path)
    if not _replaceable(what):
        raise NotRegularFile(f"{path} is {what}, not a file that can be replaced")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(data, "read"):
                shutil.copyfileobj(data, f, 1 << 20)
            else:
                f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        what = kind_of(path)  # once more: something may have been put there meanwhile
        if not _replaceable(what):
            raise NotRegularFile(f"{path} is {what}, not a file that can be replaced")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_figure(figure, path: Path, **savefig_kwargs) -> Path:
    """Save a matplotlib ``figure`` to ``path`` through :func:`write_atomic` (rendered in memory
    first, so a run stopped mid-write leaves the old picture or none, never half a PNG); the
    format follows the file's suffix. Returns ``path``."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **savefig_kwargs)
    return write_atomic(path, buffer.getvalue())


@contextlib.contextmanager
def making(path: Path, on_wait=None):
    """Hold the right to make the file at ``path`` while the block runs: one process at a time.

    Two processes that need the same stored file (two chapters run side by side, as ``make
    test`` runs them) would otherwise both make it. The second one waits here until the first
    has written it, then reads it instead. ``on_wait()``, when given, is called once if the
    wait begins. The lock is an advisory lock (``flock``) on a small file beside ``path``,
    ``.NAME.making``, removed when the block ends; the operating system releases the lock when
    its process ends, so a crashed run never leaves it held. Where no lock can be taken (a
    platform without ``flock``, a folder that cannot be written, something other than a regular
    file at the lock's path), the block runs without one: the cost is a file made twice, never
    a wrong one, since every write is atomic.
    """
    try:
        import fcntl
    except ImportError:  # no flock on this platform
        yield
        return
    path = Path(path)
    lock = path.parent / f".{path.name}.making"
    fd, waited = None, False
    while fd is None:
        try:
            if not _replaceable(kind_of(lock)):
                break
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o644)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                fd = None
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait is not None and not waited:
                    on_wait()
                waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            # The holder before us removes the file before it lets go: a lock on a removed
            # file holds nothing, so take it again on the file now at that name.
            try:
                same = os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                fd = None
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
            break
    if fd is None:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # removed while held, then released
        os.close(fd)


def _alive(pid: int) -> bool:
    """Return True when a process ``pid`` runs on this machine (or might: no permission to ask)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):  # OverflowError: a number no process id can be
        return False
    return True


def _lock_holder(lock: Path) -> dict | None:
    """Return what a lock file says (``pid``, ``host``, ``started``, ``command``), or None when it
    cannot be read as a lock (empty, half written, not JSON, or not the fields this module
    writes: a whole-number pid, and text for the others)."""
    try:  # opened without blocking, and read only if a regular file: a pipe there cannot hang us
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = json.loads(os.read(fd, 4096).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or type(data.get("pid")) is not int:
        return None
    if not all(isinstance(data.get(key, ""), str) for key in ("host", "started", "command")):
        return None
    return data


def _not_a_lock(lock: Path) -> str:
    """Return why what stands at ``lock`` is no lock file this module could have left, or "".
    A regular file is one; so is a symbolic link (only the link is ever removed, never what
    it points to). A folder, a named pipe, a device, ... is someone else's: never removed."""
    try:
        mode = os.lstat(lock).st_mode
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"{lock} cannot be looked at ({exc.strerror})"
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return ""
    return f"{lock} is {kind_of(lock)}, not a lock file: remove it yourself if it is no one's, or choose another folder"


@contextlib.contextmanager
def output_lock(folder: Path, command: str = ""):
    """Hold ``folder`` for this process while the block runs: one writer per output folder.

    The lock is a file, :data:`LOCK_NAME`, in the folder (made if needed), that names this
    process (pid, host, start time, ``command``). A second run that asks for the folder while
    the first runs gets :class:`FolderInUse` with a message that names the other process; it
    is refused, never merged. A lock left by a run that crashed (its process is gone, on this
    machine) is taken over, with no message needed, and so is one that cannot be read as a lock
    (half written, or fields of the wrong kind). A lock whose process number is in use on this
    machine (by the run, or by another program that got the number after a restart), or a lock
    from another host, cannot be checked further and is refused, with the file to delete named.
    Something other than a lock file at its name (a folder, a named pipe, a device) is refused
    in one line and left as it is. The lock file is removed when the block ends, and the folder
    too when the block made it and left it empty.
    """
    folder = Path(folder)
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK_NAME
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": command,
    }
    for _ in range(5):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            problem = _not_a_lock(lock)
            if problem:
                raise FolderInUse(problem) from None
            holder = _lock_holder(lock)
            if holder is None:  # being written this instant, or damaged: look again shortly
                time.sleep(0.2)
                holder = _lock_holder(lock)
                if holder is None:
                    _take_over(lock, None)
                    continue
            if holder.get("host") == me["host"] and not _alive(holder["pid"]):
                _take_over(lock, holder)  # its run crashed: the folder is free
                continue
            # A process with that number runs here: the holder, or (after a restart, or in a
            # container, where numbers come round again) another program. Only the user can
            # tell, so the file to delete is named here as for a lock from another host.
            where = "" if holder.get("host") == me["host"] else f" on {_shown(holder.get('host') or '?')}"
            command = _shown(holder.get("command", ""))
            raise FolderInUse(
                f"{folder} is in use by another run (process {holder['pid']}{where}, started "
                f"{_shown(holder.get('started', '?'))}{': ' + command if command else ''}); "
                f"wait for it to end, or choose another folder (if no run is going there, delete {lock})"
            )
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        break
    else:
        raise FolderInUse(f"{folder}: could not take the lock file {lock}; delete it if no run is going")
    try:
        yield lock
    finally:
        if (_lock_holder(lock) or {}).get("pid") == me["pid"]:
            with contextlib.suppress(OSError):
                lock.unlink()
        if made:  # a run that wrote nothing leaves no empty folder behind
            with contextlib.suppress(OSError):
                folder.rmdir()


def _shown(text: str) -> str:
    """``text`` from a lock file as it may stand in a one-line message."""
    return shorten(printable(text), 203)


def _take_over(lock: Path, holder: dict | None) -> None:
    """Remove a stale lock, unless another process replaced it meanwhile; never anything but a
    lock file (:func:`_not_a_lock`: a folder or a pipe put there is refused in one line)."""
    if _lock_holder(lock) == holder:
        problem = _not_a_lock(lock)
        if problem:
            raise FolderInUse(problem)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
