# minirlhf: every target sets up what it needs. `make book` and `make test` work on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
JB := $(VENV)/bin/jupyter-book
# One thread per torch process: runs are bit-identical and the two cores stay free for the kernel
# and the build.
export OMP_NUM_THREADS := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# The cores this make may use (the tests run one process per core): nproc on Linux, which
# counts only the cores the process is allowed; sysctl on macOS.
NPROC := $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

.PHONY: help venv trl-extra book test lint format unit nbval-solutions nbval-notebooks book-strict browser pdf \
	pdf-check chromium poppler lab notebooks bench check trl clean

help:
	@echo "make book       install into .venv if needed, execute the chapters, render _build/html"
	@echo "                (torch: the CPU build; TORCH=default takes the default index's torch)"
	@echo "make test       lint, unit tests, nbval on solutions/ and notebooks/, the strict book build,"
	@echo "                the browser test, the PDF's test (make pdf-check)"
	@echo "make pdf        the whole book as one PDF, _build/pdf/minirlhf-book.pdf (headless Chromium);"
	@echo "                the book's download menu offers it from then on"
	@echo "make lint       ruff on the package and the tests (make format fixes what it can)"
	@echo "make browser    every page of the built book in headless Chromium; screenshots in"
	@echo "                _build/screenshots/"
	@echo "make lab        JupyterLab on notebooks/"
	@echo "make notebooks  regenerate notebooks/ and solutions/ from chapters/ (never overwrites"
	@echo "                a notebook you edited; FORCE=1 does, after keeping a copy in kept/)"
	@echo "make check      grade every learner notebook against the solutions"
	@echo "make bench      time the training pipeline; writes outputs/bench.json"
	@echo "make trl        install the TRL extra; run TRL's trainers beside ours (book/trl/)"

# torch is the CPU build by default, on every platform: the book never uses a GPU, and on Linux
# the torch of the default index (PyPI) is the CUDA build, with about 2.2 GB of CUDA libraries.
#   TORCH=cpu      (the default) torch first, alone, from PyTorch's CPU index (TORCH_CPU_INDEX,
#                  the index pytorch.org's selector gives for "CPU"); then requirements.txt from
#                  the configured index, which finds torch installed. When that index cannot be
#                  reached (a 10-second probe), torch comes from the configured index with the
#                  rest, and a line says so. On macOS PyPI's torch is itself the CPU build, so the
#                  CPU index is not asked.
#   TORCH=default  torch from the configured index like everything else (on Linux: CUDA).
# The choice applies when .venv is installed; `rm -rf .venv` to make it again with another.
# Only the install reads TORCH: a TORCH in the environment that means something else stops
# only a target that installs (`make help`, `make clean` never), with a line saying so.
TORCH ?= cpu
TORCH_CHOICE := $(strip $(TORCH))
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -m1 -E '^torch==' requirements.txt)
UNAME_S ?= $(shell uname -s)
# Exits 0 when the index answers within INDEX_PROBE_SECONDS in all (a 4xx is an answer; a
# proxy's 407 or a 5xx is not), 1 with the reason otherwise: a deadline for the whole probe,
# not for each read, so a server that sends a byte at a time cannot hold it. pip itself would
# retry an unreachable index for minutes.
INDEX_PROBE_SECONDS ?= 10
INDEX_PROBE := $$'import sys, threading, urllib.request as u, urllib.error as e\nurl, limit = sys.argv[1], \
float(sys.argv[2])\nsaid = [f"{url}: no answer within {limit:g} s"]\ndef probe():\n try:\n  u.urlopen(url, \
timeout=limit).close(); said[0] = 0\n except e.HTTPError as x:\n  said[0] = 0 if x.code < 500 and \
x.code != 407 else f"{url}: {x}"\n except Exception as x:\n  said[0] = f"{url}: {x}"\nt = \
threading.Thread(target=probe, daemon=True); t.start(); t.join(limit); sys.exit(said[0])'

