"""The command-line jobs' named errors: a data, run, memory or configuration error the
message explains is printed as one line, `error: ...`, with no traceback; `--debug` shows
the traceback too. Anything else (a bug) keeps its traceback."""

import contextlib
import sys
from typing import Iterator, Tuple, Type

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
    """The error types a job reports as one line."""
    # pylint: disable=import-outside-toplevel  (callbacks and export import TensorFlow)
    from pipelines import callbacks
    from pipelines import run_files
    from pipelines.data.interactions import DataError
    from tfrs_logq.export import ScannOpsUnavailable

    return (
        DataError,
        FileNotFoundError,  # A data file the loaders name (MovieLens, Steam).
        RunNotFound,
        MemoryBudgetError,
        run_files.RunInUse,
        run_files.OutputDirError,
        callbacks.BackupError,
        callbacks.NonFiniteLoss,
        ScannOpsUnavailable,
    )


@contextlib.contextmanager
def reported(flag_values: flags.FlagValues = flags.FLAGS) -> Iterator[None]:
    """Exits with `error: MESSAGE` (status 1) on a `named` error, unless --debug."""
    try:
        yield
    except named() as error:
        if "debug" in flag_values and flag_values["debug"].value:
            raise
        sys.exit(f"error: {error}")
