"""Numbers the chapters' prose quotes rather than measures, each with where it comes from.

``tests/test_prose_numbers.py`` holds every decimal number in a chapter's prose to the
chapter's printed outputs: a number the text gives must be one the recorded solution printed,
so that re-measuring the book cannot leave a stale number behind. Some numbers are not
measured by the chapter at all: a result of the original project or of a paper, a setting the
prose states as an input (a learning rate, a $\\beta$, a temperature, a clip range) that no
cell prints, or a value worked out by hand in an exercise's contract. Those are declared here,
once per chapter, with their source, and the test then accepts them in that chapter's prose.

A measured result never belongs here: if the prose gives a number the outputs no longer show,
the prose is stale and is what needs the change.

Each entry is ``(chapter, number, source)``:

* ``chapter``: the chapter's file name without extension, e.g. ``"05_two_arm_experiment"``;
* ``number``: the number as the prose writes it, without a sign or a percent sign
  (``"0.08"``, ``"3e-3"``, ``"12.5"``);
* ``source``: where the number comes from, in a few words a reader could check.

The test fails when an entry's number no longer occurs in its chapter's prose (delete the
entry) and when a chapter declares the same number twice.
"""

from __future__ import annotations

QUOTED: list[tuple[str, str, str]] = [
    (
        "08_grpo",
        "1.155",
        "exercise 8.1's contract example, worked by hand: the sample standard deviation of the "
        "rewards (2, 4, 4, 2), sqrt(4/3)",
    ),
    ("08_grpo", "0.184", "exercise 8.2's contract example, worked by hand: beta 0.5 times k3 = e^-1, about 0.368"),
]
