"""How `tfrs-logq compare` runs its children, with tiny fake ones in place of
`pipelines.train`: lines in run order, the child's progress relayed, a failure named, and
Ctrl-C stopping the child and whatever it started within seconds, with the command that
resumes and no traceback."""

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from pipelines import compare

# A child that prints what Keras's progress bar prints on a terminal (redraws after "\b" and
# "\r", the epoch's last one ending its line).
PROGRESS_CHILD = textwrap.dedent(
    r"""
    import sys, time
    print("Epoch 1/2", flush=True)
    for step in range(1, 11):
        sys.stdout.write("\b" * 40 + f"\r{step:2d}/10 [{'=' * step}>] - ETA: {10 - step}s"
                         f" - loss: {1 / step:.4f}")
        sys.stdout.flush()
        time.sleep(0.08)
    print(flush=True)
    print("done", flush=True)
    """
)


def _runs(commands, directory):
    rows = [compare.Row(f"r{i}", (("correction", f"c{i}"),)) for i in range(len(commands))]
    return [
        compare.Run(
            row,
            0,
            os.path.join(directory, row.name),
            os.path.join(directory, f"{row.name}.json"),
            command,
        )
        for row, command in zip(rows, commands)
    ]


def test_lines_in_run_order_and_progress_relayed():
    directory = tempfile.mkdtemp()
    runs = _runs(
        [[sys.executable, "-c", PROGRESS_CHILD], [sys.executable, "-c", "import sys; sys.exit(3)"]],
        directory,
    )
    printed = io.StringIO()

    def finish(run, number, seconds, error):
        print(f"finished {number} {run.row.name}: {error}")

    with contextlib.redirect_stdout(printed):
        compare.train_runs(runs, [None], finish, progress_seconds=0.3)
    lines = printed.getvalue().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("[") and " -c " in line]
    ends = [i for i, line in enumerate(lines) if line.startswith("finished")]
    assert len(starts) == 2 and len(ends) == 2, lines
    assert starts[0] < ends[0] < starts[1] < ends[1], lines  # One run's lines, then the next.
    progress = [line for line in lines[starts[0] : ends[0]] if "step " in line]
    assert progress, lines
    assert any(
        line.startswith("[1/2] r0 seed 0: epoch 1/2, step ")
        and ", loss " in line
        and ", ETA " in line
        for line in progress
    ), progress
    assert lines[ends[0]] == "finished 1 r0: None"
    assert lines[ends[1]].startswith("finished 2 r1: ")
    assert lines[ends[1]].endswith(f"exited with 3; see {directory}/r1/train.log."), lines
    with open(os.path.join(directory, "r0", "train.log")) as f:
        log = f.read().splitlines()
    # The log keeps whole lines: the bar's last state, not its redraws.
    assert log[-3:] == ["Epoch 1/2", "10/10 [==========>] - ETA: 0s - loss: 0.1000", "done"], log
    assert os.path.exists(os.path.join(directory, "r0", "wall_seconds.json"))
    assert compare.progress_text("garbage") == "garbage"
    # Keras's own line (tf_keras 2, pipelines.train on a terminal): the loss after other logs.
    keras = " 12/110 [=>....] - ETA: 8s - mean_p_hat: 0.0127 - loss: 4.8439 - total_loss: 4.8439"
    assert compare.progress_text(keras, "1/3") == "epoch 1/3, step 12/110, loss 4.8439, ETA 8s"


INTERRUPTED = textwrap.dedent(
    """
    import sys
    from pipelines import compare
    from tests.pipelines.test_compare_children import _runs

    directory, child = sys.argv[1], sys.argv[2]
    runs = _runs([[sys.executable, "-c", child, directory]], directory)
    with compare.resumable("tfrs-logq compare --output_dir=x --corrections=a,b"):
        compare.train_runs(runs, [None], lambda *args: print("finished", args))
    """
)

# A child that starts a grandchild, writes both pids, and trains for a minute.
SLOW_CHILD = textwrap.dedent(
    """
    import os, subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(os.path.join(sys.argv[1], "pids"), "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}")
    time.sleep(60)
    """
)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # A zombie has ended.
    except FileNotFoundError:
        return False


def _compare_with_a_slow_run():
    """(a compare process training SLOW_CHILD, the run's pid, its child's pid), once the
    run has started."""
    directory = tempfile.mkdtemp()
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    parent = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, directory, SLOW_CHILD],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids_file = os.path.join(directory, "pids")
    deadline = time.time() + 60
    while not os.path.exists(pids_file) or not open(pids_file).read():
        assert parent.poll() is None, parent.communicate()
        assert time.time() < deadline, "the child never started"
        time.sleep(0.05)
    child, grandchild = map(int, open(pids_file).read().split())
    return parent, child, grandchild


def _ended(*pids, seconds=5):
    deadline = time.time() + seconds
    while any(_alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.05)
    return not any(_alive(pid) for pid in pids)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_stops_the_child_and_its_group_and_says_how_to_resume(stop):
    # SIGTERM (a kill) and SIGHUP (a closed terminal) as Ctrl-C: the runs, in sessions of
    # their own, would not hear them and die at their next write to compare's terminal.
    parent, child, grandchild = _compare_with_a_slow_run()
    interrupted = time.time()
    parent.send_signal(stop)
    out, err = parent.communicate(timeout=30)
    took = time.time() - interrupted
    assert parent.returncode == 130, (out, err)
    assert took < compare.STOP_SECONDS + 5, took
    assert "Traceback" not in err, err
    assert "compare: stopped r0 seed 0 (its process group signalled)" in err, err
    assert (
        "the same command resumes the rest:\n  tfrs-logq compare --output_dir=x "
        "--corrections=a,b" in err
    ), err
    assert "finished" not in out
    assert _ended(child, grandchild)


def test_a_killed_compare_takes_its_run_with_it():
    # SIGKILL leaves compare no handler: the run gets SIGINT from the kernel
    # (PR_SET_PDEATHSIG) instead of training on, unseen, into a terminal nobody reads.
    parent, child, grandchild = _compare_with_a_slow_run()
    parent.kill()
    parent.communicate()
    try:
        assert _ended(child, seconds=10)
    finally:  # The run's own child is the run's to stop (the training job's are threads).
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, signal.SIGKILL)
