"""Chapter 10's "name the tell": judged by meaning (a metric that separates the runs by the
whole-run paired test, and the number of the changed line's mechanism), never by words."""

import json
import re

import nbformat
import pytest
from tell_runs import SEP
from tell_runs import runs as made_up_runs

from minirlhf.course import grader, nbgen
from minirlhf.course.cases import MISTAKES, Case, Exercise, NotReady, run_cases
from minirlhf.course.exercises import ch10, get
from minirlhf.course.grader.grading import _reference_name
from minirlhf.course.grader.kernel import _block_reference, _ReferenceNotAvailable, _unblock_references
from minirlhf.course.report import describe
from minirlhf.course.tells import ExpectTell, Tell
from minirlhf.paths import ROOT
from minirlhf.studies import silent_bugs as sb

REAL_STORED_RUNS = ch10.stored_runs  # before the tests' fixture puts made-up runs in its place

SHOWN = ("accuracy", "kl", "objective/kl", "val/completion_length")
MECHANISMS = ((1, "The mask keeps every token."), (2, "The mask drops the end mark."), (3, "DPO's sign."))
TELL = Tell(
    run="run B",
    separating=("kl", "val/completion_length"),
    mechanism=2,
    mechanisms=MECHANISMS,
    shown=SHOWN,
    earlier=((1, "run A"),),
)


def exercise(expected=TELL):
    return Exercise(
        "tell",
        10,
        "name the tell",
        ExpectTell(),
        (Case({}, expected, "the tell"),),
        ("h1", "h2", "h3"),
        reference=lambda: ("val/completion_length", 2),
    )


def verdict(answer, expected=TELL):
    return run_cases(lambda: answer, exercise(expected)).results[0]


@pytest.mark.parametrize(
    "got, mistake",
    [
        (("val/completion_length", 2), ""),
        (("kl", 2), ""),  # any metric that separates
        ((" kl ", 2, "the end mark is masked out, i.e. taken for padding, e.g. in '7;;;' vs. '7;'."), ""),
        (["val/completion_length", 2, None], ""),
        (("val/completion_length", 2, "any words at all: the note is not graded"), ""),
        (("accuracy", 2), "wrong-metric"),  # on the dashboard, but it does not separate
        ((None, 2), "no-metric"),  # a panel does separate
        (("completion length", 2), "unknown-metric"),
        (("val/completion_length", 1), "mechanism"),
        (("val/completion_length", 3), "mechanism"),
        (("val/completion_length", 9), "unknown-mechanism"),
        (("val/completion_length", "2"), "type"),
        (("val/completion_length", "the mask drops the end mark"), "type"),
        (("val/completion_length", 2.0), "type"),
        (("val/completion_length", True), "type"),
        (("val/completion_length", 2, 3), "type"),
        (("val/completion_length",), "type"),
        ("val/completion_length", "type"),
        (None, "type"),
        ((42, 2), "type"),
    ],
)
def test_answers(got, mistake):
    result = verdict(got)
    assert result.passed == (mistake == ""), result.message
    assert result.mistake == mistake, result.message
    if mistake:
        assert mistake in MISTAKES and result.message


def test_none_is_the_answer_when_no_panel_separates():
    nothing = Tell(run="run C", separating=(), mechanism=2, mechanisms=MECHANISMS, shown=SHOWN)
    assert verdict((None, 2), nothing).passed
    wrong = verdict(("kl", 2), nothing)
    assert wrong.mistake == "wrong-metric" and "holds 0" in wrong.message and "or None" in wrong.message


def test_messages_say_what_they_test_and_give_nothing_away():
    wrong = verdict(("accuracy", 2)).message
    assert "paired difference" in wrong and "95% interval that holds 0" in wrong
    assert "val/completion_length" not in wrong and "kl," not in wrong  # which panel separates is not told
    assert wrong.endswith("The mechanism is judged once the metric is right")  # never alone
    missed = verdict((None, 2)).message
    assert "one does" in missed and "val/completion_length" not in missed
    sibling = verdict(("kl", 1)).message  # run A's bug, whose answer the learner has seen
    assert "the metric is right" in sibling and "run A's bug" in sibling and "mask keeps every token" in sibling
    other = verdict(("kl", 3)).message  # not a run seen yet: nothing said about whose bug it is
    assert "not what the changed line of run B does" in other and "'s bug" not in other
    both = verdict(("accuracy", 3))
    assert both.mistake == "wrong-metric" and "holds 0" in both.message and "mechanism 3" not in both.message
    assert verdict(("accuracy", 2)).message.split(". ")[-1] == verdict(("accuracy", 3)).message.split(". ")[-1]
    # what a failing case shows as expected: the question, not its answer
    shown = describe(TELL)
    assert "separates run B" in shown and "val/completion_length" not in shown and "2" not in shown


