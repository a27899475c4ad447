"""The "name the tell" answer check: a metric that gives the bug away, and one sentence why."""

import pytest

from minirlhf.course.cases import MISTAKES, Case, Exercise, ExpectTell, Tell, run_cases

TELL = Tell(metrics=("val/completion_length",),
            reasons=(("mask", "end"), ("mask", "all", "4"), ("every", "token")),
            shown=("accuracy", "kl", "objective/kl", "val/completion_length"))


def answer(metric, reason):
    return lambda: (metric, reason)


def exercise(fn_expected=TELL):
    return Exercise("tell", 10, "name the tell", ExpectTell(), (Case({}, fn_expected, "the tell"),), ("h",),
                    reference=answer("val/completion_length", "the mask keeps every token, so the length is 4"))


@pytest.mark.parametrize("got, mistake", [
    (("val/completion_length", "Without the mask every token counts, so the length is always 4."), ""),
    (["val/completion_length", "The mask no longer stops at the end mark."], ""),
    (("  val/completion_length ", "the MASK ignores the END mark"), ""),
    ("val/completion_length", "type"),
    (None, "type"),
    (("completion length", "every token"), "unknown-metric"),
    (("accuracy", "every token counts"), "wrong-metric"),
    (("val/completion_length", ""), "no-reason"),
    (("val/completion_length", "The mask is wrong. Every token counts now."), "not-one-sentence"),
    (("val/completion_length", "it goes up a lot"), "reason"),
])
def test_answers(got, mistake):
    result = run_cases(lambda: got, exercise()).results[0]
    assert result.passed == (mistake == "")
    assert result.mistake == mistake, result.message
    if mistake:
        assert mistake in MISTAKES and result.message


def test_messages_name_what_to_do():
    unknown = run_cases(answer("completion length", "x" * 20), exercise()).results[0].message
    assert "val/completion_length" in unknown  # the dashboard's names are listed
    wrong = run_cases(answer("accuracy", "every token counts"), exercise()).results[0].message
    assert "panel" in wrong and "val/completion_length" not in wrong  # no give-away
    assert run_cases(exercise().reference, exercise()).passed
