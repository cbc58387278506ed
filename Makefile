# Two entry points for a new user: `make demo` (the main job) and `make test`.
# Each creates the virtual environment when it is missing and installs the package into it.
# The others are for contributors (CONTRIBUTING.md): the marked test suites, lint and types,
# the docs, and the check on the other supported TensorFlow.
PYTHON ?= python3
# The TensorFlow the environment gets: 2.20, whose ScaNN ops load (the whole suite runs), or
# 2.21 (`make check-tf TF=2.21`, in its own environment).
TF ?= 2.20
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= runs/demo
PYTEST_ARGS ?=
# MovieLens for the tests that read it (it is not redistributed): ../shared/data beside the
# clone, unless TFRS_LOGQ_DATA says otherwise. Users pass --data_path or set TFRS_LOGQ_DATA.
TEST_DATA ?= $(abspath ../shared/data)
PYTEST = TFRS_LOGQ_DATA=$${TFRS_LOGQ_DATA:-$(TEST_DATA)} $(PY) -m pytest -n 2

.PHONY: demo test test-integration test-slow lint docs check-tf gpu-wheels venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]" "tensorflow==$(TF).*" "tf-keras==$(TF).*"
	touch $(STAMP)

# The main job: SASRec on the embedded synthetic catalog (improved correction, mixed
# negatives), early stopping, test metrics by exact search and through a ScaNN index next to
# popularity and the true-P oracle, SavedModels for serving.
demo: $(STAMP)
	$(VENV)/bin/tfrs-logq train --preset=synthetic --output_dir=$(DEMO_DIR)

# The default suite: minutes (setup.cfg's addopts leave the marked suites out).
test: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

# End-to-end runs in their own processes, and keras_logq on every Keras 3 backend.
test-integration: $(STAMP)
	$(PYTEST) -m "(integration or backends) and not slow" $(PYTEST_ARGS)

# pytest exits 5 when no test is marked slow: that is not a failure.
test-slow: $(STAMP)
	$(PYTEST) -m slow $(PYTEST_ARGS) || [ $$? -eq 5 ]

# ruff (lint, then format), and mypy over the four libraries (pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The guide and the API reference; warnings (an undocumented public symbol included) fail it.
docs: $(STAMP)
	rm -rf docs/_build
	$(VENV)/bin/sphinx-build -q -E -W --keep-going -b html docs docs/_build/html

# The other TensorFlow: its own environment (.venv-tf2.21), then the library's tests that do
# not need ScaNN's TensorFlow ops (those skip, saying so) and the README's quickstart.
check-tf:
	$(MAKE) VENV=.venv-tf$(TF) TF=$(TF) venv
	TFRS_LOGQ_DATA=$${TFRS_LOGQ_DATA:-$(TEST_DATA)} .venv-tf$(TF)/bin/python -m pytest -n 2 \
	    tests/tfrs_logq/test_tensorflow_versions.py tests/tfrs_logq/test_tasks.py \
	    tests/tfrs_logq/test_losses.py tests/tfrs_logq/test_retrieval.py \
	    tests/tfrs_logq/test_export.py tests/pipelines/test_cli.py $(PYTEST_ARGS)

# The Keras 3 wheels a GPU machine without them needs for `bash benchmarks/gpu.sh` (Python 3.12,
# the versions this environment runs), downloaded into build/gpu_wheels with the commit they
# were fetched at (REVISION: the GPU record names it, the copy there having no .git): carry it.
# h5py (4 MB) writes the .keras model of the jobs phase's export.
# Its next_day phase also reads Parquet: `make gpu-wheels GPU_WHEELS_EXTRA='|pyarrow'` (55 MB)
# where the GPU machine lacks pyarrow.
GPU_WHEELS ?= keras|keras-rs|namex|optree|absl-py|google-crc32c|h5py
GPU_WHEELS_EXTRA ?=
gpu-wheels: $(STAMP)
	rm -rf build/gpu_wheels
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --dest build/gpu_wheels \
	    $$($(PY) -m pip list --format=freeze | grep -E '^($(GPU_WHEELS)$(GPU_WHEELS_EXTRA))==')
	git rev-parse HEAD > build/gpu_wheels/REVISION

clean:
	rm -rf $(VENV) .venv-tf* runs build docs/_build *.egg-info
