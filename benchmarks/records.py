"""A benchmark's JSON record, written whole (no TensorFlow imported: the Keras 3 benchmarks
run on machines without it). The commit a record names: `pipelines.provenance.revision`."""

from pipelines.run_files import write_json


def write(path: str, record: dict, quiet: bool = False) -> None:
    """Writes a benchmark's `record` as JSON to `path` (--output), whole or not at all
    (`pipelines.run_files.write_json`), and says so unless `quiet`."""
    write_json(path, record)
    if not quiet:
        print(f"Wrote {path}")
