"""Chapter 10's "name the tell", judged by what the answer means, never by its words.

A "name the tell" exercise asks two things of a run with a planted bug, and the learner's
function answers ``(metric, mechanism)``, or ``(metric, mechanism, note)``:

- ``metric``: a panel of the run's dashboard that separates the run from the correct one by
  the chapter's whole-run paired test (each seed's difference, buggy minus correct, of the
  metric's mean over the run; the 95% interval of those differences excludes 0:
  :func:`minirlhf.studies.silent_bugs.paired_difference`), or None when no panel does. Every
  panel that separates is accepted, and only those.
- ``mechanism``: the number of what the changed line does, picked from the chapter's list
  of mechanisms, which holds every run's bug and a few that no run has.
- ``note``: the learner's own sentence, if they want one. It is not graded.

A sentence stuffed with the right words gains nothing, and a right answer in any words is
never refused: there are no words to match. Each message says which of the two parts is
wrong and what the check tested.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expect import _MISSING_RETURN, Expect, type_phrase

__all__ = ["Tell", "ExpectTell"]


@dataclass(frozen=True)
class Tell:
    """The expected answer of a "name the tell" exercise, for :class:`ExpectTell`.

    ``run``: the run's name in messages ("run C"). ``separating``: the metrics that separate the
    run from the correct one by the whole-run paired test (empty when none does). ``mechanism``:
    the number of the changed line's mechanism in ``mechanisms``, the list the learner picks
    from, ``((number, text), ...)``. ``shown``: every metric of the run's dashboard.
    ``earlier``: ``((number, run), ...)``, the mechanisms of the runs whose answers the learner
    has already seen, so that picking one of them gets a message that says so.
    """

    run: str
    separating: tuple
    mechanism: int
    mechanisms: tuple
    shown: tuple
    earlier: tuple = ()

    described_by_str = True  # a failing case shows str(self) as what was expected

    def __str__(self) -> str:
        # What a failing case shows as "expected": the question, never its answer.
        return (
            f"a metric that separates {self.run} from the correct run (or None), and the number "
            "of the changed line's mechanism"
        )


def _is_number(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class ExpectTell(Expect):
    """``(metric, mechanism)`` or ``(metric, mechanism, note)``: a metric that separates the
    runs (None when none does) and the number of the changed line's mechanism; the note is
    not graded (see :class:`Tell`)."""

    what = "the answer"

    def __init__(self, slips=()):
        self._named(None, None, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if not isinstance(got, (tuple, list)) or len(got) not in (2, 3):
            return "type", (
                f"the answer is {type_phrase(got)}, expected (metric, mechanism) or "
                "(metric, mechanism, note)" + (_MISSING_RETURN if got is None else "")
            )
        metric, mechanism = got[0], got[1]
        if not isinstance(expected, Tell):  # another answer (the reference's): the same metric and mechanism
            return (
                None
                if (metric, mechanism) == tuple(expected[:2])
                else ("value", f"the answer is {(metric, mechanism)!r}, expected {tuple(expected[:2])!r}")
            )
        numbers = [n for n, _ in expected.mechanisms]
        if len(got) == 3 and not (got[2] is None or isinstance(got[2], str)):
            return "type", (
                f"the note is {type_phrase(got[2])}: write it as a string (it is not graded), or leave it out"
            )
        if not (metric is None or isinstance(metric, str)):
            return "type", (
                f"the metric is {type_phrase(metric)}: write a panel's title as a string, "
                "or None when no panel separates the runs"
            )
        if isinstance(metric, str) and metric.strip() not in expected.shown:
            return "unknown-metric", (
                f"{metric!r} is not a panel of the dashboard: write one of "
                f"{', '.join(expected.shown)}, or None when no panel separates the runs"
            )
        if not _is_number(mechanism):
            said = (
                f"{mechanism!r} is text: give the number of a line of the list ({numbers[0]} to {numbers[-1]})"
                if isinstance(mechanism, str)
                else f"the mechanism is {type_phrase(mechanism)}: give the number of a "
                f"line of the list ({numbers[0]} to {numbers[-1]})"
            )
            return "type", said
        if mechanism not in numbers:
            return "unknown-mechanism", (
                f"there is no mechanism {mechanism} in the list: pick one of {numbers[0]} to {numbers[-1]}"
            )
        metric = None if metric is None else metric.strip()
        problems = []
        if metric is None and expected.separating:
            problems.append(
                (
                    "no-metric",
                    f"None says that no panel separates {expected.run} from the correct "
                    "run, but one does: over the whole run, its paired difference (seed "
                    "by seed, buggy minus correct) has a 95% interval that excludes 0",
                )
            )
        elif metric is not None and metric not in expected.separating:
            problems.append(
                (
                    "wrong-metric",
                    f"{metric} does not separate {expected.run} from the correct run: "
                    "over the whole run, its paired difference (seed by seed, buggy "
                    "minus correct) has a 95% interval that holds 0; answer a panel "
                    "whose interval excludes 0, or None if no panel's does",
                )
            )
        if problems:  # the metric is wrong: the mechanism is judged once it is right, never alone
            return problems[0][0], f"{problems[0][1]}. The mechanism is judged once the metric is right"
        if mechanism != expected.mechanism:
            text = dict(expected.mechanisms)[mechanism].rstrip(".")
            text = text if text[:2].isupper() else text[:1].lower() + text[1:]
            seen = dict(expected.earlier).get(mechanism)
            why = (
                f"it is {seen}'s bug (its answer is above), and each run has a bug of its own"
                if seen
                else f"ask of each mechanism whether it would move {expected.run}'s panels the way they moved, and "
                "leave the others where they are"
            )
            said = f"mechanism {mechanism} ({text}) is not what the changed line of {expected.run} does: {why}"
            right = (
                f"None is right: no panel separates {expected.run} from the correct run"
                if metric is None
                else f"the metric is right: {metric} separates {expected.run} from the correct run"
            )
            return "mechanism", f"{right}. But {said}"
        return None
