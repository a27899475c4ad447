"""Text from outside the program (a learner's code, a lock file another process wrote), made
fit for one line of a message: :func:`printable` escapes every character that could draw on a
terminal, :func:`shorten` cuts a text to a width.

The course's wire format, sandbox, report and grader use these two, and so do the engine's
output locks, so they live in the engine, below all of them.
"""

from __future__ import annotations

import re

__all__ = ["printable", "shorten"]

# Characters that move the cursor, end a line, or reorder text on a terminal: a message from the
# learner's code must not be able to draw a line of its own (a fake "PASS" or "Result" line).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """Return ``text`` with every control, line-breaking or bidirectional character written as
    an escape (``\\n``, ``\\x1b``, ``\\u202e``), so that it stays on one line and draws nothing."""

    def escape(m) -> str:
        c = m[0]
        return _ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")

    return _UNPRINTABLE.sub(escape, str(text))


def shorten(text: str, width: int) -> str:
    """Return ``text``, cut to ``width`` characters with "..." at the end when it is longer."""
    return text if len(text) <= width else text[: width - 3] + "..."
