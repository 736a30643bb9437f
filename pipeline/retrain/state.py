"""What a task's retraining keeps under ``data/retrain/<task>/``.

* **the frozen test set** (:func:`freeze_test`): the champion's version carries
  ``retrain.frozen_test_sha256`` (the test split's manifest ``content_sha256`` when it was
  promoted) and a copy of that split lives in ``frozen_test/<hash[:16]>``, written whole or not at
  all (:func:`pipeline.io.files.copy_dir_atomic`) and checked byte for byte against its manifest
  before each use (:func:`pipeline.io.shards.verify_split`). With no pinned champion, the current
  test split is frozen; a pinned copy that is gone is re-made only from a split with the same
  content, else an error (never a silent switch of test set).
* **the decision log**: :func:`append_decision` appends one JSON line to ``decisions.jsonl``,
  rewriting the file atomically so a reader never sees half a line.
* **the lock**: :func:`run_lock` (``fcntl``) lets one run per task at a time hold the directory.
"""

from __future__ import annotations

import fcntl
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pipeline.config.paths import TaskPaths
from pipeline.io.files import copy_dir_atomic, write_text_atomic
from pipeline.io.shards import read_manifest, verify_split


def freeze_test(root: Path, task_name: str, split: str, pinned_sha: str | None) -> dict:
    """The test data both models are scored on: ``{'dir', 'content_sha256', 'rows'}``.

    ``pinned_sha`` (the champion's): its copy under data/retrain/<task>/frozen_test/, re-copied from
    the current split if that still has the same content; else an error (never a silent switch).
    None: the current split is copied there (kept if an identical copy exists).
    """
    current = TaskPaths(task_name, root).split(split)
    frozen_root = root / "data" / "retrain" / task_name / "frozen_test"
    if pinned_sha is None:
        pinned_sha = verify_split(current)["content_sha256"]
    target = frozen_root / pinned_sha[:16]
    if not target.exists():
        if not current.exists() or read_manifest(current)["content_sha256"] != pinned_sha:
            raise FileNotFoundError(
                f"the champion was scored on {split} data with content_sha256 {pinned_sha}, but its frozen copy "
                f"{target} is missing and {current} holds other data; restore the copy, or set "
                f"retrain.frozen_test: current to score both models on today's {split} split"
            )
        copy_dir_atomic(current, target)
    manifest = verify_split(target, pinned_sha)
    return {"dir": target, "content_sha256": pinned_sha, "rows": manifest["rows"]}


def append_decision(path: Path, record: dict) -> None:
    """Append one JSON line; the file is rewritten atomically (old lines + the new one), under a lock
    of its own, so a run that is turned away (another holds the run lock) can still record it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / ".decisions.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held for one read-and-rename only
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        write_text_atomic(path, old + json.dumps(record, sort_keys=True, ensure_ascii=False, default=str) + "\n")


class RunInProgress(RuntimeError):
    """Another retrain run of the task holds its lock."""


@contextmanager
def run_lock(state_dir: Path) -> Iterator[None]:
    """One retrain run per task at a time (a served schedule and a manual run may overlap);
    RunInProgress when another run holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunInProgress(f"another retrain run holds {state_dir / '.lock'}; this one did nothing") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def new_stamp() -> str:
    """A run's directory name: UTC time plus a random suffix (``20250105T030000Z-1a2b3c``)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def now_iso() -> str:
    """The UTC time now, ISO 8601 to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")
