"""The numbers the prose gives are the numbers the chapter printed.

When the book is re-measured, the outputs of ``solutions/NN_name.ipynb`` change, and a number
typed into the text beside them does not. This test reads every markdown cell of each executed
solution notebook (the text the reader sees, the exercise hints included), takes out every
decimal number, and fails for one that none of that chapter's own outputs shows. Run it alone
with ``python -m pytest -q tests/test_prose_numbers.py``; it reads the notebooks and executes
nothing.

**What counts as a number.** A number with a decimal point (``0.583``, ``+0.163``, ``-2.154``,
``1.9``, the ``12.5`` of ``12.5%``) or in scientific notation (``3e-3``, ``2.5e-4``). Integers
are not checked. Not numbers either: a dotted label after the word exercise, chapter, section,
figure, table, question or equation (``exercise 5.1``, ``exercises 10.1, 10.3``), a version
with two dots or more (``1.12.0``), and digits glued to a word or an identifier (``v1.2``).

**What is not read.** Formulas in math (``$...$``, ``$$...$$``), inline code spans and code
fences (a fence whose info string is a MyST directive other than a code or math one, such as
``{admonition}``, holds prose and is read), link targets and bare URLs, HTML tags, and the
``:option:`` lines of directives. Math and code in these chapters are formulas, calls, settings
passed to a function, and the values an exercise's contract works out by hand, none of which a
re-measurement can change. One exception: a math span that holds a number and nothing else
(``$-0.89$``, written so for its true minus sign) is prose and is read. So a measured result
goes in the text or in such a span; inside a formula or a code span this test cannot see it.

**The outputs.** Every output of every code cell of the same chapter: stream text, and the
``text/plain``, ``text/markdown`` and ``text/html`` (tags taken out) forms of displayed and
returned values. A figure's ``text/plain`` form is its alt text, so the numbers a figure's
description prints count too. Another chapter's outputs do not count.

**The matching rule.** A number of the prose matches when the same digits, as written, occur in
the outputs as a whole number (not as a piece of a longer one: ``0.16`` matches neither
``0.163`` nor ``10.16``). A percent sign need not be printed. Two allowances, and no others:

* the sign: a number written without a sign matches either sign in the outputs, and ``+0.163``
  matches a printed ``0.163``; only two explicit, opposite signs fail (``+1.7`` in the prose,
  ``-1.7`` printed);
* trailing zeros in the outputs: ``0.5`` in the prose matches a printed ``0.50`` or ``0.500``
  (the same value, printed with more digits). Not the other way round: ``0.50`` in the prose
  claims a digit that a printed ``0.5`` does not show.

Nothing is rounded: ``about 0.63`` does not match a printed ``0.628``. Write the printed digits,
or leave the number out. The rule asks only that the number be printed somewhere in the
chapter, so a stale ``0.5`` can hide behind a ``0.5`` printed for another reason; the more
digits a number has, the better it is guarded.

**Quoted numbers.** A number the chapter does not measure (an original run's or a paper's
result, a setting stated as an input that no cell prints, a value worked out by hand) is
declared once, with its source, in :mod:`minirlhf.course.quoted`; the declaration covers that
number everywhere in its chapter's prose. A declaration that its chapter's prose no longer
uses, or that is made twice, fails the test too. A setting that a cell prints (a printed
config, the source of a dataclass) needs no declaration.

**The toy-to-real page** (``book/toy-to-real.md``) is left out: it is a MyST markdown notebook
executed when the book is built, and its outputs are kept nowhere in the repository, only in
the build's execution cache, so checking it would mean executing it.

The solutions match their chapter sources (``tests/test_nbgen.py`` checks that), so a failure
names the line of ``chapters/NN_name.py`` to edit as well as the notebook's cell.
"""

from __future__ import annotations

import copy
import functools
import html
import re
from typing import NamedTuple

import nbformat
import pytest

from minirlhf.course import nbgen
from minirlhf.course.quoted import QUOTED

CHAPTERS = [p.stem for p in nbgen.sources()]