ifneq ($(filter-out cpu default,$(TORCH_CHOICE))$(words $(TORCH_CHOICE)),1)
TORCH_FROM_ENV = $(filter environment%,$(origin TORCH))
TORCH_STEP = $(error TORCH=$(TORCH)$(if $(TORCH_FROM_ENV), (from the environment)): say TORCH=cpu (the \
default) or TORCH=default$(if $(TORCH_FROM_ENV),$(COMMA) or unset TORCH))
COMMA := ,
else ifeq ($(TORCH_CHOICE)-$(UNAME_S),cpu-Darwin)
TORCH_STEP = @echo "torch: the default index's torch, which on macOS is the CPU build"
else ifeq ($(TORCH_CHOICE),cpu)
TORCH_STEP = @if $(PY) -c $(INDEX_PROBE) $(TORCH_CPU_INDEX)/torch/ $(INDEX_PROBE_SECONDS); then \
	  echo "torch: the CPU build from $(TORCH_CPU_INDEX)"; \
	  $(PY) -m pip install --quiet --timeout 30 --retries 2 --index-url $(TORCH_CPU_INDEX) \
	    "$(TORCH_PIN)"; \
	else \
	  echo "torch: $(TORCH_CPU_INDEX) cannot be reached: torch comes from the configured index"; \
	  echo "       with the rest (on Linux that is the CUDA build, unless a CPU wheel is at hand)"; \
	fi
else
TORCH_STEP = @echo "torch: from the configured index, with the rest (TORCH=default)"
endif

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(TORCH_STEP)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e . || $(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

# The optional TRL bridge (minirlhf.hf, minirlhf.trl): the extra "trl" of pyproject.toml.
# The book does not need it; the unit tests do (they run the bridge, two processes included).
TRL_STAMP := $(VENV)/.installed-trl
$(TRL_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet --no-build-isolation -e ".[trl]" || $(PY) -m pip install --quiet -e ".[trl]"
	@touch $(TRL_STAMP)

trl-extra: $(TRL_STAMP)

book: $(STAMP)
	MINIRLHF_BUILDING_BOOK=1 $(JB) build . -W -n --keep-going
	@echo "Open $(CURDIR)/_build/html/index.html in a browser."

book-strict: book

# Every page of _toc.yml in headless Chromium (tests/browser): nothing loads from another host,
# images, math, dropdowns, sliders and the 'next' link work; axe-core's WCAG 2.1 A and AA rules
# find nothing serious or critical and every block that scrolls takes the keyboard's focus;
# full-page screenshots at desktop
# and phone width go to _build/screenshots/. One process per core shares the pages (each
# with its own Chromium and server); the summary lists them in the book's order. Installs
# Debian's chromium when it is missing (apt-get needs root, as in CI).
chromium:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium fonts-dejavu-core fonts-liberation; } \
		|| { echo "Chromium is missing: apt-get install chromium (as root)"; exit 1; }

BROWSER_TESTS = MINIRLHF_BROWSER=1 $(PY) -m pytest -q -n $(NPROC) --dist load -p no:cacheprovider tests/browser \
	&& echo "Screenshots: $(CURDIR)/_build/screenshots/ (summary.txt lists the pages checked)."

browser: book chromium
	$(BROWSER_TESTS)

# The whole book as one PDF (minirlhf.course.pdf): Sphinx's single-page build of every page of
# _toc.yml, printed by headless Chromium with an outline, page numbers, math typeset, dropdowns
# open and each slider at its default frame. Then the HTML book is built again, every page
# (--all; the chapters' outputs come from the execution cache), so that its download menu
# offers the PDF.
PDF := _build/pdf/minirlhf-book.pdf
pdf: $(STAMP) chromium
	MINIRLHF_BUILDING_BOOK=1 $(JB) build . --builder singlehtml -n --keep-going
	$(PY) -m minirlhf.course.pdf _build/singlehtml $(PDF)
	MINIRLHF_BUILDING_BOOK=1 $(JB) build . -W -n --keep-going --all

# The PDF's test: an outline entry per chapter, every chapter's title and a sentence of it in
# the text (poppler's pdftotext, installed when missing), no math left as TeX source.
poppler:
	@command -v pdftotext >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq poppler-utils; } \
		|| { echo "pdftotext is missing: apt-get install poppler-utils (as root)"; exit 1; }

PDF_TESTS = MINIRLHF_PDF=1 $(PY) -m pytest -q -p no:cacheprovider tests/test_pdf_book.py

pdf-check: pdf poppler
	$(PDF_TESTS)

# MINIRLHF_REQUIRE_TRL=1: the bridge's tests fail, rather than skip, when the extra is missing.
# One process per core; a test file stays whole in one of them.
unit: $(TRL_STAMP)
	MINIRLHF_REQUIRE_TRL=1 $(PY) -m pytest -q -n $(NPROC) --dist loadfile -p no:cacheprovider tests

