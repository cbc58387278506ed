"""The campaigns' runs (`paper.plan.Run`) trained by `pipelines.schedule`: one
`pipelines.train` process each, several at once with each pinned to its own share of the
CPUs. `pipelines.compare` schedules with the same."""

from typing import Iterator, List, Optional, Sequence, Tuple

from paper.plan import Run
from paper.plan import command
from paper.plan import label
from pipelines import schedule
from pipelines.schedule import cpu_slots

__all__ = ["cpu_slots", "execute", "run_all"]


def _job(run: Run) -> schedule.Job:
    return schedule.Job(label(run), command(run), run.directory)


def execute(run: Run, cpus: Optional[Sequence[int]] = None) -> float:
    """Runs `run` as a pipelines.train process (its output in OUTPUT/train.log); wall seconds."""
    return schedule.execute(_job(run), cpus)


def run_all(
    pending: Sequence[Run], slots: Sequence[Optional[List[int]]]
) -> Iterator[Tuple[int, Run, float]]:
    """Trains `pending` in order, len(slots) at a time (`pipelines.schedule.run_all`); yields
    (number, run, wall seconds) as each finishes. A failed run raises and stops the others
    from starting; running ones finish."""
    for done in schedule.run_all([_job(run) for run in pending], slots):
        yield done.number, pending[done.number - 1], done.seconds
