"""The course machinery: what turns the engine into a book a learner can work through.

==================  ==========================================================================
``frontend``        where a notebook is running: the book build, or a person at JupyterLab
``exercises/``      every exercise of the book, by chapter: cases, hints, reference solution
``cases``           runs a learner's function on an exercise's cases; says what went wrong
``grader``          ``python -m minirlhf.course.grader NOTEBOOK``: grades a whole notebook
``nbgen``           ``python -m minirlhf.course.nbgen``: notebooks and solutions from chapters/
``explorer``        sliders over a figure: live in JupyterLab, precomputed in the book
``runs``            stored results of the chapters' longer runs, reused while the code is the same
``archive``         the course archive and the notebook downloads the book serves (a Sphinx extension)
==================  ==========================================================================

The engine (:mod:`minirlhf`) never imports from here.
"""
