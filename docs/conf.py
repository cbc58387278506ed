"""Sphinx configuration: the guide (Markdown, through MyST) and the API reference built from the
docstrings (autodoc + napoleon, Google style). `make docs` builds it with warnings as errors;
`_ext/api_coverage.py` fails the build on a public symbol the reference lacks."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))
# keras_logq imports Keras 3, tfrs_logq Keras 2 (tf-keras): both load for the reference.
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tfrs_logq  # noqa: E402,F401  First: tf.keras is Keras 2 before anything loads TensorFlow.

project = "tfrs_logq"
author = "the tfrs_logq authors"
release = tfrs_logq.__version__
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "api_coverage",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# Result records and tables are linked from the pages, not pages themselves.
exclude_patterns = ["_build", "results/**"]
myst_heading_anchors = 4
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
# Keras's own docstrings (a layer's inherited `call`) are not this library's, nor RST.
autodoc_inherit_docstrings = False
# Attributes as fields of their class, not entries of their own (a NamedTuple's fields would
# be documented twice).
napoleon_use_ivar = True
# |D| is the catalog's size in the formulas' docstrings, not a substitution.
rst_prolog = r".. |D| replace:: \|D\|"
# Links from the pages into the repository (code, tests, result records) are not pages.
suppress_warnings = ["myst.xref_missing"]
html_theme = "alabaster"
api_coverage_packages = ["logq_core", "tfrs_logq", "keras_logq"]
