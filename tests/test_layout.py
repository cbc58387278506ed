"""The distribution's shape: the wheel holds the four packages and nothing else (benchmarks,
examples and the paper's campaign stay in the clone), the product imports none of those, and
no module of the product imports itself back through another (an import circle)."""

import ast
import glob
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("logq_core", "tfrs_logq", "keras_logq", "pipelines")
OUTSIDE = ("benchmarks", "examples", "paper", "tests", "tests_keras3")


def _modules():
    """{dotted module name: path} of every module of the four packages."""
    modules = {}
    for package in PACKAGES:
        for path in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True):
            name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            modules[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return modules


def _imports(name, path, modules):
    """Every module `name` imports, at any depth of its code (functions included)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in modules else base)
    return found


def _import_graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return out


def test_no_import_circle():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_the_product_imports_nothing_outside_the_wheel():
    leaks = sorted(
        (name, imported)
        for name, imports in _import_graph().items()
        for imported in imports
        if imported.split(".")[0] in OUTSIDE
    )
    assert leaks == []


def test_pipelines_imports_no_tensorflow():
    """The Keras 3 examples read and build `pipelines.data`'s stores on machines without
    TensorFlow (the config, its flags, the log and the day store): importing those modules
    must not import it."""
    code = (
        "import sys; import pipelines.data.loaders, pipelines.data.splits, "
        "pipelines.data.synthetic, pipelines.memory, pipelines.cli, pipelines.console, "
        "pipelines.configs, "
        "pipelines.train_flags, pipelines.provenance, pipelines.data.logs, "
        "pipelines.data.day_store, pipelines.data.events, pipelines.data.web_synthetic, "
        "pipelines.keras_job, pipelines.keras_train, pipelines.keras_export, "
        "pipelines.keras_evaluate, pipelines.per_query, pipelines.errors, "
        "pipelines.keras_sequential, pipelines.data.datasets, pipelines.data.sequences, "
        "examples.keras_next_day, examples.keras_sasrec; "
        "print(sorted(m for m in ('tensorflow', 'tf_keras', 'tfrs_logq') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


@pytest.mark.integration
def test_wheel_holds_the_four_packages_and_the_command(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            ROOT,
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = glob.glob(str(tmp_path / "*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tops = {
            name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")
        }
        entry_points = next(
            archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")
        )
    assert tops == set(PACKAGES)
    assert not [n for n in names if any(f"/{o}/" in n for o in ("benchmarks", "examples"))]
    assert "tfrs-logq = pipelines.cli:main" in entry_points