# A decimal number: digits, a point, digits, with an optional exponent; or an integer with an
# exponent. Not preceded by a letter, digit, underscore or point (so not inside an identifier,
# a version or a longer number), and not followed by another digit or by ".digit".
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[+\-\u2212]?)"
    r"(?P<value>\d+\.\d+(?:[eE][+\-\u2212]?\d+(?!\w))?(?!\.?\d)"
    r"|\d+[eE][+\-\u2212]?\d+(?!\w))"
)
# "exercise 5.1", "exercises 10.1, 10.3, ...", "sections 2.1 and 2.2", "exercises 3.1-3.4"
_DOTTED = r"\d+(?:\.\d+)+"
_LABEL = re.compile(
    r"(?i)(?<!\w)(?:exercises?|chapters?|sections?|figures?|tables?|questions?|equations?|§)"
    rf"\s+{_DOTTED}(?:(?:\s*,\s*|\s+and\s+|\s+or\s+|\s*[-\u2013]\s*){_DOTTED})*"
)
_FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode", "math", "raw"}
_OPTION_LINE = re.compile(r"^\s*:[\w-]+:")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\n[ \t]*\n)[\s\S])+?\1(?!`)")
_DISPLAY_MATH = re.compile(r"(?<!\\)\$\$[\s\S]+?\$\$")
_INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)(?:\\.|[^$\\\n]|\n(?![ \t]*\n))+?(?<!\\)\$")
_LINK_TARGET = re.compile(
    r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)|<https?://[^>\s]*>"
    r"|https?://[^\s)>\]]+"
)
_HTML_COMMENT = re.compile(r"<!--[\s\S]*?-->")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")


# Reading the prose.


class ProseNumber(NamedTuple):
    sign: str  # "+", "-" or "", as written
    value: str  # the digits as written, without the sign or a percent sign
    sentence: str  # the sentence around it, on one line
    offset: int  # where it starts in the cell's markdown


def prose_numbers(markdown: str) -> list[ProseNumber]:
    """Return each decimal number of the prose of ``markdown``, in order."""
    shown = _without_blocks(markdown)  # for the sentence: as written, math and code included
    return [
        ProseNumber(_sign(m["sign"]), _value(m["value"]), _sentence(shown, m.start(), m.end()), m.start())
        for m in _NUMBER.finditer(prose_text(markdown))
    ]


def prose_text(markdown: str) -> str:
    """Return ``markdown`` with everything that is not prose blanked out, offsets unchanged."""
    text = _without_blocks(markdown)
    for pattern, blank in (
        (_HTML_COMMENT, _blank),
        (_CODE_SPAN, _blank),
        (_DISPLAY_MATH, _blank_formula),
        (_INLINE_MATH, _blank_formula),
        (_LINK_TARGET, _blank),
        (_HTML_TAG, _blank),
        (_LABEL, _blank),
    ):
        text = pattern.sub(blank, text)
    return text


def _blank(match: re.Match) -> str:
    """The matched text with every character but the line breaks made a space (offsets kept)."""
    return re.sub(r"[^\n]", " ", match.group())


def _blank_formula(match: re.Match) -> str:
    """Blank a formula; of a math span that is a number and nothing else, only the dollars."""
    if _NUMBER.fullmatch(match.group().strip("$").strip()):
        return match.group().replace("$", " ")
    return _blank(match)


def _without_blocks(markdown: str) -> str:
    """Blank the code fences; of a directive, blank only its fence and option lines."""
    out, fences = [], []  # fences: a stack of (fence, holds code)
    for line in markdown.split("\n"):
        match = _FENCE.match(line)
        if match:
            fence, info = match["fence"], match["info"].strip()
            if fences and not info and fence[0] == fences[-1][0][0] and len(fence) >= len(fences[-1][0]):
                fences.pop()
                out.append(" " * len(line))
                continue
            if not (fences and fences[-1][1]):  # nothing opens inside a code fence
                directive = re.match(r"\{([\w-]+)\}", info)
                fences.append((fence, not directive or directive[1] in _CODE_DIRECTIVES))
                out.append(" " * len(line))
                continue
        in_code = any(holds_code for _, holds_code in fences)
        out.append(" " * len(line) if in_code or _OPTION_LINE.match(line) else line)
    return "\n".join(out)


def _sentence(markdown: str, start: int, end: int) -> str:
    """The sentence around ``markdown[start:end]``, on one line, at most 200 characters on
    either side of the number."""
    stops = re.finditer(r"[.!?:][\s*_)]*\s|\n[ \t]*\n|^\s*[-*#|]", markdown[:start], re.M)
    begin = max((m.end() for m in stops), default=0)
    after = re.search(r"[.!?](?=\s|$)|\n[ \t]*\n", markdown[end:])
    finish = end + after.end() if after else len(markdown)
    return " ".join(markdown[max(begin, start - 200) : min(finish, end + 200)].split())


def _sign(text: str) -> str:
    return {"+": "+", "-": "-", "\u2212": "-"}.get(text, "")


def _value(text: str) -> str:
    return text.replace("\u2212", "-")


# Reading the outputs, and matching.


def output_text(nb) -> str:
    """Everything the code cells of ``nb`` printed or displayed, as text."""
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(_joined(out.get("text", "")))
            data = out.get("data", {})
            for mime in ("text/plain", "text/markdown"):
                if mime in data:
                    parts.append(_joined(data[mime]))
            if "text/html" in data:
                parts.append(html.unescape(_HTML_TAG.sub(" ", _joined(data["text/html"]))))
    return "\n".join(parts)


def _joined(text) -> str:
    return "".join(text) if isinstance(text, list) else str(text)


def output_numbers(text: str) -> dict[str, set[str]]:
    """Map each decimal number printed in ``text`` to the signs it was printed with."""
    printed: dict[str, set[str]] = {}
    for match in _NUMBER.finditer(text):
        printed.setdefault(_value(match["value"]), set()).add(_sign(match["sign"]))
    return printed


def is_printed(sign: str, value: str, printed: dict[str, set[str]]) -> bool:
    """True if the prose's ``sign`` and ``value`` match a number of ``printed`` by the rule."""
    same = [value]
    if "e" not in value.lower():
        same += [value + "0" * k for k in range(1, 8)]  # more trailing zeros in the output
    for candidate in same:
        signs = printed.get(candidate, set())
        if signs and (not sign or "" in signs or sign in signs):
            return True
    return False


class Stale(NamedTuple):
    cell: int  # the markdown cell's index in the notebook
    number: str  # as written, with its sign
    sentence: str
    offset: int  # where the number starts in the cell's markdown


def stale_numbers(nb, quoted=frozenset()) -> list[Stale]:
    """Return each prose number of ``nb`` that no output shows and ``quoted`` does not hold."""
    printed = output_numbers(output_text(nb))
    return [
        Stale(index, found.sign + found.value, found.sentence, found.offset)
        for index, source in _markdown_cells(nb)
        for found in prose_numbers(source)
        if found.value not in quoted and not is_printed(found.sign, found.value, printed)
    ]


def _markdown_cells(nb) -> list[tuple[int, str]]:
    return [(i, _joined(cell["source"])) for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "markdown"]


# The book's chapters.


@functools.lru_cache(maxsize=None)
def _solution(chapter: str):
    """The chapter's executed notebook, read once (a caller copies it before changing it)."""
    return nbformat.read(nbgen.SOLUTION_DIR / f"{chapter}.ipynb", as_version=4)


def _declared(chapter: str) -> frozenset[str]:
    return frozenset(number for name, number, _ in QUOTED if name == chapter)


def _source_lines(chapter: str) -> dict[str, int]:
    """Map the text of each markdown cell of the chapter's source to the line of its first line."""
    path = nbgen.SOURCES / f"{chapter}.py"
    raw = path.read_text(encoding="utf-8").splitlines()
    where = {}
    for cell in nbgen.parse("\n".join(raw), path.name):
        if cell["kind"] == "markdown":
            first = cell["line"]  # the 0-based index of the line after the cell's header
            while first < len(raw) and not raw[first].strip():
                first += 1  # the blank lines parse() drops
            where.setdefault(cell["source"], first + 1)
    return where


def _where(chapter: str, markdown: str, offset: int, lines: dict[str, int]) -> str:
    """``chapters/NN_name.py:LINE`` of a number, or where the cell comes from if not there."""
    if markdown not in lines:
        return "hints from the exercise registry"
    return f"chapters/{chapter}.py:{lines[markdown] + markdown.count(chr(10), 0, offset)}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_numbers_are_printed_by_the_chapter(chapter):
    nb = _solution(chapter)
    stale = stale_numbers(nb, _declared(chapter))
    if stale:
        lines, cells = _source_lines(chapter), dict(_markdown_cells(nb))
        report = [
            f"  markdown cell {s.cell} ({_where(chapter, cells[s.cell], s.offset, lines)})"
            f': {s.number} in "{s.sentence}"'
            for s in stale
        ]
        pytest.fail(
            f"{chapter}: {len(stale)} number(s) in the prose appear in none of the chapter's "
            "outputs. If the book was re-measured, write the newly printed value; if the "
            "number is quoted, not measured, declare it with its source in "
            "minirlhf/course/quoted.py.\n" + "\n".join(report),
            pytrace=False,
        )


def declaration_problems(quoted, prose_values: dict[str, set[str]]) -> list[str]:
    """What is wrong with the declarations ``quoted`` ((chapter, number, source) entries),
    given the numbers each chapter's prose gives (``prose_values``: chapter -> values)."""
    problems, seen = [], set()
    for chapter, number, source in quoted:
        if chapter not in prose_values:
            problems.append(f"{chapter!r} is not a chapter")
            continue
        if not _NUMBER.fullmatch(number) or number[0] in "+-\u2212":
            problems.append(
                f"{chapter} declares {number!r}: not a decimal number as the prose writes it, without its sign"
            )
            continue
        if not source.strip():
            problems.append(f"{chapter} declares {number} without a source")
        if (chapter, number) in seen:
            problems.append(f"{chapter} declares {number} twice")
        elif number not in prose_values[chapter]:
            problems.append(f"{chapter} declares {number}, which its prose no longer gives: delete the declaration")
        seen.add((chapter, number))
    return problems


def test_the_declarations_are_each_made_once_with_a_source_and_used():
    prose_values = {
        chapter: {found.value for _, source in _markdown_cells(_solution(chapter)) for found in prose_numbers(source)}
        for chapter in CHAPTERS
    }
    problems = declaration_problems(QUOTED, prose_values)
    assert not problems, "minirlhf/course/quoted.py:\n  " + "\n  ".join(problems)


def _remeasured(nb, value: str):
    """A copy of ``nb`` in which every printed ``value`` (or ``value`` with trailing zeros)
    reads one digit longer, as if a re-measurement had moved it."""
    nb = copy.deepcopy(nb)

    def move(match):
        printed = match["value"]
        same = printed == value or (printed.startswith(value) and not printed[len(value) :].strip("0"))
        return match.group() + "1" if same and "e" not in printed.lower() else match.group()

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                out["text"] = _NUMBER.sub(move, _joined(out["text"]))
            for mime in ("text/plain", "text/markdown", "text/html"):
                if mime in out.get("data", {}):
                    out["data"][mime] = _NUMBER.sub(move, _joined(out["data"][mime]))
    return nb


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_moved_output_makes_its_prose_number_stale(chapter):
    """Re-measure a chapter on paper: move the printed value of one number its prose gives
    (the one with the most digits), and the prose must fail on that number."""
    nb = _solution(chapter)
    printed, quoted = output_numbers(output_text(nb)), _declared(chapter)
    checked = [
        found
        for _, source in _markdown_cells(nb)
        for found in prose_numbers(source)
        if found.value not in quoted and is_printed(found.sign, found.value, printed)
    ]
    if not checked:
        pytest.skip(f"{chapter}'s prose gives no printed decimal number")
    value = max(checked, key=lambda found: len(found.value)).value
    before = {s.number.lstrip("+-") for s in stale_numbers(nb, quoted)}
    after = {s.number.lstrip("+-") for s in stale_numbers(_remeasured(nb, value), quoted)}
    assert after == before | {value}


# The checker itself, on small notebooks made here.


def _notebook(markdown: list[str], printed: list[str]):
    """A notebook of markdown cells, then one code cell per printed text (displayed as HTML if
    it starts with '<', else printed to stdout)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text) for text in markdown]
    for text in printed:
        cell = nbformat.v4.new_code_cell("...")
        if text.startswith("<"):
            cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": text, "text/plain": "<HTML>"})]
        else:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        nb.cells.append(cell)
    return nb


def test_a_planted_stale_number_is_caught():
    nb = _notebook(
        ["The verifier arm ends at 0.515.", "Accuracy rose from 0.352 to 0.583."], ["accuracy 0.352 -> 0.515\n"]
    )
    assert [(s.cell, s.number, s.sentence) for s in stale_numbers(nb)] == [
        (1, "0.583", "Accuracy rose from 0.352 to 0.583.")
    ]
    assert stale_numbers(nb, quoted=frozenset({"0.583"})) == []


def test_numbers_as_printed_pass():
    nb = _notebook(
        ["A gain of +0.163, a loss of -2.154, 12.5% of the runs, a ratio of 1.9."],
        ["gain 0.163  loss -2.154  share 12.5 %  ratio 1.90\n"],
    )
    assert stale_numbers(nb) == []


@pytest.mark.parametrize(
    "prose, printed",
    [
        ("it reached 0.16", "0.163"),  # a piece of a longer number
        ("it reached 0.16", "10.16"),
        ("it reached 0.16", "0.16.2"),
        ("it reached 0.58", "0.583"),  # rounded: no "close enough"
        ("it reached 0.50", "0.5"),  # more digits in the prose than printed
        ("it rose by +0.163", "-0.163"),  # opposite explicit signs
        ("a rate of 3e-3", "0.003"),  # the same value, written otherwise
        ("a margin of 0.1", '<p style="padding:0.1em">margin</p>'),  # inside an HTML tag
    ],
)
def test_near_misses_do_not_match(prose, printed):
    assert len(stale_numbers(_notebook([prose], [printed]))) == 1


@pytest.mark.parametrize(
    "prose, printed",
    [
        ("it rose by +0.163", "0.163"),
        ("it fell by 0.163", "-0.163"),
        ("it fell to \u22120.163", "-0.163"),
        ("a ratio of 1.2", "1.200"),
        ("a rate of 3e-3", "lr: float = 3e-3"),
        ("it ends at 0.515.", "0.515\n"),
        ("ranked right 0.991", "<td>0.991 &plusmn; 0.003</td>"),
    ],
)
def test_matches(prose, printed):
    assert stale_numbers(_notebook([prose], [printed])) == []


@pytest.mark.parametrize(
    "prose",
    [
        "Exercise 5.1 and exercises 10.1, 10.3, ... and sections 2.1 and 2.2.",
        "The formula $\\beta = 0.5$ and $$x = 0.25 + 1.5$$ and a call `f(0.7)`.",
        "```python\nx = 0.5\n```",
        "See [the paper](https://arxiv.org/abs/2203.02155), release 1.12.0, version v1.2.",
        '<details class="answer" data-x="0.3">\n<summary>Answer</summary>\n</details>',
        "```{admonition} Note\n:class: tip\n:width: 0.5\n```",
        "Chapter 5 has 64 prompts and 400 evaluation answers.",
    ],
)
def test_what_is_not_a_prose_number(prose):
    assert prose_numbers(prose) == []


def test_a_number_alone_in_math_is_read():
    found = prose_numbers("the cosine is $-0.89$, and $\\beta = 0.5$ is not read")
    assert [(f.sign, f.value) for f in found] == [("-", "0.89")]


def test_prose_inside_a_directive_is_read():
    found = prose_numbers("```{admonition} Where the KL goes\nThe KL ends at 0.094.\n```")
    assert [(f.value, f.sentence) for f in found] == [("0.094", "The KL ends at 0.094.")]


def test_math_over_two_lines_is_not_read():
    found = prose_numbers("the ratio $e^{0.2} \\approx\n1.221$ is clipped to 1.2")
    assert [(f.value, f.sentence) for f in found] == [("1.2", "the ratio $e^{0.2} \\approx 1.221$ is clipped to 1.2")]


def test_bad_declarations_are_caught():
    prose_values = {"05_two_arm_experiment": {"0.583", "0.08"}}
    bad = [
        ("05_two_arm_experiment", "0.583", "the original run's verifier arm, end accuracy"),
        ("05_two_arm_experiment", "0.583", "declared again"),
        ("05_two_arm_experiment", "0.6", "not in the prose"),
        ("05_two_arm_experiment", "0.08", " "),
        ("05_two_arm_experiment", "+0.08", "with its sign"),
        ("99_no_such_chapter", "0.1", "no such chapter"),
    ]
    assert declaration_problems(bad, prose_values) == [
        "05_two_arm_experiment declares 0.583 twice",
        "05_two_arm_experiment declares 0.6, which its prose no longer gives: delete the declaration",
        "05_two_arm_experiment declares 0.08 without a source",
        "05_two_arm_experiment declares '+0.08': not a decimal number as the prose writes it, without its sign",
        "'99_no_such_chapter' is not a chapter",
    ]
    assert declaration_problems(bad[:1], prose_values) == []
