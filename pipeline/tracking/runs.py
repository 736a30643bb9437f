"""MLflow tracking: one experiment per task, a parent run per pipeline run, one child run per mechanism.

The training stage opens the mechanism's run and records its id next to the checkpoint
(``run.json``); the evaluation stage reopens the same run, so one run holds params, learning
curves, metrics, plots and the logged model. Metrics are logged from the same dict that is written
to ``metrics.json`` (DVC), so the two never disagree. Default store: ``sqlite:///<repo>/mlflow.db``;
``MLFLOW_TRACKING_URI`` overrides it.

Parent runs. ``dvc repro`` runs every stage in its own process, so no process can hold a parent
run open for the others. Each stage instead finds or creates the parent by a deterministic key
(:func:`pipeline_key`: a hash of the git commit, the task's effective params and the content
hashes of the task's data manifests) with :func:`parent_run`, and opens its own run as a child
(tag ``mlflow.parentRunId``, which the MLflow UI nests). Stages of one pipeline run on one task
compute the same key, whichever process; a change of code (commit), params or data gives a new
parent. The key leaves out ``dvc.lock``, which every finishing stage rewrites; its hashes are tags.

Provenance (:func:`provenance_tags`), on every run: ``git_commit``, ``dvc_lock_sha256`` (the whole
file when the run was opened), ``dvc.stage.<stage>`` (sha256 of that stage's ``dvc.lock`` entry, for
the task's stages: ``prepare/<task>``, ``vocab/<task>``, ``train/<task>-<mechanism>`` ...) and
``data.<split>.content_sha256`` of each manifest; params are logged as params. The splits a run read
are its MLflow dataset inputs (:meth:`RunLogger.datasets`, :mod:`pipeline.tracking.datasets`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

from pipeline.config.params import REPO_ROOT
from pipeline.config.tasks import effective_params
from pipeline.io.files import sha256_file
from pipeline.tracking.datasets import split_inputs


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


def git_commit(root: Path = REPO_ROOT) -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def file_sha256(path: Path) -> str:
    """The file's sha256, or "absent" (a dvc.lock not written yet)."""
    return sha256_file(path) if path.exists() else "absent"


def dvc_stage_hashes(task: str | None = None, mechanism: str | None = None, root: Path = REPO_ROOT) -> dict[str, str]:
    """``{"dvc.stage.<stage>": sha256 of the stage's dvc.lock entry}`` for the stages of ``task``
    (``<stage>@<task>`` and ``<stage>@<task>-<mechanism>``; only ``mechanism``'s when given) or
    for every stage when ``task`` is None. ``@`` becomes ``/`` (MLflow tag keys do not allow it).
    Empty when there is no dvc.lock yet."""
    path = Path(root) / "dvc.lock"
    if not path.exists():
        return {}
    import yaml

    # DVC writes this file, so libyaml's parser (when pyyaml has it): 8x faster on a full matrix's lock
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        stages = (yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}).get("stages") or {}  # noqa: S506
    except yaml.YAMLError:
        return {"dvc.stage.unreadable": "true"}

    def wanted(name: str) -> bool:
        if task is None:
            return True
        _, _, item = name.partition("@")
        if item == task:
            return True
        return item.startswith(f"{task}-") and (mechanism is None or item == f"{task}-{mechanism}")

    return {
        f"dvc.stage.{metric_name(name.replace('@', '/'))}": hashlib.sha256(
            json.dumps(entry, sort_keys=True, default=str).encode()
        ).hexdigest()
        for name, entry in sorted(stages.items())
        if wanted(name)
    }


def provenance_tags(
    manifests: dict[str, dict] | None = None,
    task: str | None = None,
    mechanism: str | None = None,
    root: Path = REPO_ROOT,
) -> dict[str, str]:
    """git commit, dvc.lock hash (whole file, and per stage of ``task`` when given) and the data
    manifests' content hashes."""
    root = Path(root)
    tags = {"git_commit": git_commit(root), "dvc_lock_sha256": file_sha256(root / "dvc.lock")}
    if task is not None:
        tags.update(dvc_stage_hashes(task, mechanism, root))
    for split, manifest in (manifests or {}).items():
        tags[f"data.{split}.content_sha256"] = str(manifest.get("content_sha256", "?"))
    return tags


