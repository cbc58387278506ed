# Two entry points for a new user: `make demo` (the main job) and `make test`.
# Each creates the virtual environment when it is missing and installs the package into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: demo test test-slow venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The main job: SASRec on the embedded synthetic catalog (improved correction, mixed
# negatives), early stopping, exact evaluation against popularity and the true-P oracle.
demo: $(STAMP)
	$(PY) -m pipelines.train --preset=synthetic --output_dir=$(DEMO_DIR)

test: $(STAMP)
	$(PY) -m pytest -n 2 $(PYTEST_ARGS)

# pytest exits 5 when no test is marked slow: that is not a failure.
test-slow: $(STAMP)
	$(PY) -m pytest -n 2 -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]

clean:
	rm -rf $(VENV) runs build *.egg-info