# --------------------------------------------------------------------------- the chapter's seven runs

LETTERS = list(ch10.RUNS)


def answer(metric, mechanism, note=None):
    return (lambda: (metric, mechanism)) if note is None else (lambda: (metric, mechanism, note))


@pytest.mark.parametrize("letter", LETTERS)
def test_each_run_accepts_every_separating_metric_and_only_those(letter):
    ex = get(ch10.tell_name(letter))
    tell = ex.cases[0].expected
    assert set(tell.separating) == set(SEP[ch10.bug_of(letter)])  # measured on the runs
    right = tell.mechanism
    assert run_cases(ex.reference, ex).passed
    for metric in tell.shown:
        result = run_cases(answer(metric, right), ex).results[0]
        assert result.passed == (metric in tell.separating), (metric, result.message)
        if not result.passed:
            assert result.mistake == "wrong-metric"
    none = run_cases(answer(None, right), ex).results[0]
    assert none.passed == (not tell.separating), none.message


@pytest.mark.parametrize("letter", LETTERS)
def test_every_other_mechanism_fails_each_run(letter):
    ex = get(ch10.tell_name(letter))
    metric = ex.reference()[0]
    mechanisms = [n for n, _ in ch10.MECHANISMS]
    assert len(mechanisms) == len(set(mechanisms)) == 10
    for number in mechanisms:
        result = run_cases(answer(metric, number), ex).results[0]
        assert result.passed == (number == ch10.MECHANISM_OF[ch10.bug_of(letter)]), (number, result.message)
        if not result.passed:
            assert result.mistake == "mechanism"
    # every sibling bug's mechanism in particular, with every metric
    for other in LETTERS:
        if other != letter:
            sibling = ch10.MECHANISM_OF[ch10.bug_of(other)]
            assert not any(run_cases(answer(m, sibling), ex).passed for m in (None, *ex.cases[0].expected.shown))


def test_each_run_has_its_own_mechanism_and_the_reference_names_it():
    assert sorted(ch10.MECHANISM_OF) == sorted(sb.BUGS)
    assert len(set(ch10.MECHANISM_OF.values())) == len(sb.BUGS)
    for letter in LETTERS:
        metric, mechanism = get(ch10.tell_name(letter)).reference()
        assert mechanism == ch10.MECHANISM_OF[ch10.bug_of(letter)]
        assert metric in SEP[ch10.bug_of(letter)] and metric != "accuracy"  # a panel a real run logs first


# The adversary's answers (review 2026-12, A1-A3): one sentence stuffed with every stem the
# old keyword check looked for, and reasons that say nothing or the opposite.
STUFFED = (
    "the mask on every token after the end mark, one less, pad ; shorter, gradient detach no_grad leash "
    "nothing not pull zero nowhere clip ratio reference stop temperature 0.7 sampl distribution "
    "rejected rais sign flip always 4"
)


def test_the_stuffed_sentence_and_nonsense_cannot_pass():
    assert len(STUFFED) == 222
    nonsense = (
        "kl goes up, the gradient is fine and correct",
        "I'm not sure; it just looks shorter",
        "I have nothing to say about the kl",
        STUFFED,
    )
    for letter in LETTERS:
        ex = get(ch10.tell_name(letter))
        tell = ex.cases[0].expected
        metrics = tell.separating or (None,)
        for reason in nonsense:
            # as the old format's reason, in place of a mechanism
            assert not any(run_cases(answer(m, reason), ex).passed for m in (*tell.shown, None))
            # as a note beside a wrong mechanism: the note is never read
            wrong = next(n for n, _ in ch10.MECHANISMS if n != tell.mechanism)
            assert not run_cases(answer(metrics[0], wrong, reason), ex).passed
            # and beside the right answer it takes nothing away: a paraphrase is never refused
            assert run_cases(answer(metrics[0], tell.mechanism, reason), ex).passed


def test_run_f_accepts_approxkl():
    ex = get("tell_run_f")
    assert run_cases(answer("policy/approxkl_avg", 9, "log-ratios at T = 1, i.e. not at 0.7"), ex).passed


def _printed(cell) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def _solution():
    return json.loads((ROOT / "solutions" / "10_silent_bugs.ipynb").read_text(encoding="utf-8"))


