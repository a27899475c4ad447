"""The package's command lines, apart from the library: each module here parses its options
(with :mod:`minirlhf.cli`), calls the library and reports; ``python -m minirlhf.experiment``
and ``minirlhf.trl_run`` hand over to them; ``python -m minirlhf.commands.bench`` (``make bench``)
is one. Nothing in the library imports
them, and no stored run is keyed on their code (``minirlhf.course.runs``)."""
