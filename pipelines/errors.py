"""The command-line jobs' named errors: a data, run, memory or configuration error the
message explains is printed as one line, `error: ...`, with no traceback; `--debug` shows
the traceback too. Anything else (a bug) keeps its traceback."""

import contextlib
import sys
from typing import Iterator, List, Tuple, Type

from absl import flags

from pipelines.run_files import RunNotFound


class MemoryBudgetError(ValueError):
    """A run predicted to need more memory than it may use (`pipelines.memory`)."""


def define_debug_flag(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    flags.DEFINE_bool(
        "debug",
        False,
        "Show the traceback of a named error (bad data, a missing run, the memory budget) "
        "too; by default it is printed as one line.",
        flag_values=flag_values,
    )


def named() -> Tuple[Type[BaseException], ...]:
    """The error types a job reports as one line (those of TensorFlow's modules only where
    the job imported them: the Keras job runs without TensorFlow)."""
    # pylint: disable=import-outside-toplevel
    from pipelines import run_files
    from pipelines.data.interactions import DataError

    found: List[Type[BaseException]] = [
        DataError,
        FileNotFoundError,  # A data file the loaders name (MovieLens, Steam).
        RunNotFound,
        MemoryBudgetError,
        run_files.RunInUse,
        run_files.OutputDirError,
    ]
    for module, names in (
        ("pipelines.callbacks", ("BackupError", "NonFiniteLoss")),
        ("tfrs_logq.export", ("ScannOpsUnavailable",)),
    ):
        if module in sys.modules:  # Not imported: none of its errors was raised.
            found += [getattr(sys.modules[module], name) for name in names]
    return tuple(found)


@contextlib.contextmanager
def reported(flag_values: flags.FlagValues = flags.FLAGS) -> Iterator[None]:
    """Exits with `error: MESSAGE` (status 1) on a `named` error, unless --debug."""
    try:
        yield
    except named() as error:
        if "debug" in flag_values and flag_values["debug"].value:
            raise
        sys.exit(f"error: {error}")
