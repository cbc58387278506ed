"""Every command quoted in README.md, CONTRIBUTING.md, docs/*.md and docs/guide/*.md still runs
as written (issue 44).

Running the quoted commands in full takes hours (benchmarks, training on MovieLens), so this
checks each one cheaply and strictly, from the repository's root:

- `python -m MODULE ARGS` where MODULE is an absl program (it calls `app.run`): in a child
  process per module, the module is run as `python -m` runs it (`runpy.run_module`, run name
  `__main__`), with `absl.app.run` replaced by a stub, so that its flags are defined exactly as
  a real start defines them; then every quoted argument list of that module is parsed with
  `flags.FLAGS(argv)`, which is what `app.run` does first (unknown flags, bad enum values,
  bounds and validators all fail there), and, where the module has one, `config_from_flags()`
  validates the result (`pipelines.train`: the preset's name and every field's value). A module
  that is missing or fails to import fails here. A help flag in a quoted command is set aside
  and the rest parsed. Positional arguments (a run directory) are not checked: only `main`
  reads them.
  (`python -m MODULE ARGS --helpshort` is no such check: absl exits on --helpshort while it
  scans the arguments, before it reports the unknown flags it collected, so
  `python -m pipelines.train --no_such_flag --helpshort` prints the help and exits 1, exactly
  as a correct command does.)
- `python -m MODULE` for any other module: one of this repository's is imported in a child
  process; another (pytest) is found on the path, and for pytest the paths it is given exist
  and `-n` has pytest-xdist.
- `python paper/SCRIPT.py ARGS` without absl: the script is loaded as a script is (its folder
  first on sys.path); every function it defines, except `main` and its `check_*` argument
  checks (and what they call), is replaced by a stub that makes the `check_*` calls the
  function would make on its arguments; `main(argv)` must accept the arguments (return 0).
  That runs the argument checks and nothing else (`park.py pack RUN ARCHIVE` checks that
  ARCHIVE lies outside the git work tree; a relative one is taken from the repository's root,
  where `python paper/park.py` runs).
- `tfrs-logq JOB ARGS`: checked as `python -m pipelines.JOB ARGS`, which it runs.
- `make TARGET`: `make -n TARGET` knows the target.
- `bash paper/campaign.sh SUB`: SUB is a subcommand of the script's dispatch and of the usage
  it prints when run without one.

Commands are taken from fenced code blocks (lines ending in `\\` joined, `# comments`
dropped, `VAR=value` and `time` prefixes kept aside) and from inline code spans (which may
wrap lines), for the prefixes `python -m `, `python paper/`, `bash paper/` and `make `.
Placeholders are made concrete: `a|b` in a flag's value checks each alternative, `N` is a
number and another upper-case word (RUN, OTHER, OUTPUT) a temporary path; a command with a
placeholder that cannot be made concrete (`...`) is reported as skipped. Each distinct
command is checked once, wherever it is quoted; the failure names every place.

Negative controls (a misspelt flag, a renamed module, an unknown target or subcommand) show
that each check fails where a reader's command would. README.md also keeps the project's rule:
at most 150 lines, and its first code block holds exactly `make demo` and `make test`.
"""

import dataclasses
import functools
import importlib.util
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from pipelines import cli

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "guide").glob("*.md")),
]
PLACEHOLDER_DIR = Path(tempfile.gettempdir()) / "tfrs_logq_docs_check"
SHELL_FENCES = {"", "sh", "bash", "shell", "console", "text"}
SHELL_OPERATORS = {";", "&", "&&", "||", "|"}
RESULT_MARK = "@@DOCS_CHECK@@"
# pytest's options whose value is the next word (not a path to test).
PYTEST_VALUE_OPTIONS = {
    "-n",
    "-m",
    "-k",
    "-p",
    "-c",
    "-o",
    "-W",
    "--maxfail",
    "--durations",
    "--rootdir",
    "--basetemp",
    "--dist",
    "--deselect",
    "--ignore",
}
TIMEOUT_S = 240


# ---------------------------------------------------------------------------- extraction


@dataclasses.dataclass(frozen=True)
class Quote:
    """A command as one file quotes it: its text (lines joined) and where it starts."""

    path: str
    line: int
    text: str


