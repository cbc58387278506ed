"""Fails the docs build (a warning; `-W` makes it an error) on a public symbol of the libraries
that the API reference does not document, as optax's docs build does.

A public symbol: a class or function, not named with a leading underscore, defined in a
public module (no underscore in its dotted name) of a package in `api_coverage_packages`.
It is documented when autodoc wrote an entry for it, which `:members:` does only for what has
a docstring.
"""

import importlib
import inspect
import pkgutil
from typing import Iterator

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


def public_modules(package: str) -> Iterator[str]:
    """`package` and its submodules whose dotted names have no part starting with '_'."""
    yield package
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield info.name


def public_symbols(packages) -> Iterator[str]:
    """Dotted names of the public classes and functions defined in the packages' modules."""
    for package in packages:
        for name in public_modules(package):
            module = importlib.import_module(name)
            for attribute, value in vars(module).items():
                if attribute.startswith("_"):
                    continue
                if (inspect.isclass(value) or inspect.isfunction(value)) and (
                    getattr(value, "__module__", None) == name
                ):
                    yield f"{name}.{attribute}"


def check(app, env) -> None:
    documented = set(env.get_domain("py").objects)
    missing = sorted(set(public_symbols(app.config.api_coverage_packages)) - documented)
    for name in missing:
        LOGGER.warning(
            f"{name} is public but not in the API reference: give it a docstring (or a "
            "leading underscore), and its module an automodule entry in docs/api/."
        )


def setup(app):
    app.add_config_value("api_coverage_packages", [], "env")
    app.connect("env-check-consistency", check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
