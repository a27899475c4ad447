"""Where the package keeps what it makes, and how it writes a file so that it is never half there."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["ROOT", "OUTPUTS", "write_atomic"]

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = Path(os.environ.get("MINIRLHF_OUTPUTS", ROOT / "outputs"))


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
