"""The API reference's coverage check (docs/_ext/api_coverage.py): every public class and
function of logq_core, tfrs_logq and keras_logq has a docstring, so autodoc documents it, and
the check warns (an error under `sphinx-build -W`) on one the reference lacks."""

import importlib
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))

import api_coverage  # noqa: E402

PACKAGES = ["logq_core", "tfrs_logq", "keras_logq"]


def _object(name):
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def test_public_symbols_are_found_and_private_ones_are_not():
    symbols = set(api_coverage.public_symbols(PACKAGES))
    for name in (
        "tfrs_logq.tasks.LogQRetrieval",
        "logq_core.formulas.sampled_softmax_terms",
        "tfrs_logq.export.scann_export_available",
        "tfrs_logq.scoring.Scored",
    ):
        assert name in symbols
    assert not [s for s in symbols if any(p.startswith("_") for p in s.split("."))]
    # Re-exports are documented where they are defined, once.
    assert "tfrs_logq.LogQRetrieval" not in symbols


def test_every_public_symbol_has_a_docstring():
    missing = [
        name for name in api_coverage.public_symbols(PACKAGES) if not inspect.getdoc(_object(name))
    ]
    assert missing == []


def test_the_check_warns_on_a_symbol_the_reference_lacks(monkeypatch):
    warnings = []
    monkeypatch.setattr(api_coverage.LOGGER, "warning", warnings.append)
    documented = set(api_coverage.public_symbols(["logq_core"])) - {"logq_core.formulas.improved"}

    class Domain:
        objects = dict.fromkeys(documented)

    class Env:
        def get_domain(self, name):
            assert name == "py"
            return Domain()

    class App:
        class config:  # noqa: N801
            api_coverage_packages = ["logq_core"]

    api_coverage.check(App(), Env())
    assert len(warnings) == 1
    assert warnings[0].startswith("logq_core.formulas.improved is public but not in the API")
