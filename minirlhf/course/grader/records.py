"""What comes back from the learner's kernel: the records the kernel side writes, one line of
JSON per call, read and checked here before anything uses them, and then judged.

A line that is not exactly what :mod:`minirlhf.course.grader.kernel` writes (a field out of
place, data that :func:`~minirlhf.course.plain.from_plain` refuses, a line far too long) becomes a
call that "cannot be graded"; a last line cut short (a kernel killed mid-write) is left out.
Every text that arrives is made :func:`~minirlhf.safe_text.printable`, so the kernel cannot
draw lines of the report.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...safe_text import printable, shorten
from ..cases import Case, CaseResult, Exercise, judge
from ..plain import RETURN_CAP, Opaque, from_plain
from ..sandbox import Call

_RECORD_CAP = 40 * RETURN_CAP + 4096  # characters of one result line from the kernel
_KINDS = {"ok", "mutated", "todo", "error", "timeout"}  # what a call did (Call.kind)
_REASONS = {"all", "timeout", "budget"}  # why a session ended
_SETUPS = {"missing", "not callable", "not yours"}  # why a session could not start


def _no_constant(name: str):
    raise ValueError(f"{name} is not plain JSON")


def _parse_record(line: str | None, expected_index: int) -> dict:
    """Return the checked record on one line from the kernel. A line that is not exactly what
    the kernel side writes becomes a call that "cannot be graded"."""

    def broken(why: str) -> dict:
        return {
            "index": expected_index,
            "kind": "error",
            "n_printed": 0,
            "seconds": 0.0,
            "value": None,
            "message": f"its result arrived malformed from the kernel ({why}), so it cannot be graded",
        }

    if line is None:
        return broken("far too long")
    try:
        data = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return broken("not JSON")
    if not isinstance(data, dict):
        return broken("not a record")
    if data.get("done") is True:
        done = {"done": True}
        if data.get("reason") in _REASONS:
            done["reason"] = data["reason"]
        elif data.get("setup") in _SETUPS:
            done["setup"] = data["setup"]
            names = data.get("names", [])
            done["names"] = [n for n in names if isinstance(n, str)][:200] if isinstance(names, list) else []
            detail = data.get("detail")
            done["detail"] = printable(shorten(detail, 200)) if isinstance(detail, str) else ""
        else:
            return broken("an unknown ending")
        return done
    fields = {"index", "kind", "message", "n_printed", "seconds", "value"}
    if not fields <= set(data) <= fields | {"grads", "named"}:
        return broken("unexpected fields")
    data = {"grads": None, "named": None, **data}
    if (
        type(data["index"]) is not int
        or data["index"] != expected_index
        or data["kind"] not in _KINDS
        or type(data["message"]) is not str
        or type(data["n_printed"]) is not int
        or data["n_printed"] < 0
        or type(data["seconds"]) not in (int, float)
        or not 0 <= data["seconds"] < 1e9
        or data["named"] not in (None, True, False)
    ):
        return broken("a field out of place")
    record = {k: data[k] for k in fields | {"grads", "named"}}
    record["message"] = printable(shorten(record["message"], 600))
    record["seconds"] = float(record["seconds"])
    if record["kind"] in ("ok", "mutated"):
        try:
            record["value"] = from_plain(data["value"])
        except ValueError as exc:
            record["value"] = Opaque("value", "", f"its data arrived malformed: {exc}")
        try:
            record["grads"] = from_plain(data["grads"])
        except ValueError as exc:
            record["grads"] = f"its gradient arrived malformed ({exc})"
    else:
        record["value"] = record["grads"] = None
    return record


def _read_records(path: Path, limit: int) -> list[dict]:
    """Return the records the kernel wrote to ``path`` (at most ``limit``), checked. A last
    line cut short (a kernel killed mid-write) is left out."""
    records: list[dict] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            while len(records) < limit:
                line = f.readline(_RECORD_CAP + 1)
                if not line:
                    break
                if not line.endswith("\n"):
                    if len(line) <= _RECORD_CAP:
                        break  # the end of the file, cut short
                    while line and not line.endswith("\n"):  # a record far too long: skip it
                        line = f.readline(_RECORD_CAP + 1)
                    line = None
                n_calls = sum("index" in r for r in records)
                records.append(_parse_record(line, n_calls))
                if records[-1].get("done"):
                    break
    except FileNotFoundError:
        pass
    return records


def _judge_record(record: dict, case: Case, exercise: Exercise) -> CaseResult:
    """Judge a checked record as :func:`~minirlhf.course.cases.judge` judges a call in the check cell."""
    call = Call(
        record["kind"],
        record["value"],
        record["message"],
        "",
        record["n_printed"],
        record["seconds"],
        record.get("grads"),
        record.get("named"),
    )
    return judge(call, case, exercise.expect, exercise.reference)
