"""What a benchmark's JSON record says of the code that ran it (no TensorFlow imported: the
Keras 3 benchmarks run on machines without it)."""

import os
import subprocess


def revision() -> str:
    """The commit this clone is at, "+dirty" when tracked files hold uncommitted changes;
    $GIT_REVISION where set (a copy of the tree without .git, on a lent GPU machine);
    "unknown" otherwise."""
    if os.environ.get("GIT_REVISION"):
        return os.environ["GIT_REVISION"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def write(path: str, record: dict, quiet: bool = False) -> None:
    """Writes a benchmark's `record` as JSON to `path` (--output), whole or not at all (a
    temporary file renamed over it), and says so unless `quiet`."""
    import json  # pylint: disable=import-outside-toplevel

    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    if not quiet:
        print(f"Wrote {path}")
