r"""The data phases on one thread and on every core: the day store of a preset's event log
built (the log read, its vocabularies counted, its events encoded and written), and a
synthetic log's events drawn, each at TFRS_LOGQ_DATA_THREADS=1 and at --threads, in one
process each, alternately; the seconds, their ratio, and whether the outputs are the same
bytes (they must be).

  python -m benchmarks.data_threads --preset=industrial --output=docs/results/data_threads_cpu.json

The preset's log is drawn first if it is not in $TFRS_LOGQ_CACHE (not timed); the stores are
built under a temporary directory, removed.
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app
from absl import flags

from benchmarks import records
from pipelines import provenance

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "industrial", "The preset whose event log's day store is built.")
flags.DEFINE_integer("threads", 0, "Threads of the second run (0: the cores).", lower_bound=0)
flags.DEFINE_integer("draw_items", 300_000, "Items (and users) of the synthetic log drawn.")
flags.DEFINE_integer("rounds", 1, "Runs per thread count.", lower_bound=1)
flags.DEFINE_string("output", "", "Write the record here (JSON).")

_STORE = """
import hashlib, json, os, sys, time
from pipelines import configs
from pipelines.data import logs
config = configs.PRESETS[sys.argv[1]].replace(framework="keras", index="exact")
run = sys.argv[2]
started = time.time()
directory = logs.ensure_day_store(config, run)[0]
seconds = time.time() - started
digest = hashlib.sha256()
for root, _, names in sorted(os.walk(directory)):
    for name in sorted(names):
        if name != "manifest.json":
            with open(os.path.join(root, name), "rb") as f:
                digest.update(name.encode() + f.read())
print(json.dumps(dict(seconds=seconds, digest=digest.hexdigest())))
"""

_DRAW = """
import hashlib, json, sys, time
from pipelines.data import web_synthetic
size = int(sys.argv[1])
catalog = web_synthetic.make_catalog(size, size, 14, seed=0)
started = time.time()
events = web_synthetic.draw_events(catalog, 20.0, seed=0)
seconds = time.time() - started
digest = hashlib.sha256(b"".join(events[k].tobytes() for k in ("user", "item", "time")))
print(json.dumps(dict(seconds=seconds, digest=digest.hexdigest(), events=len(events["user"]))))
"""


def _run(code, args, threads):
    env = dict(os.environ, TFRS_LOGQ_DATA_THREADS=str(threads))
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    from pipelines.data import events  # pylint: disable=import-outside-toplevel

    many = FLAGS.threads or events.workers()
    work = tempfile.mkdtemp(prefix="data-threads-")
    _run(_STORE, [FLAGS.preset, os.path.join(work, "warm")], 1)  # The log drawn if missing.
    phases = {"store": {}, "draw": {}}
    for round_ in range(FLAGS.rounds):
        for threads in (1, many):
            run = os.path.join(work, f"run-{round_}-{threads}")
            for phase, code, args in (
                ("store", _STORE, [FLAGS.preset, run]),
                ("draw", _DRAW, [str(FLAGS.draw_items)]),
            ):
                result = _run(code, args, threads)
                phases[phase].setdefault(str(threads), []).append(result)
                print(f"{phase}, {threads} thread(s): {result['seconds']:.1f} s", flush=True)
    record = dict(
        benchmark="data_threads",
        revision=provenance.revision(),
        preset=FLAGS.preset,
        draw_items=FLAGS.draw_items,
        cpus=os.cpu_count(),
        threads=many,
        phases={},
    )
    for phase, by_threads in phases.items():
        seconds = {t: min(r["seconds"] for r in runs) for t, runs in by_threads.items()}
        digests = {r["digest"] for runs in by_threads.values() for r in runs}
        record["phases"][phase] = dict(
            seconds={t: round(s, 1) for t, s in seconds.items()},
            one_over_many=round(seconds["1"] / seconds[str(many)], 2),
            same_bytes=len(digests) == 1,
        )
        print(
            f"{phase}: 1 thread {seconds['1']:.1f} s, {many} threads {seconds[str(many)]:.1f} s "
            f"({seconds['1'] / seconds[str(many)]:.2f}x), same bytes: {len(digests) == 1}"
        )
    if FLAGS.output:
        records.write(FLAGS.output, record)
    import shutil  # pylint: disable=import-outside-toplevel

    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(p["same_bytes"] for p in record["phases"].values()) else 1


if __name__ == "__main__":
    app.run(main)
