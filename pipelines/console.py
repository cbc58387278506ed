"""What a person meets at the command line: usage errors as one line, and native log lines
quiet unless `--verbose`.

`run(main)` is `absl.app.run(main)` for the jobs: a flag that does not parse, or a usage error
the job raises (`app.UsageError`: a config the flags describe refused), is printed as one line,
`error: ...`, naming the flag and the value received (with "did you mean ..." where the flag
takes one of a few values), and the job exits with status 1; absl would print the job's whole
`--help` first. Every job gets `--verbose`: without it, the C++ log lines below WARNING or
ERROR (as TF_CPP_MIN_LOG_LEVEL says: the jobs set 2) of ScaNN's index build and of
TensorFlow's own Abseil logging are dropped, which no environment variable does (ScaNN logs
through Abseil's C++ logging, which reads none). With `tfrs-logq JOB --verbose`, TensorFlow's
start-up lines (oneDNN, the CPU features, CUDA) show too.

Imports no TensorFlow (`tfrs-logq --help` runs without it).
"""

import ctypes
import difflib
import functools
import os
import re
import sys
from typing import Callable, Iterable, List, Optional, Sequence

from absl import app
from absl import flags

FLAGS = flags.FLAGS
# absl's own, kept: `pipelines.cli` routes a job's `app.run` calls here.
_ABSL_RUN = app.run

# How the job is invoked, for the hint that names `--help` (`pipelines.cli` sets
# "tfrs-logq JOB"); None: `python -m MODULE`.
PROG: Optional[str] = None

VERBOSE_HELP = (
    "Show the native log lines the jobs hide: TensorFlow's INFO and WARNING lines (oneDNN, "
    "the CPU's features, CUDA; with `tfrs-logq JOB --verbose`, those of its start too) and "
    "ScaNN's index-build lines."
)

# Abseil's C++ `absl::SetMinLogLevel(absl::LogSeverityAtLeast)` in the Abseil that scann
# 1.4.2's libraries and TensorFlow 2.20's framework (which ScaNN's TensorFlow ops log
# through) export; a library without it is left as it is.
_SET_MIN_LOG_LEVEL = "_ZN4absl12lts_2025012714SetMinLogLevelENS0_18LogSeverityAtLeastE"
_NATIVE_LOGGERS = ("/scann/", "libtensorflow_framework.so")


def prog() -> str:
    """The job's command: `PROG`, else `python -m MODULE` (the `__main__` module's)."""
    if PROG:
        return PROG
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return f"python -m {spec.name}" if spec is not None else os.path.basename(sys.argv[0])


def verbose_in(argv: Sequence[str]) -> bool:
    """Whether `argv` (a job's flags) asks for `--verbose`, before its flags are parsed;
    the arguments after `--` (compare's training flags) are not its own."""
    verbose = False
    for arg in argv:
        if arg == "--":
            break
        if arg in ("--verbose", "-verbose") or re.fullmatch(r"--?verbose=(true|1)", arg, re.I):
            verbose = True
        elif arg in ("--noverbose", "-noverbose") or re.fullmatch(
            r"--?verbose=(false|0)", arg, re.I
        ):
            verbose = False
    return verbose


