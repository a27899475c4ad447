"""The check helper: one plain message per kind of mistake, a verdict that never raises, and
a compact report whose text and HTML are the same on every run."""

import dataclasses
import json
import time

import numpy as np
import pytest
import torch

from minirlhf.course.cases import Case, Exercise, Raises, judge, raised, run_cases
from minirlhf.course.exercises import EXERCISES, GRADING_ENV, check, get
from minirlhf.course.expect import ExpectArray, ExpectDict2, ExpectFloat, ExpectFloat2
from minirlhf.course.report import next_hint
from minirlhf.course.sandbox import call_safely

KL = get("kl_penalty")
PPO = get("ppo_rlhf_objective")


def kl_right(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * kl.mean()), 2)


def kl_abs(logp_policy, logp_reference, beta):
    kl = np.asarray(logp_policy, dtype=float) - np.asarray(logp_reference, dtype=float)
    return round(float(beta * abs(kl.mean())), 2)


def test_call_safely_records_each_kind_of_call():
    ok = call_safely(lambda x: x + 1, {"x": 1})
    assert (ok.kind, ok.value) == ("ok", 2)
    todo = call_safely(lambda x: (_ for _ in ()).throw(NotImplementedError("your code here")), {"x": 1})
    assert (todo.kind, todo.message) == ("todo", "not implemented yet")

    def divide(x):
        return x / 0

    err = call_safely(divide, {"x": 1})
    assert err.kind == "error"
    assert err.message.startswith("raised ZeroDivisionError: division by zero (in divide, line")
    assert "return x / 0" in err.message
    assert "exit()" in call_safely(lambda: exit(), {}).message


def test_a_loop_that_never_ends_is_stopped_even_if_it_catches_exception():
    def spin():
        while True:
            try:
                pass
            except Exception:  # the alarm is not an Exception, so this does not swallow it
                pass

    start = time.perf_counter()
    call = call_safely(spin, {}, time_limit=0.2)
    assert time.perf_counter() - start < 2
    assert call.kind == "timeout" and "took longer than 0.2 s" in call.message


def test_a_call_that_swallows_the_alarm_and_returns_late_still_counts_as_too_slow():
    def late():
        try:
            time.sleep(5)
        except BaseException:
            pass
        return 1.0

    call = call_safely(late, {}, time_limit=0.2)
    assert call.kind == "timeout"


@pytest.mark.parametrize("value", [[-1.0, -2.0], np.array([-1.0, -2.0]), torch.tensor([-1.0, -2.0])])
def test_mutating_an_input_is_reported_and_the_caller_keeps_its_value(value):
    def in_place(logp):
        logp[0] = 0.0
        return 1.0

    kwargs = {"logp": value}
    call = call_safely(in_place, kwargs)
    assert call.kind == "mutated" and "changed its input 'logp' in place" in call.message
    assert float(kwargs["logp"][0]) == -1.0  # the function got a copy


def test_printed_output_is_captured_and_capped():
    def chatty():
        for i in range(10_000):
            print("line", i)
        return 0.5

    call = call_safely(chatty, {})
    assert call.kind == "ok" and call.value == 0.5
    assert len(call.printed) == 2000 and call.n_printed > 80_000


@pytest.mark.parametrize(
    "got, words",
    [
        (np.float64(0.05), "NumPy scalar"),
        (np.float64(0.05), "convert it before any rounding, round(float(x), 2)"),
        ([0.05], "is a list, expected a Python float"),
        (float("nan"), "is NaN"),
        (float("inf"), "is infinite"),
        (torch.tensor(0.05), "is a torch tensor; the contract asks for a Python float"),
        (None, "is None, expected a Python float: is a return statement missing?"),
        (0.0512, "the result is 0.0512, right but not rounded"),
        (-0.05, "the result has the wrong sign: -0.05, expected 0.05"),
        (1, "is an int (1)"),
        (0.06, "the result is 0.06, expected 0.05"),
    ],
)
def test_float_comparator_says_what_is_wrong(got, words):
    assert words in ExpectFloat2().problem(got, 0.05)