def task_manifests(shards_dir: Path) -> dict[str, dict]:
    """Every split's manifest under ``data/shards/<task>`` (``{split: manifest}``, sorted by split)."""
    return {
        p.parent.name: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(Path(shards_dir).glob("*/manifest.json"))
    }


def pipeline_params(params: dict, task: str) -> dict:
    """The params that define a task's pipeline run: its reader settings (``prepare.<task>``) and
    the effective ``vocab``/``model``/``train``/``evaluate`` sections (the task's overrides applied,
    :func:`pipeline.config.tasks.effective_params`). The task and mechanism lists are left out: adding a
    mechanism does not start another pipeline run for the ones already trained."""
    eff = effective_params(params, task)
    out = {"prepare": (params.get("prepare") or {}).get(task, {})}
    out.update({k: eff.get(k, {}) for k in ("vocab", "model", "train", "evaluate")})
    return out


def pipeline_key(task: str, key_params: dict, manifests: dict[str, dict], commit: str | None = None) -> str:
    """The parent run's key: sha256 (first 16 hex digits) of the task, the git commit, the task's
    params (:func:`pipeline_params`) and its manifests' content hashes. Same inputs, same key, in any
    process."""
    data = {split: m.get("content_sha256", "?") for split, m in sorted(manifests.items())}
    blob = json.dumps(
        {"task": task, "commit": commit if commit is not None else git_commit(), "params": key_params, "data": data},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _param_items(params: dict) -> list[tuple[str, str]]:
    flat = flatten(params)
    return [
        (metric_name(k), (json.dumps(v) if isinstance(v, (list, tuple)) else str(v))[:6000]) for k, v in flat.items()
    ]


EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # the UI opens such an experiment on its runs


def use_experiment(mlflow, name: str):
    """``mlflow.set_experiment(name)``, tagged as a model-training experiment: without the tag,
    MLflow 3's UI guesses the kind and may open the experiment on its (empty) GenAI traces page."""
    exp = mlflow.set_experiment(name)
    key, value = EXPERIMENT_KIND
    if (exp.tags or {}).get(key) != value:
        client = mlflow.MlflowClient()
        try:
            client.set_experiment_tag(exp.experiment_id, key, value)
        except Exception:  # noqa: BLE001 - two stages tagging at once: SQLite's unique key refuses the second
            if (client.get_experiment(exp.experiment_id).tags or {}).get(key) != value:
                raise
    return exp


def describe_experiment(experiment: str, markdown: str) -> None:
    """The experiment's description (its ``mlflow.note.content`` tag). The MLflow UI shows the first
    line above the runs table and the rest when the description is expanded."""
    mlflow = _mlflow()
    exp = use_experiment(mlflow, experiment)
    mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, "mlflow.note.content", markdown)


def parent_run(
    experiment: str,
    task: str,
    key_params: dict,
    manifests: dict[str, dict],
    tags: dict | None = None,
    root: Path = REPO_ROOT,
) -> str:
    """The id of the task's parent run for this pipeline run (``tags.pipeline_key``), created
    (FINISHED, with provenance tags and ``key_params`` as params) when no process made it yet.

    Two processes racing to create it both end up with the oldest one (the other deletes its own):
    after creating, the creator searches again and keeps the earliest by (start time, run id).
    """
    from mlflow.entities import Param

    mlflow = _mlflow()
    client = mlflow.MlflowClient()
    exp = use_experiment(mlflow, experiment)
    key = pipeline_key(task, key_params, manifests, git_commit(Path(root)))
    query = f"tags.pipeline_key = '{key}' and tags.kind = 'pipeline'"

    def find() -> list:
        runs = client.search_runs([exp.experiment_id], query, max_results=100)
        return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))

    found = find()
    if found:
        return found[0].info.run_id
    all_tags = {
        **provenance_tags(manifests, task, None, root),
        **(tags or {}),
        "pipeline_key": key,
        "kind": "pipeline",
        "task": task,
    }
    run = client.create_run(
        exp.experiment_id, run_name=f"pipeline {task} {key[:8]}", tags={k: str(v) for k, v in all_tags.items()}
    )
    run_id = run.info.run_id
    items = _param_items(key_params)
    for start in range(0, len(items), 100):  # MLflow's log_batch takes at most 100 params
        client.log_batch(run_id, params=[Param(k, v) for k, v in items[start : start + 100]])
    client.set_terminated(run_id, "FINISHED")
    winner = find()[0].info.run_id
    if winner != run_id:
        client.delete_run(run_id)
    return winner


