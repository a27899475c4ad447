"""The package's command lines, apart from the library: each module here parses its options
(with :mod:`minirlhf.cli`), calls the library and reports, and is run as
``python -m minirlhf.commands.NAME``: ``experiment`` (chapter 5's experiment), ``trl_run`` (TRL's
trainers beside ours), ``bench`` (``make bench``), ``numerics`` (the same digits under two kernel
sets). Nothing in the library imports
them, and no stored run is keyed on their code (``minirlhf.course.runs``)."""
