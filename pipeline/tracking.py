"""MLflow tracking: one experiment per task, one run per (task, mechanism).

The training stage opens the run and records its id next to the checkpoint (``run.json``); the
evaluation stage reopens the same run, so one run holds params, learning curves, metrics and
plots. Metrics are logged from the same dict that is written to ``metrics.json`` (DVC), so
the two never disagree. Default store: ``sqlite:///<repo>/mlflow.db``; ``MLFLOW_TRACKING_URI``
overrides it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

from pipeline.params import REPO_ROOT


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{REPO_ROOT / 'mlflow.db'}"


def _mlflow():
    import mlflow  # imported lazily: ~2 s, and only stages that track need it

    mlflow.set_tracking_uri(tracking_uri())
    return mlflow


def flatten(d: dict, prefix: str = "", sep: str = ".") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key, sep))
        else:
            out[key] = v
    return out


def metric_name(key: str) -> str:
    """MLflow allows letters, digits, _ - . / and spaces: 'x->xx' becomes 'x_to_xx'."""
    return re.sub(r"[^0-9A-Za-z_\-./ ]", "_", key.replace("->", "_to_"))


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def provenance_tags(manifests: dict[str, dict] | None = None) -> dict[str, str]:
    """git commit, dvc.lock hash and the data manifests' content hashes."""
    tags = {"git_commit": git_commit(), "dvc_lock_sha256": file_sha256(REPO_ROOT / "dvc.lock")}
    for split, manifest in (manifests or {}).items():
        tags[f"data.{split}.content_sha256"] = str(manifest.get("content_sha256", "?"))
    return tags


class RunLogger:
    """A thin handle on one MLflow run (created, or reopened from its id)."""

    def __init__(self, experiment: str, run_name: str, run_id: str | None = None, tags: dict | None = None):
        self.mlflow = _mlflow()
        self.mlflow.set_experiment(experiment)
        if run_id is not None and self._exists(run_id):
            self.run = self.mlflow.start_run(run_id=run_id)
        else:
            self.run = self.mlflow.start_run(run_name=run_name)
        if tags:
            self.mlflow.set_tags(tags)

    def _exists(self, run_id: str) -> bool:
        try:
            self.mlflow.get_run(run_id)
            return True
        except Exception:  # noqa: BLE001 - a run from another tracking store: start a new one
            return False

    @property
    def run_id(self) -> str:
        return self.run.info.run_id

    def params(self, params: dict) -> None:
        flat = {k: json.dumps(v) if isinstance(v, (list, tuple)) else v for k, v in flatten(params).items()}
        self.mlflow.log_params(flat)

    def metrics(self, metrics: dict, step: int | None = None, prefix: str = "") -> None:
        flat = {metric_name(k): float(v) for k, v in flatten(metrics, prefix).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.mlflow.log_metrics(flat, step=step)

    def artifact(self, path: Path, subdir: str | None = None) -> None:
        self.mlflow.log_artifact(str(path), artifact_path=subdir)

    def close(self, status: str = "FINISHED") -> None:
        self.mlflow.end_run(status=status)

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("FAILED" if exc_type else "FINISHED")