def run_metric_logger(run_id: str):
    """``log(metrics, step)`` into an existing run by its id, from any process (a torchrun rank)."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri())

    def log(metrics: dict, step: int) -> None:
        import time

        now = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[
                Metric(metric_name(k), float(v), now, step)
                for k, v in flatten(metrics).items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            ],
        )

    return log


class RunLogger:
    """A thin handle on one MLflow run (created, or reopened from its id).

    ``parent_run_id`` (from :func:`parent_run`) nests the run under its pipeline run: the tag
    ``mlflow.parentRunId`` is set on a new run, and on a reopened one that has none.
    """

    def __init__(
        self,
        experiment: str,
        run_name: str,
        run_id: str | None = None,
        tags: dict | None = None,
        parent_run_id: str | None = None,
    ):
        self.mlflow = _mlflow()
        use_experiment(self.mlflow, experiment)
        parent = {"mlflow.parentRunId": parent_run_id} if parent_run_id else {}
        if run_id is not None and self._exists(run_id):
            self.run = self.mlflow.start_run(run_id=run_id)
            if parent and "mlflow.parentRunId" not in self.run.data.tags:
                self.mlflow.set_tags(parent)
        else:
            self.run = self.mlflow.start_run(run_name=run_name, tags=parent or None)
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
        flat = {
            metric_name(k): float(v)
            for k, v in flatten(metrics, prefix).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self.mlflow.log_metrics(flat, step=step)

    def tags(self, tags: dict) -> None:
        self.mlflow.set_tags(tags)

    def datasets(
        self, task: str, split_dirs: dict[str, Path], stage: str, tags: dict[str, dict[str, str]] | None = None
    ) -> None:
        """The splits (``{split: shard folder}``) as the run's dataset inputs, in their role for
        ``stage`` (:mod:`pipeline.tracking.datasets`); ``tags``: extra input tags per split."""
        datasets, contexts, tags_list = split_inputs(task, split_dirs, stage, tags)
        self.mlflow.log_inputs(datasets=datasets, contexts=contexts, tags_list=tags_list)

    def artifact(self, path: Path, subdir: str | None = None) -> None:
        self.mlflow.log_artifact(str(path), artifact_path=subdir)

    def close(self, status: str = "FINISHED") -> None:
        self.mlflow.end_run(status=status)

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("FAILED" if exc_type else "FINISHED")


def log_to_run(
    run_id: str,
    metrics: dict[str, float] | None = None,
    artifacts: list[Path] = (),
    finished_at_ms: int | None = None,
    tags: dict[str, str] | None = None,
) -> None:
    """Metrics and artifacts on an existing run (the pipeline's parent run), from any process;
    ``finished_at_ms``: mark the run FINISHED at that time (the parent's duration then spans the
    pipeline run instead of its creation only)."""
    import time

    from mlflow.entities import Metric

    client = _mlflow().MlflowClient()
    now = int(time.time() * 1000)
    items = [Metric(metric_name(k), float(v), now, 0) for k, v in (metrics or {}).items()]
    for start in range(0, len(items), 1000):  # log_batch takes at most 1000 metrics
        client.log_batch(run_id, metrics=items[start : start + 1000])
    for path in artifacts:
        client.log_artifact(run_id, str(path))
    for key, value in (tags or {}).items():
        client.set_tag(run_id, key, str(value))
    if finished_at_ms is not None:
        client.set_terminated(run_id, "FINISHED", end_time=finished_at_ms)
