"""What code a record was made with (no TensorFlow imported: the Keras 3 examples and
benchmarks run on machines without it): the commit, "+dirty" and the diff's hash from a tree
with uncommitted changes, and whether a record's commit is in this repository."""

import hashlib
import os
import subprocess
from typing import Dict, Optional, Tuple

# A copy of the tree without its .git (a lent GPU machine's) names its commit here, for the
# benchmarks' and examples' records (`revision`; a training run's `code_state` reads git).
REVISION_ENV = "GIT_REVISION"


def _git(*args: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, timeout=10
    ).stdout


def commit_exists(revision: str) -> Optional[bool]:
    """Whether the commit a record names (`git_revision`, "+dirty" or not) is in this
    checkout's repository; None outside a git checkout or for "unknown"."""
    commit = revision.split("+", 1)[0]
    if not commit or commit == "unknown":
        return None
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}")
    except subprocess.CalledProcessError:
        return False
    except (OSError, subprocess.SubprocessError):
        return None
    return True


def _head_and_dirty() -> Tuple[str, bool]:
    """(the commit HEAD names, whether tracked files hold uncommitted changes); raises
    OSError / SubprocessError outside a git checkout."""
    head = _git("rev-parse", "HEAD").strip()
    return head, bool(_git("status", "--porcelain", "--untracked-files=no").strip())


def code_state(diff_path: Optional[str] = None) -> Dict[str, str]:
    """What code a run ran: {"git_revision": the commit this code is at, "+dirty" when
    tracked files hold uncommitted changes ("unknown" outside a git checkout)} and, from a
    dirty tree, "code_diff_sha256", the SHA-256 of `git diff HEAD` (those changes), whose
    text is written to `diff_path` when given: a record from a dirty tree still names its
    code, the commit and the diff to apply to it."""
    try:
        revision_, dirty = _head_and_dirty()
        diff = _git("diff", "HEAD", "--binary") if dirty else ""
    except (OSError, subprocess.SubprocessError):
        return {"git_revision": "unknown"}
    if not diff:
        if diff_path and os.path.exists(diff_path):  # A dirty run's, resumed from clean code.
            os.remove(diff_path)
        return {"git_revision": revision_}
    if diff_path:
        with open(diff_path, "w", encoding="utf-8") as f:
            f.write(diff)
    return {
        "git_revision": revision_ + "+dirty",
        "code_diff_sha256": hashlib.sha256(diff.encode("utf-8")).hexdigest(),
    }


def revision() -> str:
    """The commit a benchmark's or an example's record names: $GIT_REVISION where set (a
    copy of the tree whose .git is missing or stale: `benchmarks/gpu.sh` sets it), else
    `code_state`'s "git_revision" without the diff ("+dirty" from a dirty tree; "unknown"
    outside a git checkout)."""
    if os.environ.get(REVISION_ENV):
        return os.environ[REVISION_ENV]
    try:
        head, dirty = _head_and_dirty()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")