# The notebooks run one per core at a time (pytest-xdist; each notebook stays whole in one
# worker, its cells in order). Chapters that read another chapter's stored runs make them
# themselves when they are not there yet, and wait when another worker is making them
# (minirlhf.paths.making), so no run is made twice; every store writes atomically and the runs
# are bit-identical, so which worker makes a file does not matter.
NBVAL_PARALLEL := -n $(NPROC) --dist loadfile

# The solutions, the longest first (measured: each chapter's first run, in minutes, 11 about 9.5,
# 9 and 10 about 7, 8 and 6 about 3, 4, 5 and 7 about 2, the rest a minute or less; How to
# use this book keeps the current figures), so that no long notebook
# starts last and runs alone at the end; a chapter not in the list runs after them. pytest-xdist
# keeps this order (--no-loadscope-reorder) instead of starting the notebooks with the most
# cells first.
SOLUTIONS_FIRST := 11 09 10 08 06 04 07 05 03 02 01
SOLUTIONS = $(foreach n,$(SOLUTIONS_FIRST),$(wildcard solutions/$(n)_*.ipynb)) \
	$(filter-out $(foreach n,$(SOLUTIONS_FIRST),$(wildcard solutions/$(n)_*.ipynb)),$(wildcard solutions/[0-9][0-9]_*.ipynb))

nbval-solutions: $(STAMP)
	$(PY) -m pytest -q $(NBVAL_PARALLEL) --no-loadscope-reorder --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(SOLUTIONS)

# The learner's notebooks, by name: never a copy a command kept (NAME.graded*.ipynb,
# NAME.backup*.ipynb), should one be left in notebooks/ by an older version. Listed by the
# shell, each name quoted for it, so that a name with a space (a copy Finder made) stays one
# argument: make's own lists would split it.
LEARNER_NOTEBOOKS = $(strip $(shell for f in notebooks/[0-9][0-9]_*.ipynb; do case "$$f" in \
	(*.graded*.ipynb|*.backup*.ipynb) ;; (*) test -f "$$f" && printf '%q ' "$$f";; esac; done))

nbval-notebooks: $(STAMP)
	$(PY) -m pytest -q $(NBVAL_PARALLEL) --nbval-lax --nbval-current-env -p no:cacheprovider $(LEARNER_NOTEBOOKS)

# The book is built once: `make pdf` makes the single-page build, prints the PDF and then
# builds the HTML book (strict, -W) that offers it; the browser test and the PDF's test both
# read that build.
test: lint unit nbval-solutions nbval-notebooks pdf chromium poppler
	$(BROWSER_TESTS)
	$(PDF_TESTS)

# ruff, configured in pyproject.toml: the package and the tests linted and formatted (the chapters
# keep their 77-column layout, which the tests check). `make format` rewrites what lint refuses.
lint: $(STAMP)
	$(VENV)/bin/ruff check minirlhf tests
	$(VENV)/bin/ruff format --check minirlhf tests

format: $(STAMP)
	$(VENV)/bin/ruff check --fix minirlhf tests
	$(VENV)/bin/ruff format minirlhf tests

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

# Never overwrites a learner notebook that holds edits (it says so, and exits 1); FORCE=1
# replaces it after keeping a copy in kept/.
notebooks: $(STAMP)
	$(PY) -m minirlhf.course.nbgen $(if $(FORCE),--force)

bench: $(STAMP)
	$(PY) -m minirlhf.commands.bench

# Exits non-zero unless every exercise of every notebook passes.
check: $(STAMP)
	$(PY) -m minirlhf.course.grader $(LEARNER_NOTEBOOKS)

# TRL's GRPO, RLOO and PPO trainers beside our arms, 5 seeds, with a profile: the results the
# page "From toy to real" reads (about 4 minutes).
# The book's execution cache keys a page on its code, not on the file it reads: forget the
# page's cached run and mark the page changed, so that the next `make book` shows the new
# results.
trl: $(TRL_STAMP)
	$(PY) -m minirlhf.commands.trl_run --compare --profile --seeds 5 --out book/trl
	@test ! -d _build/.jupyter_cache || $(PY) -c 'from jupyter_cache import get_cache; \
		c = get_cache("_build/.jupyter_cache"); \
		[c.remove_cache(r.pk) for r in c.list_cache_records() if r.uri.endswith("book/toy-to-real.md")]'
	@touch book/toy-to-real.md

# kept/ (copies of your notebooks that a command kept) is never removed here.
clean:
	rm -rf _build outputs
