"""The course machinery: what turns the engine into a book a learner can work through.

==================  ==========================================================================
``frontend``        where a notebook is running: the book build, or a person at JupyterLab
``exercises/``      every exercise of the book, by chapter: cases, hints, reference solution
``cases``           the exercise data model, and the judging: a function run on its cases
``expect``          the comparators: how a returned value is compared with the expected one
``sandbox``         calls a learner's function safely: time limit, no input(), prints captured
``plain``           the wire format from the learner's kernel to the grader (a security boundary)
``report``          the verdict on one exercise, as text and as HTML
``grader/``         ``python -m minirlhf.course.grader NOTEBOOK``: grades a whole notebook
``nbgen``           ``python -m minirlhf.course.nbgen``: notebooks and solutions from chapters/
``explorer``        sliders over a figure: live in JupyterLab, precomputed in the book
``runs``            stored results of the chapters' longer runs, reused while the code is the same
``archive``         the course archive and the notebook downloads the book serves (a Sphinx extension)
==================  ==========================================================================

The engine (:mod:`minirlhf`) never imports from here.

Importing the course sets torch to one thread in the process: a chapter's kernel then computes
as the worker processes and the command lines do. With more threads torch splits a float64 sum
differently (an SFT policy trained for 30 steps differs by about 1e-12), so a model the kernel
trains would not be, weight for weight, the one a worker trains, and a printed last digit
could depend on how JupyterLab was started.
"""

import torch as _torch

_torch.set_num_threads(1)
