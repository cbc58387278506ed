"""`tfrs-logq JOB [FLAGS...]`: the pipelines' jobs behind one command.

Each job is also `python -m pipelines.JOB` with the same flags; `tfrs-logq JOB --help`
lists a job's flags, `tfrs-logq --help` the jobs and the presets.

  tfrs-logq train --preset=synthetic --output_dir=runs/demo
  tfrs-logq train --framework=keras --preset=industrial --output_dir=runs/keras
  tfrs-logq evaluate runs/demo --index=scann
  tfrs-logq export runs/demo --index=exact
  tfrs-logq compare --output_dir=runs/cmp --corrections=standard,improved -- --preset=industrial
  tfrs-logq cluster --workers=2 --ps=2 -- tfrs-logq train --strategy=parameter_server ...
"""

import os
import runpy
import sys
from types import ModuleType
from typing import List, NamedTuple, Optional

PROG = "tfrs-logq"


class Job(NamedTuple):
    module: str  # Its module: `python -m MODULE` runs it too.
    summary: str


JOBS = {
    "train": Job("pipelines.train", "Train a preset (data -> fit -> test evaluation -> export)."),
    "evaluate": Job(
        "pipelines.evaluate",
        "Re-evaluate a run from its checkpoint; --against compares two runs query by query.",
    ),
    "export": Job("pipelines.export", "Export a run as SavedModels (exact search and ScaNN)."),
    "compare": Job(
        "pipelines.compare",
        "Train rows (corrections, any flags) x seeds on one dataset; report which is better.",
    ),
    "cluster": Job(
        "pipelines.cluster",
        "Run a command as a local cluster (a chief, workers and parameter servers).",
    ),
}


def usage() -> str:
    """The text of `tfrs-logq --help`: the jobs, then the presets of `train --preset`."""
    configs: Optional[ModuleType]
    try:
        from pipelines import configs  # pylint: disable=import-outside-toplevel  (TensorFlow)
    except ModuleNotFoundError as error:  # `pip install tfrs_logq` alone: no TensorFlow.
        configs, missing = None, error.name
    width = max(map(len, [*JOBS, *(configs.PRESETS if configs else ())]))
    lines = [
        f"usage: {PROG} JOB [FLAGS...]   ({PROG} JOB --help: the job's flags)",
        "",
        "jobs:",
    ]
    lines += [f"  {name:<{width}}  {job.summary}" for name, job in JOBS.items()]
    if configs is None:
        lines += [
            "",
            f"The jobs need the pipelines' dependencies ({missing!r} is missing): "
            'pip install "tfrs_logq[pipelines]".',
        ]
        return "\n".join(lines)
    lines += [
        "",
        f"presets ({PROG} train --preset=NAME; any field can be overridden by its "
        "flag or --config_file):",
    ]
    lines += [f"  {name:<{width}}  {configs.PRESET_SUMMARIES[name]}" for name in configs.PRESETS]
    return "\n".join(lines)


def framework_in(args: List[str]) -> Optional[str]:
    """The value of the last --framework among `args` (absl's two spellings), or None."""
    value = None
    for position, arg in enumerate(args):
        if arg.startswith("--framework="):
            value = arg.split("=", 1)[1]
        elif arg == "--framework" and position + 1 < len(args):
            value = args[position + 1]
    return value


# The evaluate and export flags that take a value, which absl also reads from the next argument
# (`--against OTHER`): that argument is not the run directory.
VALUE_FLAGS = ("split", "index", "against", "output_json", "per_query_out", "k", "framework")


def run_framework(args: List[str]) -> Optional[str]:
    """The framework that trained the run an `evaluate` or `export` command names: that of
    its run directory, the first argument that is not a flag or a flag's value
    (`run_files.framework_of`), or None."""
    from pipelines import run_files  # pylint: disable=import-outside-toplevel

    previous = ""
    for arg in args:
        value_of_flag = previous.startswith("-") and previous.lstrip("-") in VALUE_FLAGS
        previous = arg
        if arg.startswith("-") or value_of_flag:
            continue
        if os.path.isfile(os.path.join(arg, "config.json")):
            return run_files.framework_of(arg)
    return None


def module_of(name: str, args: List[str]) -> str:
    """The module that runs job `name` on `args`: the Keras job's train (--framework=keras),
    the Keras run's evaluation (unless --framework=tf) and export, else the job's own."""
    if name == "train" and framework_in(args) == "keras":  # Keras 3: no TensorFlow.
        return "pipelines.keras_train"
    if name in ("evaluate", "export") and run_framework(args) == "keras":
        if name == "export":  # Its Keras export, then the SavedModels in a TF process.
            return "pipelines.keras_export"
        if framework_in(args) != "tf":
            return "pipelines.keras_evaluate"
    return JOBS[name].module


def main(argv: Optional[List[str]] = None) -> int:
    """Runs `tfrs-logq JOB FLAGS...` (argv without the program's name; None: sys.argv[1:])."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in JOBS:
        print(
            f"{PROG}: unknown job {name!r}; the jobs are {', '.join(JOBS)} "
            f"(`{PROG} --help` lists them).",
            file=sys.stderr,
        )
        return 2
    if name == "cluster":  # argparse, not absl.
        from pipelines import cluster  # pylint: disable=import-outside-toplevel

        return cluster.main(rest, prog=f"{PROG} cluster")
    # As `python -m` runs it: absl files the job's flags under sys.argv[0], which its --help
    # lists; the job exits with its status. A bad flag is one line (`console.run`).
    sys.argv = [f"{PROG} {name}", *rest]
    try:
        from pipelines import console  # pylint: disable=import-outside-toplevel  (absl)

        console.PROG = f"{PROG} {name}"
        if console.verbose_in(rest):  # Before the job imports TensorFlow.
            console.show_native_logs()
        runpy.run_module(module_of(name, rest), run_name="__main__", alter_sys=True)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] in ("pipelines", "tfrs_logq"):
            raise
        print(
            f"{PROG} {name} needs the pipelines' dependencies, which lack {error.name!r}: "
            'pip install "tfrs_logq[pipelines]".',
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