@pytest.mark.parametrize(
    "got, mistake",
    [
        (np.float64(0.05), "numpy-scalar"),
        ([0.05], "type"),
        (None, "type"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (torch.tensor(0.05), "type"),
        (0.0512, "not-rounded"),
        (-0.05, "sign"),
        (1, "int"),
        (0.06, "value"),
    ],
)
def test_float_comparator_names_the_mistake(got, mistake):
    assert ExpectFloat2().diagnose(got, 0.05)[0] == mistake
    assert ExpectFloat2().diagnose(0.05, 0.05) is None


@pytest.mark.parametrize(
    "got, words",
    [
        ([1.0, 1.0, 0.0], "is a list, expected a dict"),
        ({"objective": 1.0, "policy_loss": 1.0}, "no key 'kl_penalty'"),
        ({"objective": 1.0, "policy_loss": 1.0, "kl_penalty": 0.0, "J": 1.0}, "a key the contract does not have, 'J'"),
        ({"objective": np.float64(1.0), "policy_loss": 1.0, "kl_penalty": 0.0}, "objective is a NumPy scalar"),
        ({"objective": 1.0, "policy_loss": 0.41, "kl_penalty": 0.0}, "policy_loss is 0.41, expected 1.0"),
        (None, "the result is None, expected a dict"),
    ],
)
def test_dict_comparator_says_what_is_wrong(got, words):
    expected = {"objective": 1.0, "policy_loss": 1.0, "kl_penalty": 0.0}
    assert words in ExpectDict2(expected).problem(got, expected)


def test_array_comparator_checks_type_shape_nan_and_values():
    want = torch.tensor([0.5, 0.5])
    assert ExpectArray(container="torch").problem(torch.tensor([0.5, 0.5]), want) is None
    assert ExpectArray(container="torch").problem([0.5, 0.5], want) == (
        "the result is a list; the contract asks for a torch tensor"
    )
    assert ExpectArray().problem(np.zeros(3), want) == "the result has shape (3,), expected (2,)"
    assert ExpectArray().problem(np.array([np.nan, 0.5]), want).startswith("the result holds NaN at [0]")
    assert ExpectArray().problem(np.array([0.6, 0.5]), want) == (
        "the result differs in 1 of 2 places; the largest gap is at [0]: 0.6, expected 0.5"
    )
    advantages = ExpectArray(what="the advantages", plural=True)
    assert advantages.problem(np.zeros((2, 3)), np.zeros((2, 4))) == "the advantages have shape (2, 3), expected (2, 4)"
    assert advantages.problem(np.array([[0.0, 0.425]]), np.array([[0.0, 0.35]])) == (
        "the advantages differ in 1 of 2 places; the largest gap is at [0, 1]: 0.425, expected 0.35"
    )
    assert ExpectArray(container="numpy").problem(np.float64(0.5), want) == (
        "the result is a NumPy float; the contract asks for a NumPy array: np.asarray(...)"
    )


def test_judge_uses_the_call_kind_before_the_value():
    case = KL.cases[0]
    assert judge(call_safely(kl_right, case.kwargs), case, KL.expect).passed
    timeout = judge(call_safely(lambda **kw: time.sleep(1), case.kwargs, 0.1), case, KL.expect)
    assert not timeout.passed and timeout.kind == "timeout"


def test_report_of_a_partly_wrong_function_shows_failures_and_a_hint():
    report = run_cases(kl_abs, KL)
    assert report.state == "fail" and report.n_passed == 8
    text = str(report)
    assert text.splitlines()[0] == "kl_penalty: 8/11 cases pass."
    assert "FAIL case 2: second example" in text
    assert "expected  -1.5" in text and "returned  1.5" in text and "wrong sign" in text
    assert "Hint 2 of 3:" in text  # the hint about abs() and the sign
    assert "PASS" not in text  # compact: passing cases are not listed
    html = report._repr_html_()
    assert "FAIL" in html and "#D55E00" in html and "<code>abs()</code>" in html
    assert str(run_cases(kl_abs, KL)) == text and run_cases(kl_abs, KL)._repr_html_() == html  # deterministic


def test_report_lists_at_most_three_failures():
    text = str(run_cases(lambda **kw: 9.99, KL))
    assert text.count("FAIL case") == 3 and "... and 8 more failing cases" in text
    assert "Hint 1 of 3" in text


def test_report_of_a_right_function_is_one_line_and_of_a_blank_one_says_not_implemented():
    assert str(run_cases(kl_right, KL)) == "kl_penalty: all 11 cases pass."
    one = dataclasses.replace(KL, cases=KL.cases[:1])
    assert str(run_cases(kl_right, one)) == "kl_penalty: its one case passes."
    assert "<summary>the case</summary>" in run_cases(kl_right, one)._repr_html_()
    html = run_cases(kl_right, KL)._repr_html_()
    assert "PASS" in html and "<details><summary>the 11 cases</summary>" in html

    def blank(logp_policy, logp_reference, beta):
        raise NotImplementedError("your code here")

    report = run_cases(blank, KL)
    assert report.state == "todo" and str(report).startswith("kl_penalty: not implemented yet")


def test_after_a_time_out_the_other_cases_are_not_run():
    quick = dataclasses.replace(KL, time_limit=0.2)
    start = time.perf_counter()
    report = run_cases(lambda **kw: time.sleep(10), quick)
    assert time.perf_counter() - start < 2
    assert [r.kind for r in report.results] == ["timeout"] + ["not run"] * (len(KL.cases) - 1)
    assert f"{len(KL.cases) - 1} cases not run after the time-out" in str(report)


def test_run_cases_on_something_that_is_not_a_function():
    report = run_cases(0.05, KL)
    assert not report.passed and "kl_penalty is a float, not a function" in str(report)


def test_hints_grow_more_specific_as_more_cases_pass():
    hints = ("a", "b", "c")
    assert [next_hint(hints, n, 10)[0] for n in (0, 2, 5, 7, 9)] == [1, 1, 2, 2, 3]
    assert next_hint((), 0, 10) == (0, "")


def test_check_does_nothing_while_the_grader_runs_the_notebook(monkeypatch, capsys):
    monkeypatch.setenv(GRADING_ENV, "1")
    report = check("kl_penalty", lambda **kw: time.sleep(10))
    assert report.results == [] and capsys.readouterr().out == ""


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_randomized_inputs_are_valid_for_the_reference(name):
    ex = EXERCISES[name]
    if not ex.cases[0].kwargs:  # a function of no inputs (chapter 10's tells): nothing to draw
        assert ex.n_random == 0 and ex.random_kwargs(np.random.default_rng(0)) == {}
        return
    assert ex.random_kwargs is not None and ex.n_random >= 20
    rng = np.random.default_rng(0)
    for _ in range(200):
        kwargs = ex.random_kwargs(rng)
        assert set(kwargs) == set(ex.cases[0].kwargs)
        ex.reference(**kwargs)  # raises ValueError if the generator leaves the contract


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_exercise_can_be_checked_without_raising(name):
    ex = EXERCISES[name]
    assert run_cases(ex.reference, ex).passed
    report = run_cases(lambda **kw: None, ex)
    text, page = str(report), report._repr_html_()
    first = f"{name}: its one case fails." if len(ex.cases) == 1 else f"{name}: 0/{len(ex.cases)} cases pass."
    assert report.state == "fail" and text.startswith(first)
    number = ex.hint_for.get(report.first_failure.mistake, 1)  # the hint for the mistake, or the first
    assert "returned  None" in text and "problem" in text
    if number < len(ex.hints):
        assert f"Hint {number} of {len(ex.hints)}:" in text
    else:  # nearly the answer: held back until the check fails the same way again
        assert f"Hint {number} of {len(ex.hints)}:" not in text and "(nearly the answer) shows here" in text
        report.seen = 1
        assert f"Hint {number} of {len(ex.hints)}:" in str(report)
    assert "is a return statement missing?" in report.first_failure.message
    assert ">FAIL<" in page and f"<code>{name}</code>" in page and page.count("<tr>") == 1 + min(3, len(ex.cases))
    assert all(isinstance(c, Case) for c in ex.cases)


# ---- hostile and unusual functions: the same verdict here as in the grader


class Agreeable(float):
    """A float that claims to equal everything: fools a comparison that trusts the object."""

    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__


def test_a_float_subclass_cannot_be_graded_in_the_check_cell_either():
    report = run_cases(lambda **kw: Agreeable(0.0), KL)
    assert report.n_passed == 0
    assert report.results[0].message == (
        "returned a Agreeable, which cannot be graded (a subclass of float; the "
        "contract asks for a plain Python float: float(...))"
    )
    assert "returned  0.0" in str(report)  # shown by its value, read without its methods


def test_input_is_not_called_not_implemented():
    def asks(logp_policy, logp_reference, beta):
        return float(input("beta? "))

    call = call_safely(asks, KL.cases[0].kwargs)
    assert call.kind == "error" and call.message.startswith("called input() (in asks, line")
    assert "which waits for someone to type" in call.message
    assert run_cases(asks, KL).state == "fail"


def test_a_keyboard_interrupt_raised_by_the_function_is_not_a_time_out():
    def stops(**kw):
        raise KeyboardInterrupt

    call = call_safely(stops, {})
    assert call.kind == "error" and call.message.startswith("raised KeyboardInterrupt (in stops, line")
    assert "loop" not in call.message


def test_a_real_interrupt_is_still_a_time_out():
    import os
    import signal
    import threading

    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    call = call_safely(lambda: time.sleep(3), {})
    timer.join()
    assert call.kind == "timeout" and call.message.startswith("interrupted after 0.")


def test_not_implemented_by_a_library_is_an_error_not_a_blank_exercise():
    import asyncio

    call = call_safely(lambda: asyncio.AbstractEventLoop().run_forever(), {})
    assert call.kind == "error" and call.message.startswith("raised NotImplementedError")


def test_correct_so_far_but_out_of_time_is_slow_not_wrong():
    calls = []

    def right_then_slow(logp_policy, logp_reference, beta):
        calls.append(1)
        if len(calls) == 3:
            time.sleep(5)
        return kl_right(logp_policy, logp_reference, beta)

    report = run_cases(right_then_slow, dataclasses.replace(KL, time_limit=0.2))
    assert report.state == "slow" and report.hint() == (0, "")
    text = str(report)
    assert " ".join(text.split()) == (
        "kl_penalty: right so far, but too slow: the 2 cases that ran are right; "
        f"case 3 took longer than 0.2 s; {len(KL.cases) - 2} of {len(KL.cases)} not finished."
    )
    assert all(len(line) <= 77 for line in text.splitlines())
    assert ">SLOW<" in report._repr_html_()
    assert run_cases(lambda **kw: time.sleep(1), dataclasses.replace(KL, time_limit=0.2)).state == "fail"


# ---- a case that expects the call to raise


def _needs_two(x, n):
    if n < 2:
        raise ValueError(f"n must be at least 2, got {n}")
    return float(x * n)


RAISING = Exercise(
    name="needs_two",
    chapter=99,
    title="Raise on a bad n",
    expect=ExpectFloat(),
    cases=(
        Case({"x": 1.0, "n": 2}, 2.0, "n = 2 doubles"),
        Case({"x": 1.0, "n": 1}, Raises(ValueError, "n must"), "n = 1 is refused"),
    ),
    hints=("check n", "raise ValueError", "return x * n"),
    reference=_needs_two,
    hint_for={"no-raise": 2, "wrong-error": 2, "error-message": 2},
)


def test_raises_reads_what_was_raised_from_the_calls_message():
    message = call_safely(_needs_two, {"x": 1.0, "n": 0}).message
    assert raised(message) == ("ValueError", "n must be at least 2, got 0")
    assert raised("raised KeyError: 'a' (in f, line 3: return d['a'])") == ("KeyError", "'a'")
    assert raised("called exit(): return a value instead") is None
    assert Raises(ValueError).accepts("ValueError") and Raises(ValueError).accepts("UnicodeDecodeError")
    assert not Raises(ValueError).accepts("TypeError") and not Raises(ValueError).accepts("MyError")
    assert str(Raises(ValueError, "group_size")) == "raises ValueError naming group_size"
    with pytest.raises(TypeError):
        Raises("ValueError")


def test_a_case_that_expects_a_raise_passes_when_it_raises_and_says_why_when_not():
    assert run_cases(_needs_two, RAISING).passed

    def returns(x, n):
        return float(x * n)

    def wrong_type(x, n):
        if n < 2:
            raise TypeError("n must be at least 2")
        return float(x * n)

    def says_nothing(x, n):
        if n < 2:
            raise ValueError("bad input")
        return float(x * n)

    def not_written(x, n):
        raise NotImplementedError

    verdicts = {}
    for fn in (returns, wrong_type, says_nothing):
        report = run_cases(fn, RAISING)
        assert report.results[0].passed and not report.results[1].passed
        assert report.hint()[0] == 2
        verdicts[fn.__name__] = report.results[1]
    assert verdicts["returns"].mistake == "no-raise"
    assert verdicts["returns"].message == (
        "returned 1.0, but on this input the contract asks for a ValueError "
        "whose message names n must: check the input and raise it"
    )
    assert verdicts["wrong_type"].mistake == "wrong-error"
    assert verdicts["wrong_type"].message.startswith(
        "raised TypeError (n must be at least 2), but on this input the contract asks for a ValueError"
    )
    assert verdicts["says_nothing"].mistake == "error-message"
    assert "does not name n must" in verdicts["says_nothing"].message
    assert run_cases(not_written, RAISING).state == "todo"
    text = str(run_cases(returns, RAISING))
    assert "expected  raises ValueError naming n must" in text and "returned  1.0" in text
    assert "raises ValueError naming n must" in run_cases(_needs_two, RAISING)._repr_html_()


def test_the_words_of_the_code_line_do_not_count_as_the_message():
    def names_it_in_the_code_only(x, n):
        if n < 2:
            raise ValueError("n must"[:0] + "no")  # the code line holds the words, the message does not
        return float(x * n)

    assert run_cases(names_it_in_the_code_only, RAISING).results[1].mistake == "error-message"


def test_a_raise_case_gets_the_same_verdict_from_a_grader_record():
    """What the kernel sends back (a JSON record) is judged like the check cell's call."""
    from minirlhf.course.grader.kernel import _call_record
    from minirlhf.course.grader.records import _judge_record, _parse_record

    for fn, passed in ((_needs_two, True), (lambda x, n: float(x), False)):
        call = call_safely(fn, RAISING.cases[1].kwargs)
        line = json.dumps(_call_record(1, call))
        result = _judge_record(_parse_record(line, 1), RAISING.cases[1], RAISING)
        assert result.passed is passed
        assert result.passed == run_cases(fn, RAISING).results[1].passed