def test_the_solutions_tells_are_rows_of_the_chapters_measured_table():
    """The recorded chapter prints, per run, the panels that separate it (the checks' answer
    keys, measured on the same runs); the solution's answer for each run is one of them, not
    `accuracy`, and each run has a row other than `accuracy` whose margin is at least 0.25."""
    nb = _solution()
    table = next(_printed(c) for c in nb["cells"] if c["cell_type"] == "code" and "tell_table" in "".join(c["source"]))
    printed = {letter: {} for letter in LETTERS}
    for line in table.splitlines()[1:]:
        letter, metric, *_, margin = line.split()
        printed[letter][metric] = float("inf") if margin == "exact" else float(margin)
    codes = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for letter in LETTERS:
        source = next(c for c in codes if c.startswith(f"def tell_run_{letter.lower()}("))
        namespace = {}
        exec(source, namespace)
        metric = namespace[f"tell_run_{letter.lower()}"]()[0]
        assert metric in printed[letter] and metric != "accuracy", (letter, metric, printed[letter])
        assert max(m for name, m in printed[letter].items() if name != "accuracy") >= 0.25, letter


def test_the_key_follows_the_stored_runs(monkeypatch, tmp_path):
    """The answer keys are read from the runs the chapter stored, when the check runs: store
    other runs and the key follows; with none stored, the check and the grader say so in one
    line."""
    from minirlhf.course import runs as stored
    from minirlhf.course.exercises import check

    monkeypatch.setattr(ch10, "stored_runs", REAL_STORED_RUNS)
    monkeypatch.setattr(ch10, "RUNS_FILE", tmp_path / "silent_bugs.json")
    made = {"sep": SEP}
    monkeypatch.setattr(sb, "study", lambda seeds, progress=False, workers=None: made_up_runs(made["sep"], seeds))
    ex = get("tell_run_a")
    assert ch10.runs_ready() is not None and "not stored yet" in ch10.runs_ready()
    with pytest.raises(NotReady, match="run the chapter's first code cell"):
        tuple(ex.cases)
    assert check("tell_run_a", answer("val/completion_length", 6)) is None  # one line, no verdict
    stored.stored_bug_runs(ch10.RUNS_FILE, ch10.SEEDS)  # the chapter's first cell
    assert ch10.runs_ready() is None
    assert run_cases(answer("objective/entropy", 6), ex).passed
    assert not run_cases(answer("kl", 6), ex).passed
    # the runs change (stored again, as after a change of the engine): so does the key
    made["sep"] = {**SEP, "no-mask": ("kl",)}
    ch10.RUNS_FILE.unlink()
    stored.stored_bug_runs(ch10.RUNS_FILE, ch10.SEEDS)
    assert run_cases(answer("kl", 6), ex).passed
    assert not run_cases(answer("objective/entropy", 6), ex).passed
    assert ch10.tell_run_a() == ("kl", 6)


def test_check_before_the_runs_are_stored_prints_one_line(monkeypatch, tmp_path, capsys):
    from minirlhf.course.exercises import check

    monkeypatch.setattr(ch10, "stored_runs", REAL_STORED_RUNS)
    monkeypatch.setattr(ch10, "RUNS_FILE", tmp_path / "none.json")
    assert check("tell_run_c", answer("kl", 7)) is None
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0 and out.startswith("tell_run_c: not checked yet: chapter 10's runs are not stored")
    # the grader says so in one line, and runs nothing (learner 2026-12-06: 22 NameErrors under a PASS)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def tell_run_a():\n    return ('kl', 6)")])
    path = tmp_path / "10_silent_bugs.ipynb"
    nbformat.write(nb, str(path))
    result = grader.grade_notebook(path, seed=1)
    assert result.error.startswith("10_silent_bugs.ipynb: not graded yet: chapter 10's runs are not stored yet")
    assert not result.exercises and grader.exit_status([result]) != 0


def test_the_separating_metrics_follow_from_the_runs():
    # The same sets from the study's own test, on runs laid out as the study stores them.
    def log(values):
        return {k: list(values) for k in sb.DASHBOARD["ppo"]}

    runs = {"correct": {"verifier": {"0": log([1.0, 1.0, 1.0]), "1": log([1.0, 1.1, 1.2]), "2": log([1.0, 0.9, 1.0])}}}
    runs["no-mask"] = {
        s: {**v, "val/completion_length": [4.0, 4.0, 4.0]} for s, v in runs["correct"]["verifier"].items()
    }
    assert sb.separating(runs, "no-mask") == ("val/completion_length",)
    runs["no-mask"] = runs["correct"]["verifier"]
    assert sb.separating(runs, "no-mask") == ()


def test_the_chapter_says_each_mechanism_only_after_its_check():
    """Runs are named by letter only until their answer, and each answer is folded."""
    cells = nbgen.parse((ROOT / "chapters" / "10_silent_bugs.py").read_text(encoding="utf-8"), "ch10")
    text = "\n".join(c["source"] for c in cells)
    for name in sb.BUGS:
        assert f'"{name}"' not in text.split("## The tells, measured")[0], name  # no bug named by key
    assert "LETTERS" not in text
    for letter in LETTERS:
        mechanism = ch10.MECHANISM_OF[ch10.bug_of(letter)]
        check_at = text.index(f'check("tell_run_{letter.lower()}"')
        answer_at = text.index(f"<summary>What was wrong in run {letter}</summary>")
        assert check_at < answer_at < text.index(f'changed_line("{letter}")')
        assert f"(mechanism {mechanism})" in text[answer_at : answer_at + 400]