@dataclasses.dataclass
class Command:
    """One concrete command: the environment prefix, its words, and every place quoting it."""

    text: str  # as quoted (placeholders kept), one alternative picked
    env: Tuple[Tuple[str, str], ...]
    argv: Tuple[str, ...]  # concrete: placeholders substituted
    where: List[str] = dataclasses.field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.argv[0] == "make":
            return "make"
        if self.argv[0] == "bash":
            return "bash"
        if self.argv[1] == "-m":
            return "absl" if _absl_program(self.argv[2]) else "module"
        return "script"


def _fences_and_text(text: str) -> Tuple[List[Tuple[int, str, List[str]]], str]:
    """([(first line number, info string, lines)] of the fenced blocks, the text with every
    fenced line blanked, so that line numbers still hold)."""
    blocks, kept, current = [], [], None
    for number, line in enumerate(text.split("\n"), start=1):
        fence = re.match(r"\s*(```+|~~~+)\s*(\S*)", line)
        if current is None and fence:
            current = (number + 1, fence.group(2).lower(), [], fence.group(1))
            kept.append("")
        elif current is not None and line.strip().startswith(current[3][:3]):
            blocks.append(current[:3])
            current = None
            kept.append("")
        elif current is not None:
            current[2].append(line)
            kept.append("")
        else:
            kept.append(line)
    return blocks, "\n".join(kept)


def _block_quotes(path: str, first: int, lines: List[str]) -> List[Quote]:
    """A fenced block's logical lines (continuations joined)."""
    quotes, pending, start = [], "", None
    for number, line in enumerate(lines, start=first):
        start = number if not pending else start
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        quotes.append(Quote(path, start, (pending + line).strip()))
        pending = ""
    if pending:
        quotes.append(Quote(path, start, pending.strip()))
    return quotes


def _inline_quotes(path: str, text: str) -> List[Quote]:
    """Inline code spans, which may wrap lines but not cross a blank line."""
    quotes = []
    for match in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.DOTALL):
        body = match.group(2)
        if re.search(r"\n\s*\n", body):
            continue
        line = text.count("\n", 0, match.start()) + 1
        quotes.append(Quote(path, line, " ".join(body.split())))
    return quotes


def quotes_in(path: Path) -> Tuple[List[Quote], List[Tuple[int, str, List[str]]]]:
    """Every candidate quote of one file, and its fenced blocks."""
    name = str(path.relative_to(ROOT))
    blocks, prose = _fences_and_text(path.read_text())
    quotes = []
    for first, info, lines in blocks:
        if info in SHELL_FENCES:
            quotes.extend(_block_quotes(name, first, lines))
    quotes.extend(_inline_quotes(name, prose))
    return quotes, blocks


