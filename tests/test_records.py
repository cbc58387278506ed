"""Every result record under docs/results names a commit that is in the repository
(CONTRIBUTING.md), so that anyone can check out the code that made it and run it again.

A record names its code in a field such as `git_revision` (a training run's `code_state`, the
campaigns' records), `git_revision_on_device` (a copy run on a lent machine) or `revision`,
at any depth of its JSON, as a commit ("+dirty" and what follows are left aside). Records
whose commit was lost were deleted; docs/results/industrial_claim/unreproducible/
(`paper.industrial_report.ARCHIVE_DIR`) lists which runs they were, with no numbers and no
revision field, and its list names a commit the repository lacks.
"""

import json
import os
import re
import subprocess
import unittest
from typing import Dict, Iterator, List, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
ARCHIVE = os.path.join(RESULTS, "industrial_claim", "unreproducible")
# The fields that name the code a record ran.
REVISION_FIELDS = ("git_revision", "git_revision_on_device", "revision")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def revisions(value: object) -> Iterator[Tuple[str, str]]:
    """(field, value) of every REVISION_FIELDS string in a JSON value, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in REVISION_FIELDS and isinstance(item, str):
                yield key, item
            else:
                yield from revisions(item)
    elif isinstance(value, list):
        for item in value:
            yield from revisions(item)


def records(under: str) -> Iterator[str]:
    """The JSON files under `under`, sorted."""
    for directory, folders, names in os.walk(under):
        folders.sort()
        for name in sorted(names):
            if name.endswith(".json"):
                yield os.path.join(directory, name)


def named_commits(paths: List[str]) -> Dict[str, List[str]]:
    """Each commit the records at `paths` name: the records (relative to docs/results) with
    the field; a value that is not a commit ("unknown") fails."""
    result: Dict[str, List[str]] = {}
    for path in paths:
        with open(path) as f:
            value = json.load(f)
        for field, revision in revisions(value):
            commit = revision.split("+", 1)[0]
            relative = os.path.relpath(path, RESULTS)
            if not COMMIT.match(commit):
                raise AssertionError(f"{relative}: {field} {revision!r} names no commit")
            result.setdefault(commit, []).append(f"{relative} ({field})")
    return result


def missing_commits(commits: Set[str]) -> Set[str]:
    """Those of `commits` that are not commits of this repository (`git cat-file -e
    SHA^{commit}`, asked of all at once with --batch-check)."""
    ordered = sorted(commits)
    answer = subprocess.run(
        ["git", "cat-file", "--batch-check=%(objecttype)"],
        cwd=ROOT,
        input="".join(f"{commit}^{{commit}}\n" for commit in ordered),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert len(answer) == len(ordered), answer
    return {commit for commit, kind in zip(ordered, answer) if kind != "commit"}


def full_clone() -> bool:
    """Whether the tree is a git checkout with its whole history (a shallow clone lacks old
    commits; an unpacked sdist has no .git)."""
    try:
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except OSError:
        return False
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


@unittest.skipUnless(full_clone(), "not a full git clone: old commits cannot be looked up")
class RecordsNameCommitsTest(unittest.TestCase):
    def test_every_record_names_a_commit_of_the_repository(self):
        paths = list(records(RESULTS))
        named = named_commits(paths)
        self.assertGreater(len(named), 10)  # The walk found the records.
        lost = missing_commits(set(named))
        self.assertEqual(
            {commit: named[commit] for commit in sorted(lost)},
            {},
            "records naming a commit not in the repository: re-run them at a commit of "
            "the repository, or delete them and list their runs in "
            f"{os.path.relpath(ARCHIVE, ROOT)}/index.json",
        )

    def test_the_archive_lists_runs_of_a_lost_commit_and_holds_no_record(self):
        self.assertEqual(sorted(os.listdir(ARCHIVE)), ["README.md", "index.json"])
        with open(os.path.join(ARCHIVE, "index.json")) as f:
            index = json.load(f)
        self.assertEqual(list(revisions(index)), [])  # It names no code: it is no record.
        self.assertEqual(missing_commits({index["lost_commit"]}), {index["lost_commit"]})
        self.assertEqual(len(index["runs"]), 53)

    def test_a_missing_commit_is_found(self):
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()
        absent = "0" * 40
        self.assertEqual(missing_commits({head, head[:7], absent}), {absent})

    def test_fields_are_found_at_any_depth(self):
        value = {
            "git_revision": "abc1234+dirty",
            "runs": [{"code_state": {"git_revision": "def5678"}}],
            "revision_note": "run at 0123456, a note",
            "device": {"git_revision_on_device": "9abcdef", "revision": "1234567"},
        }
        self.assertEqual(
            sorted(revisions(value)),
            [
                ("git_revision", "abc1234+dirty"),
                ("git_revision", "def5678"),
                ("git_revision_on_device", "9abcdef"),
                ("revision", "1234567"),
            ],
        )
