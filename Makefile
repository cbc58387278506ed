# Two entry points for a new user: `make demo` (the main job) and `make test`.
# Each creates the virtual environment when it is missing and installs the package into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= runs/demo
PYTEST_ARGS ?=
# MovieLens for the tests that read it (it is not redistributed): ../shared/data beside the
# clone, unless TFRS_LOGQ_DATA says otherwise. Users pass --data_path or set TFRS_LOGQ_DATA.
TEST_DATA ?= $(abspath ../shared/data)

.PHONY: demo test test-slow venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# The main job: SASRec on the embedded synthetic catalog (improved correction, mixed
# negatives), early stopping, test metrics by exact search and through a ScaNN index next to
# popularity and the true-P oracle, SavedModels for serving.
demo: $(STAMP)
	$(PY) -m pipelines.train --preset=synthetic --output_dir=$(DEMO_DIR)

test: $(STAMP)
	TFRS_LOGQ_DATA=$${TFRS_LOGQ_DATA:-$(TEST_DATA)} $(PY) -m pytest -n 2 $(PYTEST_ARGS)

# pytest exits 5 when no test is marked slow: that is not a failure.
test-slow: $(STAMP)
	TFRS_LOGQ_DATA=$${TFRS_LOGQ_DATA:-$(TEST_DATA)} $(PY) -m pytest -n 2 -m slow $(PYTEST_ARGS) \
	    || [ $$? -eq 5 ]

clean:
	rm -rf $(VENV) runs build *.egg-info