def _words(text: str) -> Optional[List[str]]:
    """The shell words of the first simple command of `text` (comments dropped), or None."""
    text = re.sub(r"^\$\s+", "", text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word in SHELL_OPERATORS:
            return words[:i]
        if word.endswith(";") and word != ";":
            return words[:i] + [word[:-1]]
    return words


def _split_prefix(words: List[str]) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(the `VAR=value` assignments before the command, the command's words); `time` dropped."""
    env = []
    while words and (re.match(r"[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] == "time"):
        if words[0] != "time":
            name, value = words[0].split("=", 1)
            env.append((name, value))
        words = words[1:]
    return env, words


def _as_python_m(words: List[str]) -> List[str]:
    """`tfrs-logq JOB ARGS...` runs as `python -m pipelines.JOB ARGS...` (`pipelines.cli`)."""
    if len(words) >= 2 and words[0] == "tfrs-logq" and words[1] in cli.JOBS:
        return ["python", "-m", cli.JOBS[words[1]].module, *words[2:]]
    return words


def _is_command(words: List[str]) -> bool:
    if len(words) >= 1 and words[0] == "make":
        return len(words) >= 2
    if len(words) >= 2 and words[0] in ("python", "python3"):
        return words[1] == "-m" and len(words) >= 3 or words[1].startswith("paper/")
    return len(words) >= 2 and words[0] == "bash" and words[1].startswith("paper/")


def _concrete(word: str) -> Optional[str]:
    """A placeholder word (or a flag's placeholder value) made concrete; None where it
    cannot be."""
    flag = re.fullmatch(r"(--[\w.-]+=)(.+)", word)
    if flag:
        value = _concrete(flag.group(2))
        return None if value is None else flag.group(1) + value
    if "..." in word or "…" in word:
        return None
    bare = word.strip("<>")
    if bare == "N":
        return "2"
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", bare) and (bare != word or len(bare) > 1):
        return str(PLACEHOLDER_DIR / bare.lower())
    if word != bare:
        return None
    return word


def _alternatives(words: List[str]) -> List[List[str]]:
    """`--flag=a|b` quoted as notation: one word list per combination of alternatives."""
    options = []
    for word in words:
        match = re.fullmatch(r"(--[\w.-]+=)(.*\|.*)", word)
        options.append([match.group(1) + v for v in match.group(2).split("|")] if match else [word])
    return [list(choice) for choice in itertools.product(*options)]


def extract() -> Tuple[List[Command], List[Tuple[str, str]]]:
    """(every distinct command quoted in the docs, [(place, quote)] of the ones that cannot be
    made concrete)."""
    commands: Dict[Tuple, Command] = {}
    unusable = []
    for path in DOC_FILES:
        quotes, _ = quotes_in(path)
        for quote in quotes:
            words = _words(quote.text)
            if not words:
                continue
            env, words = _split_prefix(words)
            words = _as_python_m(words)
            if not _is_command(words):
                continue
            where = f"{quote.path}:{quote.line}"
            for choice in _alternatives(words):
                argv = [_concrete(w) for w in choice]
                text = " ".join([f"{k}={shlex.quote(v)}" for k, v in env] + choice)
                if None in argv:
                    unusable.append((where, text))
                    continue
                key = (tuple(env), tuple(argv))
                command = commands.setdefault(key, Command(text, tuple(env), tuple(argv)))
                if where not in command.where:
                    command.where.append(where)
    return list(commands.values()), unusable


COMMANDS, UNUSABLE = extract()


# ---------------------------------------------------------------------------- checks


def _module_file(module: str) -> Optional[Path]:
    """The file `python -m module` runs, where the module is one of this repository's."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _in_repository(module: str) -> bool:
    return (ROOT / module.split(".")[0] / "__init__.py").is_file()


@functools.lru_cache(maxsize=None)
def _absl_program(module: str) -> bool:
    """A module of this repository that runs through absl.app.run (or `pipelines.console.run`,
    which calls it)."""
    source = _module_file(module)
    if source is None:
        return False
    return bool(re.search(r"\b(app|console)\.run\(", source.read_text()))


def _environment() -> Dict[str, str]:
    """A user's environment: no TF_USE_LEGACY_KERAS or KERAS_BACKEND from this test process
    (tfrs_logq sets the first on import), TensorFlow's C++ logs off. A command's own
    `VAR=value` prefix is not applied: no check here reads it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND", "PYTHONPATH")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def _child(args: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        args,
        cwd=ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _result_of(process: subprocess.CompletedProcess) -> dict:
    for line in process.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    return {
        "error": f"the check's child process exited {process.returncode} without a "
        f"result: {(process.stdout + process.stderr)[-2000:]}"
    }


# Runs MODULE as `python -m` does, with absl.app.run stubbed, then parses each argument list.
ABSL_CHILD = r"""
import contextlib, inspect, io, json, runpy, sys, traceback
from absl import app, flags

module, argvs, mark = json.loads(sys.argv[1])

class _Started(BaseException):
    pass

started = {}

def _run(main, argv=None, flags_parser=None):
    started.update(main=main, flags_parser=flags_parser)
    raise _Started

app.run = _run
app.define_help_flags()  # as app.run does; a help flag is set aside below (absl would exit on
HELP = {"--help", "--helpshort", "--helpfull", "--helpxml", "-?"}  # it before the rest's errors)
out = {"results": []}
sys.argv = [module]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    out["error"] = f"python -m {module} ended without calling absl.app.run"
except _Started:
    pass
except BaseException:
    out["error"] = traceback.format_exc(limit=-3).strip()
if "main" in started:
    namespace = inspect.unwrap(started["main"]).__globals__  # console.run wraps main.
    for argv in argvs:
        argv = [arg for arg in argv if arg not in HELP]
        flags.FLAGS.unparse_flags()
        said = io.StringIO()  # What a parser prints before it exits (console.run's one line).
        try:
            with contextlib.redirect_stderr(said):
                if started["flags_parser"] is not None:
                    rest = started["flags_parser"]([module, *argv])
                else:
                    rest = flags.FLAGS([module, *argv])
            if callable(namespace.get("config_from_flags")):
                namespace["config_from_flags"]()
            out["results"].append({"error": None, "positional": rest[1:]})
        except (Exception, SystemExit) as e:
            error = f"{type(e).__name__}: {e}"
            out["results"].append({"error": " ".join([error, said.getvalue().strip()]).strip()})
print(mark + json.dumps(out), flush=True)
"""

# Loads a script as `python SCRIPT` does (its folder first on sys.path) without running its
# `if __name__ == "__main__"` block, stubs every function it defines but `main` and its
# check_* functions (a stub makes the check_* calls of the function it replaces), calls main.
SCRIPT_CHILD = r"""
import contextlib, inspect, io, json, os, runpy, sys, traceback

script, argvs, mark = json.loads(sys.argv[1])
sys.path[0] = os.path.dirname(os.path.abspath(script))
out = {"results": []}
try:
    namespace = runpy.run_path(script, run_name="__docs_check__")
    if not callable(namespace.get("main")):
        raise RuntimeError(f"{script} has no main(argv) to check")
except BaseException:
    out["error"] = traceback.format_exc(limit=-3).strip()
else:
    namespace = namespace["main"].__globals__  # run_path returned a copy
    own = {name: value for name, value in namespace.items()
           if callable(value) and getattr(value, "__module__", None) == "__docs_check__"}
    checks = {name: value for name, value in own.items() if name.startswith("check_")}
    kept, todo = set(checks), list(checks)  # the checks and what they call stay real
    while todo:
        code = getattr(own[todo.pop()], "__code__", None)
        for name in (code.co_names if code else ()):
            if name in own and name not in kept:
                kept.add(name)
                todo.append(name)

    def stub(original):
        # Makes the argument checks (check_*) that `original` makes, with its arguments.
        def called(*args, **kwargs):
            bound = inspect.signature(original).bind(*args, **kwargs)
            bound.apply_defaults()
            for name in original.__code__.co_names:
                if name in checks:
                    params = inspect.signature(checks[name]).parameters
                    if all(bound.arguments.get(p) is not None for p in params):
                        checks[name](**{p: bound.arguments[p] for p in params})
            return {}
        return called

    for name, value in own.items():
        if name != "main" and name not in kept and inspect.isfunction(value):
            namespace[name] = stub(value)
    for argv in argvs:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                status = namespace["main"]([script, *argv])
        except SystemExit as e:
            status = e.code
        except Exception as e:
            status = f"{type(e).__name__}: {e}"
        error = None if status in (0, None) else f"main returned {status}: {printed.getvalue()}"
        out["results"].append({"error": error})
print(mark + json.dumps(out), flush=True)
"""


def _group_results(child: str, target: str, argvs: Tuple[Tuple[str, ...], ...]) -> List[str]:
    """One child process for every argument list of one module or script: each one's error."""
    process = _child([sys.executable, "-c", child, json.dumps([target, argvs, RESULT_MARK])])
    result = _result_of(process)
    if result.get("error"):
        return [result["error"]] * len(argvs)
    return [r["error"] for r in result["results"]]


@dataclasses.dataclass(frozen=True)
class Control:
    """A command that must fail its check, with a string its error must name."""

    text: str
    expect: str


NEGATIVE_CONTROLS = [
    Control("python -m pipelines.train --preset=smoke --no_such_flag", "no_such_flag"),
    Control("python -m pipelines.train --strategy=no_such_strategy", "strategy"),
    Control("python -m pipelines.train --preset=no_such_preset --output_dir=RUN", "--preset"),
    Control("python -m pipelines.train --batch_size=many", "batch_size"),
    Control("python -m pipelines.trainx --preset=smoke", "No module named pipelines.trainx"),
    Control("python -m pipelines.evaluate RUN --no_such_flag", "no_such_flag"),
    Control("python -m paper.reproduce --profile=no_such_profile", "profile"),
    Control("python -m no_such_module_anywhere", "no_such_module_anywhere"),
    Control("python -m pytest tests/no_such_test_file.py", "tests/no_such_test_file.py"),
    Control("python paper/park.py pack", "usage: park.py"),
    Control("python paper/park.py no_such_subcommand RUN OUTPUT", "usage: park.py"),
    Control("python paper/park.py pack RUN run.tar.gz", "inside the git work tree"),
    Control("python paper/no_such_script.py", "no_such_script.py"),
    Control("make no-such-target", "No rule to make target"),
    Control("bash paper/campaign.sh no_such_subcommand", "no_such_subcommand"),
]


def _as_command(text: str) -> Command:
    env, words = _split_prefix(_words(text))
    return Command(text, tuple(env), tuple(_concrete(w) for w in words), ["(control)"])


# Commands that must pass: each checker accepts what is right.
POSITIVE_CONTROLS = [
    "python -m pipelines.train --preset=smoke --output_dir=RUN --help",
    "python -m examples.keras_rs_two_tower --users=200 --items=300 --epochs=2",
    "python paper/park.py pack RUN ARCHIVE",
    "python paper/park.py pack RUN",
    "bash paper/campaign.sh status",
    "bash paper/campaign.sh queue 0",
]

CONTROL_COMMANDS = [_as_command(control.text) for control in NEGATIVE_CONTROLS]
POSITIVE_COMMANDS = [_as_command(text) for text in POSITIVE_CONTROLS]


@functools.lru_cache(maxsize=None)
def _grouped(kind: str, target: str) -> Dict[Tuple[str, ...], Optional[str]]:
    """Every argument list of `target` (the docs' and the controls') checked in one child."""
    argvs = tuple(
        sorted(
            {
                c.argv[3:] if kind == "absl" else c.argv[2:]
                for c in COMMANDS + CONTROL_COMMANDS + POSITIVE_COMMANDS
                if c.kind == kind and c.argv[2 if kind == "absl" else 1] == target
            }
        )
    )
    child = ABSL_CHILD if kind == "absl" else SCRIPT_CHILD
    return dict(zip(argvs, _group_results(child, target, argvs)))


@functools.lru_cache(maxsize=None)
def _campaign_subcommands(script: str) -> Tuple[Tuple[str, ...], str]:
    """(the subcommands of the script's final `case "${1:-}"` dispatch, its usage message when
    run without one)."""
    source = (ROOT / script).read_text()
    dispatch = source[source.rindex('case "${1:-}" in') :]
    dispatch = dispatch[: dispatch.index("esac")]
    labels = tuple(re.findall(r"^\s*([\w-]+)\)", dispatch, re.MULTILINE))
    process = _child(["bash", script])
    return labels, f"exit {process.returncode}: {process.stderr.strip()}"


def check(command: Command) -> Optional[str]:
    """None where the command would run as written; else what is wrong with it."""
    argv = command.argv
    if command.kind == "make":
        process = _child(["make", "-n", *argv[1:]])
        if process.returncode != 0 or "No rule to make target" in process.stderr:
            return f"make -n exited {process.returncode}: {process.stderr.strip()}"
        return None
    if command.kind == "bash":
        script = argv[1]
        if not (ROOT / script).is_file():
            return f"{script}: no such file"
        labels, usage = _campaign_subcommands(script)
        sub = argv[2] if len(argv) > 2 else ""
        if sub not in labels:
            return f"{script} has no subcommand {sub!r} (its dispatch: {', '.join(labels)})"
        if not re.search(rf"[\s|]{re.escape(sub)}\b", usage.split("(")[0]):
            return f"{script}'s usage does not list {sub!r}: {usage}"
        return None
    if command.kind == "absl":
        return _grouped("absl", argv[2])[argv[3:]]
    if command.kind == "module":
        return _check_module(argv[2], argv[3:])
    script = argv[1]
    if not (ROOT / script).is_file():
        return f"{script}: no such file"
    return _grouped("script", script)[argv[2:]]


def _check_module(module: str, args: Tuple[str, ...]) -> Optional[str]:
    """A module that is not an absl program: importable (its __main__ for a package); one of
    this repository's is imported in a child process, without running it."""
    if _in_repository(module):
        if _module_file(module) is None:
            return f"No module named {module}"  # as python -m says
        process = _child(
            [sys.executable, "-c", f"import importlib; importlib.import_module({module!r})"]
        )
        if process.returncode != 0:
            return f"import {module} failed: {process.stderr.strip()[-2000:]}"
        return None
    try:
        spec = importlib.util.find_spec(module)
    except ImportError as e:
        return f"{type(e).__name__}: {e}"
    if spec is None:
        return f"No module named {module}"
    if spec.submodule_search_locations is not None and (
        importlib.util.find_spec(f"{module}.__main__") is None
    ):
        return f"{module} is a package without __main__: python -m cannot run it"
    if module == "pytest":
        if "-n" in args and importlib.util.find_spec("xdist") is None:
            return "pytest -n needs pytest-xdist, which is not installed"
        for before, arg in zip(("",) + args, args):
            if (
                not arg.startswith("-")
                and before not in PYTEST_VALUE_OPTIONS
                and not (ROOT / arg.split("::")[0]).exists()
            ):
                return f"pytest: {arg} does not exist"
    return None


# ---------------------------------------------------------------------------- tests


def _id(command: Command) -> str:
    return command.text if len(command.text) <= 120 else command.text[:117] + "..."


def test_extraction_finds_the_docs_commands():
    """The extractor sees the commands it must see, joined and concrete, once each."""
    texts = {c.text for c in COMMANDS}
    # A fenced command continued with `\` and a trailing comment; an inline span that wraps.
    assert (
        "python -m pipelines.train --preset=cpu --dataset=ml-1m --negatives=in_batch "
        "--correction=improved --output_dir=runs/ml1m-inbatch-improved"
    ) in texts
    assert "python -m pipelines.train --preset=synthetic --output_dir=runs/demo" in texts
    assert "python -m pipelines.evaluate runs/ml1m-inbatch-improved --index=scann" in texts
    # `a|b` alternatives, each checked; prefixes set aside.
    assert "python -m paper.reproduce --profile=official_cpu" in texts
    assert (
        "python -m paper.reproduce --dataset=ml-1m --split=temporal --profile=official --seeds=N"
    ) in texts
    assert "KERAS_BACKEND=jax python -m pytest tests_keras3" in texts
    assert {"make demo", "make test", "make test-slow"} <= texts
    assert "python paper/park.py unpack /tmp/run.tar.gz OUTPUT" in texts
    assert len({(c.env, c.argv) for c in COMMANDS}) == len(COMMANDS)


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, id=_id(c)) for c in COMMANDS]
    + [
        pytest.param(
            None,
            id=text,
            marks=pytest.mark.skip(
                reason=f"quoted at {where} with a placeholder that cannot be made concrete"
            ),
        )
        for where, text in UNUSABLE
    ],
)
@pytest.mark.integration
def test_quoted_command_runs_as_written(command):
    error = check(command)
    assert error is None, (
        f"`{command.text}` (quoted at {', '.join(command.where)}, checked "
        f"as {command.kind}) fails: {error}"
    )


@pytest.mark.parametrize(
    "control,command",
    zip(NEGATIVE_CONTROLS, CONTROL_COMMANDS),
    ids=[c.text for c in NEGATIVE_CONTROLS],
)
@pytest.mark.integration
def test_broken_command_is_caught(control, command):
    error = check(command)
    assert error is not None, f"`{control.text}` passed its check"
    assert control.expect in error, error


@pytest.mark.integration
@pytest.mark.parametrize("command", POSITIVE_COMMANDS, ids=POSITIVE_CONTROLS)
def test_right_command_passes(command):
    assert check(command) is None


@pytest.mark.integration
def test_stubbed_parse_agrees_with_a_real_start():
    """The real `python -m` start rejects the misspelt flag the check rejects, naming it."""
    process = _child([sys.executable, "-m", "pipelines.train", "--preset=smoke", "--no_such_flag"])
    assert process.returncode != 0
    assert "error: unknown flag --no_such_flag." in process.stderr, process.stderr[-2000:]


def test_readme_keeps_the_project_rule():
    """README.md: at most 150 lines; its first code block is exactly `make demo`, `make test`."""
    readme = ROOT / "README.md"
    lines = readme.read_text().split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"
    _, blocks = quotes_in(readme)
    assert blocks, "README.md has no code block"
    commands = [" ".join(shlex.split(line, comments=True)) for line in blocks[0][2]]
    assert [c for c in commands if c] == ["make demo", "make test"], blocks[0][2]