def show_native_logs() -> None:
    """TensorFlow's native INFO lines from its start on (`--verbose`; before it is imported)."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    os.environ["GLOG_minloglevel"] = "0"


def _loaded_libraries() -> List[str]:
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:  # Not Linux.
        return []
    return sorted(p for p in paths if any(name in p for name in _NATIVE_LOGGERS))


def quiet_native_logs(level: Optional[int] = None) -> List[str]:
    """Sets Abseil's C++ minimum log level in ScaNN's loaded libraries and TensorFlow's
    framework to `level` (0 INFO, 1 WARNING, 2 ERROR; None: TF_CPP_MIN_LOG_LEVEL's, 0 unset),
    so that ScaNN's index build ("Could not normalize centroid ...", "PartitionerFactory ran
    in ...") says what TensorFlow would. Returns the libraries set."""
    if level is None:
        try:
            level = int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
        except ValueError:
            level = 0
    level = min(max(level, 0), 3)
    done = []
    for path in _loaded_libraries():
        try:  # The library already loaded; never load one here.
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            setter = getattr(library, _SET_MIN_LOG_LEVEL)
        except (OSError, AttributeError):
            continue
        setter.argtypes, setter.restype = [ctypes.c_int], None
        setter(level)
        done.append(path)
    return done


def did_you_mean(value: str, choices: Iterable[str], flag: str = "") -> str:
    """' Did you mean --FLAG=X?' (or ' Did you mean X?' without `flag`) for the choice
    closest to `value` (difflib), else ''."""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    if not close:
        return ""
    return f" Did you mean {f'--{flag}=' if flag else ''}{close[0]}?"


_ONE_OF = re.compile(
    r"--(?P<name>\w+) must be one of (?P<choices>[^;]+); "
    r"received --(?P=name)=(?:'(?P<quoted>[^']*)'|(?P<plain>[^ ]+?))\.?$"
)


def usage_line(message: str) -> str:
    """A usage error's message, with "Did you mean --NAME=CHOICE?" where it refuses a value
    outside a list of choices ("--NAME must be one of A, B; received --NAME='X'.")."""
    found = _ONE_OF.search(message)
    if found:
        value = found["quoted"] if found["quoted"] is not None else found["plain"]
        choices = [c.strip() for c in found["choices"].split(",")]
        return message + did_you_mean(value, choices, found["name"])
    return message


def _train_flag(name: str) -> bool:
    """Whether --NAME (or --noNAME) is one of `tfrs-logq train`'s flags."""
    from pipelines import train_flags  # pylint: disable=import-outside-toplevel

    values = flags.FlagValues()
    train_flags.define_flags(values)
    return name in values or (name.startswith("no") and name[2:] in values)


def flag_error_line(error: flags.Error, flag_values: flags.FlagValues = FLAGS) -> str:
    """One line for a flag that does not parse: the flag, the value received, and for an
    unknown flag the closest known one (and, to compare, that training flags go after --)."""
    if isinstance(error, flags.UnrecognizedFlagError):
        name = error.flagname
        given = error.flagvalue or f"--{name}"  # The argument as given.
        if prog().endswith("compare") and _train_flag(name):
            return (
                f"{given} is a flag of `train`, not of compare: give the flags every run "
                f"trains with after `--` ({prog()} --output_dir=... --corrections=... -- "
                f"{given})."
            )
        names = [*flag_values]
        names += [f"no{n}" for n in flag_values if flag_values[n].boolean]
        hint = did_you_mean(name, names).replace("mean ", "mean --")
        return f"unknown flag {given}.{hint} `{prog()} --help` lists the flags."
    found = re.match(r"flag --(?P<name>[^=]+)=(?P<value>.*?): (?P<why>.*)$", str(error), re.S)
    if not found or found["name"] not in flag_values:
        return str(error).replace("\n", " ")
    name, value = found["name"], found["value"]
    parser = flag_values[name].parser
    choices = getattr(parser, "enum_values", None)
    if choices:
        return (
            f"--{name} must be one of {', '.join(choices)}; received --{name}={value!r}."
            + did_you_mean(value, choices, name)
        )
    kind = parser.syntactic_help or parser.flag_type()
    if flag_values[name].boolean:
        kind = f"true or false (or --{name} / --no{name})"
    return f"--{name} must be {kind}; received --{name}={value}."


def _fail(line: str, code: int = 1) -> None:
    sys.stderr.write(f"error: {line}\n")
    sys.stderr.flush()
    sys.exit(code)


def define_verbose_flag(flag_values: flags.FlagValues = FLAGS) -> None:
    """`--verbose` (`VERBOSE_HELP`), listed by the job's `--help`; defined once."""
    if "verbose" not in flag_values:
        flags.DEFINE_bool(
            "verbose", False, VERBOSE_HELP, flag_values=flag_values, module_name=sys.argv[0]
        )


def run(main: Callable[[List[str]], Optional[int]]) -> None:
    """`absl.app.run(main)`, with --verbose, one-line usage errors and quiet native logs."""
    define_verbose_flag()

    def parse(argv: List[str]) -> List[str]:
        try:
            return FLAGS(argv)
        except flags.Error as error:
            _fail(flag_error_line(error))
            raise  # Unreached: _fail exits.

    @functools.wraps(main)
    def checked(argv: List[str]) -> Optional[int]:
        if not FLAGS.verbose:
            quiet_native_logs()
        try:
            return main(argv)
        except app.UsageError as error:
            _fail(usage_line(str(error)), error.exitcode)
            raise  # Unreached.

    _ABSL_RUN(checked, flags_parser=parse)