def test_the_tell_references_are_functions_the_grader_can_block():
    for letter in LETTERS:
        ex = get(ch10.tell_name(letter))
        where = _reference_name(ex)
        assert where == ["minirlhf.course.exercises.ch10", ex.name]
        assert ex.reference.__closure__ is None
        _block_reference(where)
        try:
            with pytest.raises(_ReferenceNotAvailable):
                getattr(ch10, ex.name)()
        finally:
            _unblock_references()
        assert ex.reference() == getattr(ch10, ex.name)()


# --------------------------------------------------------------------------- the adversary's notebook

NONSENSE = {  # review 2026-12, A1-A3: nonsense reasons; in the new form, beside a sibling's mechanism
    "a": (("val/completion_length", 2, "kl goes up, the gradient is fine and correct"), "mechanism"),
    "b": (("val/completion_length", "I'm not sure; it just looks shorter"), "type"),  # the old form
    "c": (("val/completion_length", 7, STUFFED), "wrong-metric"),
    "d": (("kl", 1, "I have nothing to say about the kl"), "wrong-metric"),
    "e": (("accuracy", 4, "the reference is fine, the ratio is fine"), "wrong-metric"),
    "f": (("policy/approxkl_avg", 4, "it is the temperature of the room"), "mechanism"),
    "g": (("logps/rejected", 5, STUFFED), "mechanism"),
}
UNFIXED = """def fix_run_c(new_logp, ref_logp, mask, kl_clamp=10.0):
    d = (ref_logp - new_logp.detach()).clamp(-kl_clamp, kl_clamp)       # the bug, kept
    k3 = ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    return torch.tensor(k3.item(), requires_grad=True)
"""


def test_the_adversarys_notebook_fails(tmp_path):
    """The solution notebook with its seven tells swapped for nonsense (the review's reasons,
    the stuffed sentence among them, as notes beside a wrong answer) and run C's fix for the
    unfixed bug (review A3/A5) grades FAIL, every tell failing for what it got wrong. The runs, dashboards and band
    reports are left out: no grade depends on them."""
    nb = nbformat.from_dict(_solution())
    kept = [
        nbformat.v4.new_code_cell(
            "import torch\nimport torch.nn.functional as F\n\n"
            "from minirlhf import task\n"
            "from minirlhf.course.exercises import check\n"
            "from minirlhf.leashes import loss as loss_leash\n"
            "from minirlhf.leashes import reward as reward_leash"
        )
    ]
    for cell in nb.cells:
        source = cell.source
        found = re.match(r"def (tell_run_(\w)|fix_run_\w)\(", source)
        if cell.cell_type == "markdown":
            kept.append(cell)
        elif found and found[2]:
            kept.append(nbformat.v4.new_code_cell(f"def {found[1]}():\n    return {NONSENSE[found[2]][0]!r}\n"))
        elif found and found[1] == "fix_run_c":
            kept.append(nbformat.v4.new_code_cell(UNFIXED))
        elif found or source.startswith("check("):
            kept.append(nbformat.v4.new_code_cell(source))
    nb.cells = kept
    path = tmp_path / "10_silent_bugs.ipynb"
    nbformat.write(nb, str(path))
    result = grader.grade_notebook(path, seed=1)
    assert not result.error, result.error
    by_name = {e.exercise.name: e for e in result.exercises}
    assert set(by_name) == {ex.name for ex in ch10.IN_THIS_CHAPTER}
    assert not result.passed and grader.exit_status([result]) == 1
    for letter in LETTERS:
        tell = by_name[ch10.tell_name(letter)]
        assert not tell.passed and tell.results[0].mistake == NONSENSE[letter.lower()][1], grader.render(result)
    for name in ("fix_run_a", "fix_run_e", "fix_run_f", "fix_run_g"):  # the solution's fixes, kept
        assert by_name[name].passed, grader.render(result)
    # The unfixed fix_run_c gets the same verdict from the grader as from its check cell: the
    # gradient check of the loss exercises (issue 28, item 1) is what fails it.
    namespace = {}
    exec("import torch\n" + UNFIXED, namespace)
    assert by_name["fix_run_c"].passed == run_cases(namespace["fix_run_c"], get("fix_run_c")).passed


def test_a_one_tuple_is_shown_with_its_comma():
    # a learner's ("val/completion_length",) must read as the 1-tuple it is
    assert describe(("val/completion_length",)) == "('val/completion_length',)"
    assert describe(("kl", 2)) == "('kl', 2)"
