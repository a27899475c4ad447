"""Grade a learner's notebook against the solutions: ``python -m minirlhf.course.grader NOTEBOOK ...``.

For each notebook:

1. **Run it.** The notebook is read into memory and run top to bottom in a fresh kernel
   (nbclient), as "Restart and run all" would. The kernel works in an empty temporary folder,
   so a relative path in the notebook cannot reach the notebook file; the file is only read,
   and compared after grading with what was read (a notebook whose code deleted or changed it
   is reported, and the version graded is kept in ``kept/``, never beside the notebook; a kept
   copy is never graded, and a file is read only up to MAX_NOTEBOOK_BYTES). A cell that fails
   is recorded and the run goes on; a cell that runs too long is interrupted. The notebook's
   own check cells do nothing during the run (``GRADING_ENV``): the grader runs those cases
   itself. The cells after the last one an exercise needs (its check or its definition) are
   the chapter's analyses, its long runs and figures: no grade depends on them, so they are
   not run, and the report says which were left out, naming the first of them the way a
   learner finds it in JupyterLab: its place among all cells, text cells included, and its
   first line.
2. **Pick the exercises.** Those of the notebook's chapter (its ``NN_`` prefix) from the
   registry :mod:`minirlhf.course.exercises`; a renamed notebook is recognised by its check cells.
3. **Call the learner's functions.** Each exercise gets its cases plus ``n_random``
   randomized inputs from ``random_kwargs`` (a fresh seed each run, printed so a run can be
   repeated with ``--seed``). The inputs go to the kernel in a pickle file written here (they
   may hold torch tensors), and a one-line cell calls the learner's function by name on each,
   through :func:`minirlhf.course.sandbox.call_safely` (time limit, captured prints, mutated
   inputs). While it runs, the package's own reference for that exercise raises when called,
   under any name (imported, wrapped, or in a ``functools.partial``).
4. **Bring the answers back as plain data.** What each call returned is turned into JSON in
   the kernel (:func:`minirlhf.course.plain.to_plain`: numbers, strings, lists, dicts, tagged
   arrays and tensors, at most ``RETURN_CAP`` numbers) and checked on arrival
   (:func:`~minirlhf.course.plain.from_plain`). Nothing from the kernel is unpickled here, so
   no code of the notebook runs in the grader; anything else "cannot be graded".
5. **Judge here.** The expected values never enter the kernel: the reference solution runs
   in this process and :func:`minirlhf.course.cases.judge` compares, with the exercise's
   comparator. Passing therefore means agreeing with the reference on inputs the notebook
   never saw.

Why the calls run in the learner's kernel and not here: their function may use anything
the notebook defined (globals, imports, helpers), and only that kernel has it.

The grader never hangs: calls run in slices of about a second, each slice a cell with a
timeout. Inside the kernel every call has the exercise's time limit (an alarm signal); a
call that ignores it is interrupted from here, and a kernel that ignores the interrupt too
is restarted and the notebook run again for the exercises still to grade. The calls of one
exercise share a budget (``--budget``, 60 s): a function that is right on every input it
finished but runs out of time is reported SLOW, never wrong.

The grader survives its notebook: the kernel runs in its own session, so a signal to the
kernel's process group does not reach the grader; a SIGTERM that does reach it stops the
grading with a message, after the kernel is shut down and the temporary files removed.

Exit status: 0 when every exercise of every notebook passes, 1 when one fails (or is too
slow), 2 when a notebook could not be graded (missing file, not a notebook, no exercises,
no kernel) or an option is wrong, 130 on Ctrl-C, 143 on SIGTERM.

The modules, one job each:

=================  ===========================================================================
``kernel``         what runs inside the learner's kernel: call the function, block the reference
``records``        what comes back from the kernel: each record read, checked, then judged
``runner``         the kernel and its lifetime (nbclient): run cells, interrupt, restart
``grading``        one notebook graded: its exercises, their inputs, the verdicts gathered
``notebook_file``  the notebook file's safety: read it capped, never write it, keep what changed
``render``         the text report and its closing line
``cli``            the command line (``__main__`` runs it)
=================  ===========================================================================

This package re-exports the grader's public names, so ``from minirlhf.course import grader``
reaches them; everything else (the underscored names) lives in the module above that owns it,
and a test imports it from there. A test that patches a name must patch it in the module that
uses it.
"""

from .cli import exit_status, main
from .grading import BUDGET, CELL_TIMEOUT, ExerciseGrade, NotebookGrade, grade_notebook
from .notebook_file import is_kept_copy
from .render import render, summary_line, use_color
from .runner import CellProblem

__all__ = [
    "grade_notebook",
    "NotebookGrade",
    "ExerciseGrade",
    "CellProblem",
    "render",
    "main",
    "BUDGET",
    "CELL_TIMEOUT",
    "exit_status",
    "is_kept_copy",
    "summary_line",
    "use_color",
]
